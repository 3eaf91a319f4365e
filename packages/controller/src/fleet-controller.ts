// The controller's state and what it does with it: the fleet being served, the enrolled nodes,
// their reports, and each change (a reload, a rotation, an enrollment) made one at a time, so two
// of them never publish interleaved halves. `startController` opens what it needs and hands it here.
import {
  allReportsSubject,
  enrollSubject,
  type BusAuthority,
  type BusLogger,
  type BusState,
} from "@mesh/bus";
import { planEntries } from "@mesh/manifest";
import type { NatsConnection } from "@nats-io/transport-node";
import { BusAnswers, CONTROLLER_QUEUE } from "./bus-answers.ts";
import type { ControllerObserver } from "./controller-metrics.ts";
import { controllerStatus, type ControllerStatus } from "./controller-status.ts";
import type { CredentialSync } from "./credential-sync.ts";
import { answerEnrollment, type EnrolledNode } from "./enrollment.ts";
import { FleetRefusedError, loadFleetPlan, type FleetPlan } from "./fleet-plan.ts";
import type { JoinSecrets } from "./join-secrets.ts";
import { answerJoinTokenRequest } from "./join-token-request.ts";
import { answerLedgerRead, readLedgerFor, type LedgerReadReply } from "./ledger-reader.ts";
import type { ModuleCredentials } from "./module-credentials.ts";
import type { NodeDeliveries, Published } from "./node-deliveries.ts";
import {
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
} from "./node-permissions.ts";
import { parseReport, reportingNode, type NodeReport } from "./node-reports.ts";
import type { PasswordStore } from "./password-store.ts";
import { answerRotateRequest } from "./rotate-request.ts";
import { STANDINGS_SUBJECT, type StandingsBook } from "./standings-book.ts";
import { storeFleet } from "./stored-fleet.ts";
import {
  relayToolCall,
  serveToolRelay,
  type ToolCall,
  type ToolRelay,
  type ToolRelaySources,
  type ToolReply,
} from "./tool-relay.ts";
import { watchFleetFile, type FleetFileWatch } from "./watch-fleet-file.ts";
import { linesOf, problemsOf } from "./fleet-problems.ts";

/** What a reload did. */
export interface ReloadOutcome {
  /** The nodes whose delivery changed (and their new generation). */
  readonly published: readonly Published[];
  /** Passwords minted for consumers the fleet names for the first time. */
  readonly minted: number;
}

/** A running controller. */
export interface Controller {
  /** Absolute path of the fleet file. */
  readonly fleetFile: string;
  /** The fleet being served: the last one that was read whole and held together. */
  current(): FleetPlan;
  /**
   * Reads the fleet file again and publishes what changed.
   * @throws FleetRefusedError listing every problem; the last good fleet keeps being served.
   */
  reload(): Promise<ReloadOutcome>;
  /**
   * Mints a new password for `consumer`'s `iface` and publishes it to the nodes that need it.
   * @throws UnknownConsumerError when the fleet being served has no such consumer.
   */
  rotate(consumer: string, iface: string): Promise<void>;
  /**
   * `node`'s join token (the same one each time until renewed). It holds a secret: show it only
   * to the person adding the node.
   * @throws UnknownNodeError when the fleet being served has no such node.
   */
  joinToken(node: string): Promise<string>;
  /**
   * A new join token for `node`; the old one is no longer accepted.
   * @throws UnknownNodeError when the fleet being served has no such node.
   */
  renewJoinToken(node: string): Promise<string>;
  /** What `mesh status` shows. */
  status(): ControllerStatus;
  /** Relays a checked tool call (`parseToolCall`) to the module's node, as `mesh tool` is; never throws. */
  tool(call: ToolCall): Promise<ToolReply>;
  /** A module's newest ledger entries, as `mesh ledger` reads them; never throws. */
  ledger(module: string, limit: number): Promise<LedgerReadReply>;
  /** Stops watching, answering and publishing, and closes the bus connection. Idempotent. */
  stop(): Promise<void>;
}

/** A rotation asked for a consumer the fleet does not have. */
export class UnknownConsumerError extends Error {
  override name = "UnknownConsumerError";
  constructor(
    readonly consumer: string,
    readonly iface: string,
  ) {
    super(
      `${consumer} has no ${iface} in the fleet being served: nothing was rotated; ` +
        `mesh status lists each consumer and its interface`,
    );
  }
}

/** A join token asked for a node the fleet does not have. */
export class UnknownNodeError extends Error {
  override name = "UnknownNodeError";
  constructor(readonly node: string) {
    super(
      `${JSON.stringify(node)} is not a node of the fleet being served: add it under nodes: in mesh.yaml first`,
    );
  }
}

/** What a `FleetController` works with, opened by `startController`. */
export interface FleetControllerParts {
  readonly nc: NatsConnection;
  /** Absolute path of the fleet file. */
  readonly fleetFile: string;
  /** The fleet to serve first, and the problems of the fleet file when it was refused (the stored fleet is served). */
  readonly first: { readonly fleet: FleetPlan; readonly refused: readonly string[] | null };
  readonly authority: BusAuthority;
  readonly desired: BusState<unknown>;
  readonly nodesState: BusState<EnrolledNode>;
  /** The enrolled nodes, by name, as read from the nodes bucket (shared with the module credentials' reserved keys). */
  readonly enrolled: Map<string, EnrolledNode>;
  readonly passwords: PasswordStore;
  readonly deliveries: NodeDeliveries;
  readonly joinSecrets: JoinSecrets;
  readonly credentials: ModuleCredentials;
  readonly credentialSync: CredentialSync;
  readonly standings: StandingsBook;
  readonly logger: BusLogger;
  readonly observer?: ControllerObserver;
  /** Watch the fleet file and reload when it changes. */
  readonly watch: boolean;
  /** Closes what was opened for it (the account updates' connection, the bus), after it stops. */
  readonly close: () => Promise<void>;
}

/** The controller at work: it serves one fleet, and changes it one step at a time. */
export class FleetController implements Controller {
  readonly fleetFile: string;
  readonly #p: FleetControllerParts;
  readonly #log: BusLogger;
  #current: FleetPlan;
  #refused: readonly string[] | null;
  readonly #reports = new Map<string, NodeReport>();
  // Nodes whose credentials wait to be synced: one sync however many reports arrive meanwhile.
  readonly #syncing = new Set<string>();
  #queue: Promise<unknown> = Promise.resolve();
  readonly #answers: BusAnswers;
  #tools: ToolRelay | undefined;
  #watcher: FleetFileWatch | undefined;
  #stopped: Promise<void> | undefined;
  readonly #relaySources: ToolRelaySources;

  constructor(parts: FleetControllerParts) {
    this.#p = parts;
    this.#log = parts.logger;
    this.fleetFile = parts.fleetFile;
    this.#current = parts.first.fleet;
    this.#refused = parts.first.refused;
    this.#answers = new BusAnswers(parts.nc, parts.logger);
    this.#relaySources = { fleet: () => this.#current, isEnrolled: (node) => parts.enrolled.has(node) };
  }

  /**
   * Stores and publishes the first fleet, then answers on the bus and watches the fleet file. The
   * first reading is published before anything is answered, so an enrolling node finds a
   * complete delivery.
   * @throws the bus's error when the fleet cannot be stored or published.
   */
  async start(): Promise<void> {
    await storeFleet(this.#p.desired, this.#current);
    await this.#exclusive(() => this.#publishAll());
    this.#answer();
    if (this.#p.watch) this.#watch();
  }

  current(): FleetPlan {
    return this.#current;
  }

  reload(): Promise<ReloadOutcome> {
    return this.#exclusive(async () => {
      let next: FleetPlan;
      try {
        next = await loadFleetPlan(this.fleetFile);
      } catch (err) {
        const problems = problemsOf(err);
        this.#refused = linesOf(err, problems);
        this.#p.observer?.reloaded("refused");
        throw new FleetRefusedError(
          this.fleetFile,
          problems,
          `the mesh keeps serving the last good fleet (read at ${this.#current.readAt})`,
          { cause: err },
        );
      }
      this.#current = next;
      this.#refused = null;
      this.#p.observer?.reloaded("applied");
      // Standings of consumers the fleet no longer has would name failures nobody can fix.
      this.#p.standings.retainPlan(next.plan);
      await storeFleet(this.#p.desired, next);
      return this.#publishAll();
    });
  }

  rotate(consumer: string, iface: string): Promise<void> {
    return this.#exclusive(async () => {
      if (!planEntries(this.#current.plan).some((e) => e.consumer === consumer && e.interface === iface)) {
        throw new UnknownConsumerError(consumer, iface);
      }
      await this.#p.passwords.rotate(consumer, iface);
      this.#p.observer?.rotated();
      await this.#publishAll();
    });
  }

  async joinToken(node: string): Promise<string> {
    this.#knownNode(node);
    return this.#exclusive(() => this.#p.joinSecrets.tokenFor(node));
  }

  async renewJoinToken(node: string): Promise<string> {
    this.#knownNode(node);
    return this.#exclusive(() => this.#p.joinSecrets.renew(node));
  }

  status(): ControllerStatus {
    return controllerStatus({
      plan: this.#current.plan,
      fleetFile: this.fleetFile,
      readAt: this.#current.readAt,
      refused: this.#refused,
      fleetNodes: this.#current.nodes,
      enrolled: new Set(this.#p.enrolled.keys()),
      reports: this.#reports,
      failing: this.#p.standings.failing(),
    });
  }

  // The dashboard's way in: the same relay and ledger read as the operator's requests on the bus.
  tool(call: ToolCall): Promise<ToolReply> {
    return relayToolCall(this.#p.nc, call, this.#relaySources);
  }

  ledger(module: string, limit: number): Promise<LedgerReadReply> {
    return readLedgerFor(this.#p.nc, { module, limit }, (m) => this.#isFleetModule(m));
  }

  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#watcher?.close();
      await this.#queue;
      await this.#answers.stop();
      await this.#tools?.stop();
      await this.#p.close();
    })();
    return this.#stopped;
  }

  // One change at a time: a reload, a rotation and an enrollment each see the others whole.
  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  #knownNode(node: string): void {
    if (!this.#current.nodes.includes(node) && !this.#p.enrolled.has(node)) throw new UnknownNodeError(node);
  }

  #isFleetModule(module: string): boolean {
    return this.#current.modules.some((m) => m.name === module);
  }

  // Publishes `node`'s delivery from the fleet being served, saying so when it changed.
  async #publishNode(node: string): Promise<Published> {
    const result = await this.#p.deliveries.publish(
      node,
      this.#current,
      this.#p.enrolled.get(node),
      this.#p.credentials.forNode(node, this.#current),
    );
    if (result.changed)
      this.#log.info(`published generation ${result.generation} of node ${node}'s delivery`);
    return result;
  }

  async #publishAll(): Promise<ReloadOutcome> {
    const { passwords, enrolled, credentials, credentialSync } = this.#p;
    const before = passwords.minted;
    await passwords.ensureAll(planEntries(this.#current.plan));
    const minted = passwords.minted - before;
    if (minted > 0)
      this.#log.info(`minted ${minted} password(s) for consumers new to the fleet, kept sealed`);
    this.#p.observer?.minted(minted);
    const published: Published[] = [];
    const nodes = [...new Set([...this.#current.nodes, ...enrolled.keys()])].sort();
    // A node gone from the fleet and never enrolled may still hold credentials: they are revoked.
    for (const node of new Set([...nodes, ...credentials.nodes()])) {
      await credentialSync.sync(node, this.#current, enrolled.has(node));
    }
    for (const node of nodes) {
      const result = await this.#publishNode(node);
      if (result.changed) published.push(result);
    }
    await credentialSync.revokeRetired();
    return { published, minted };
  }

  // A node reported module keys not issued for: issue them and publish its delivery.
  #syncNode(node: string): void {
    if (this.#syncing.has(node)) return;
    this.#syncing.add(node);
    this.#exclusive(async () => {
      this.#syncing.delete(node);
      await this.#p.credentialSync.sync(node, this.#current, this.#p.enrolled.has(node));
      await this.#publishNode(node);
      await this.#p.credentialSync.revokeRetired();
    }).catch((err: unknown) =>
      this.#log.error(`node ${node}'s delivery could not be published: ${(err as Error).message}`),
    );
  }

  #enroll(record: EnrolledNode): Promise<void> {
    return this.#exclusive(async () => {
      await this.#p.nodesState.put(record.node, record);
      this.#p.enrolled.set(record.node, record);
      this.#log.info(`node ${record.node} enrolled (NATS key ${record.natsPublicKey})`);
      await this.#publishNode(record.node);
    });
  }

  // What the controller answers on the bus.
  #answer(): void {
    const { nc, joinSecrets, authority } = this.#p;
    const answers = this.#answers;
    answers.answer(enrollSubject(), true, async (data) => {
      const reply = await answerEnrollment({ joinSecrets, authority, enroll: (r) => this.#enroll(r) }, data);
      if (!reply.ok) this.#log.warn(`an enrollment was refused: ${reply.error}`);
      return reply;
    });
    answers.answer(STATUS_SUBJECT, true, () => Promise.resolve(this.status()));
    // Apart from the answers, which go one at a time: a slow delete must not hold up the next tool.
    this.#tools = serveToolRelay({ nc, logger: this.#log, queue: CONTROLLER_QUEUE, ...this.#relaySources });
    answers.answer(LEDGER_READ_SUBJECT, true, (data) =>
      answerLedgerRead(nc, data, (m) => this.#isFleetModule(m)),
    );
    // `mesh plan` compares a fleet file with what is served; it reads, never changes.
    answers.answer(SERVED_FLEET_SUBJECT, true, async () => ({
      ok: true,
      fleet: this.#current,
      keptPasswords: await this.#p.passwords.keys(),
    }));
    answers.answer(JOIN_TOKEN_SUBJECT, true, (data) =>
      answerJoinTokenRequest(data, (node, renew) =>
        renew ? this.renewJoinToken(node) : this.joinToken(node),
      ),
    );
    answers.answer(ROTATE_SUBJECT, true, (data) => answerRotateRequest(data, (c, i) => this.rotate(c, i)));
    answers.answer(allReportsSubject(), false, (data, subject) => {
      const node = reportingNode(subject);
      const report = node !== undefined ? parseReport(node, data, new Date()) : undefined;
      if (node !== undefined && report !== undefined) {
        this.#reports.set(node, report);
        if (this.#p.credentials.report(node, report.moduleKeys, this.#current)) this.#syncNode(node);
      }
      return Promise.resolve(undefined);
    });
    // Not queued: every controller keeps its own book of what the providers say.
    answers.answer(STANDINGS_SUBJECT, false, (data, subject) => {
      this.#p.standings.take(subject, data);
      return Promise.resolve(undefined);
    });
  }

  #watch(): void {
    this.#watcher = watchFleetFile(
      this.fleetFile,
      () => {
        this.reload().then(
          (outcome) =>
            this.#log.info(
              `read the fleet file ${this.fleetFile} again: ${outcome.published.length} node(s) got a new delivery` +
                (outcome.minted > 0 ? `, ${outcome.minted} password(s) minted` : ""),
            ),
          (err: unknown) => this.#log.error((err as Error).message),
        );
      },
      this.#log,
    );
  }
}
