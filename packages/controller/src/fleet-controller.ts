// The controller's state and what it does with it: the fleet being served, the enrolled nodes,
// their reports, and each change (a reload, a rotation, an enrollment) made one at a time, so two
// of them never publish interleaved halves. `startController` opens what it needs and hands it here.
//
// A controller leads or stands by, as its lease says (`ControllerLease`). Both answer status, the
// ledger and the served fleet. Only the leader mints, seals, delivers, revokes, enrolls, relays
// tools and answers rotations and join tokens, and it checks its lease before each of them; a
// standby serves the fleet stored in KV and follows it, and serves it when it takes over.
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
import { LedgerRecorder } from "./ledger-recorder.ts";
import type { ModuleCredentials } from "./module-credentials.ts";
import type { ModuleLedgers } from "./module-ledgers.ts";
import type { NodeDeliveries, Published } from "./node-deliveries.ts";
import {
  CONTROLLERS_SUBJECT,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
} from "./node-permissions.ts";
import { parseReport, reportingNode, type NodeReport } from "./node-reports.ts";
import { BusCannotStoreError, type PasswordStore } from "./password-store.ts";
import { PendingWrites, WriteWaitsError, type WaitingWrite } from "./pending-writes.ts";
import { answerRotateRequest, ROTATE_SURFACE, type RotationRecord } from "./rotate-request.ts";
import { STANDINGS_SUBJECT, type StandingsBook } from "./standings-book.ts";
import type { ControllerLease, LeaseTimings } from "./controller-lease.ts";
import { LeaseDriver } from "./lease-driver.ts";
import { loadStoredFleet, loadStoredFleetHead, readStoredFleet, storeFleet } from "./stored-fleet.ts";
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
   * Mints a new password for `consumer`'s `iface`, asked by `who` (default `unknown`), and publishes
   * it to the nodes that need it. The rotation, or its failure, is recorded (who, when; never the
   * password) in the consumer's ledger and in its provider's; `ledger` in the answer says why a
   * record is missing.
   * @throws UnknownConsumerError when the fleet being served has no such consumer.
   */
  rotate(consumer: string, iface: string, who?: string): Promise<{ readonly ledger?: string }>;
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
  /**
   * Whether this controller leads now (holds the lease). A standby answers status, the ledger
   * and the served fleet; its writes (rotate, join tokens, reload) throw NotLeaderError.
   */
  leading(): boolean;
  /** Which controller leads, as this one last saw the lease. */
  leader(): LeaderStatus;
  /**
   * The dashboard's tool call: relayed (`parseToolCall`'s checks) to the module's node as `mesh
   * tool`'s are, and recorded as asked through the dashboard. Never throws.
   */
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

/** Asked of a controller that stands by: another one leads. */
export class NotLeaderError extends Error {
  override name = "NotLeaderError";
  constructor(
    readonly what: string,
    readonly leader: string | null,
    readonly term: number | null,
  ) {
    super(
      `this controller stands by and does not ${what}: ` +
        (leader !== null
          ? `controller ${leader} leads (term ${term}); ask it`
          : "no controller leads yet; try again") +
        `, or wait for this one to take over (mesh status names the leader)`,
    );
  }
}

/** Which controller leads, as `mesh status` shows it. */
export interface LeaderStatus {
  /** This controller's id. */
  readonly self: string;
  /** Whether this controller leads now. */
  readonly leading: boolean;
  /** The id of the controller holding the lease as this one last saw it, or null when none does. */
  readonly leader: string | null;
  /** The lease's term as last seen, or null. */
  readonly term: number | null;
  /** The lease term in which the fleet being served was stored (0: before terms), or null when unknown. */
  readonly fleetTerm: number | null;
}

/** What the leader writes through, each keeping some of what it read from the bus in memory. */
export interface LeaderStores {
  readonly passwords: PasswordStore;
  readonly deliveries: NodeDeliveries;
  readonly joinSecrets: JoinSecrets;
  readonly credentials: ModuleCredentials;
  readonly credentialSync: CredentialSync;
  /** The modules' ledgers, made apart from the queue (a closed one makes nothing more). */
  readonly ledgers: ModuleLedgers;
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
  /** The stores only a leader writes, as opened at start. */
  readonly stores: LeaderStores;
  /**
   * Opens the leader's stores again from the bus, and reads the enrolled nodes again into
   * `enrolled`: a controller that takes over must not act on what it remembers from before it
   * stood by (another leader minted, rotated, enrolled and issued meanwhile).
   */
  readonly openStores: () => Promise<LeaderStores>;
  readonly standings: StandingsBook;
  readonly logger: BusLogger;
  readonly observer?: ControllerObserver;
  /** Watch the fleet file and reload when it changes. */
  readonly watch: boolean;
  /** Closes what was opened for it (the account updates' connection, the bus), after it stops. */
  readonly close: () => Promise<void>;
  /** The lease that says whether it leads, and the bucket it is kept in. */
  readonly lease: ControllerLease;
  readonly leaseBucket: BusState<unknown>;
  readonly leaseTimings: LeaseTimings;
  /** The monotonic clock the lease is measured on (ms). */
  readonly now: () => number;
  /**
   * Started as a standby (`mesh controller --standby-of`): when it takes over it serves the stored
   * fleet, and applies its fleet file only when the file changes next. Otherwise a controller that
   * leads from its start applies its fleet file when it differs from the stored fleet's.
   */
  readonly standby: boolean;
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
  // What the controller records in module ledgers itself: rotations, and calls no agent recorded.
  readonly #records: LedgerRecorder;
  readonly #driver: LeaseDriver;
  #s: LeaderStores;
  // Nothing accepted is dropped: what the bus cannot store now is tried again until it is (while
  // this controller leads: a standby drops what waited, the new leader publishes it all again).
  #pending: PendingWrites;
  // Whether the stores may hold what another leader changed since (this one stood by).
  #stale = false;
  // The restores resumed from the password store and not settled yet, by key (tried in `#pending`).
  readonly #restoring = new Set<string>();
  // What only the leader answers, while it leads.
  #leaderAnswers: BusAnswers | undefined;
  // Whether the fleet file is applied when this controller first leads (see `standby`).
  #applyFileFirst: boolean;
  // A fleet this controller accepted and the bus has not stored yet (since when, on the wall
  // clock): kept across a lapse of its own lease, and applied again when it leads again in the
  // same term (nobody else led meanwhile).
  #unstored: { readonly readAt: string; readonly since: number } | undefined;
  // When the fleet file changed while this controller's own lease had lapsed (applied when it leads again).
  #fileChangedAt: number | undefined;
  // The term this controller last led in.
  #ledTerm: number | undefined;
  #fleetTerm: number | null = null;
  #storedSha: string | undefined;
  #answeredOnce = false;
  #failedFirst: unknown;

  constructor(parts: FleetControllerParts) {
    this.#p = parts;
    this.#s = this.#use(parts.stores);
    this.#pending = this.#newPending();
    this.#log = parts.logger;
    this.fleetFile = parts.fleetFile;
    this.#current = parts.first.fleet;
    this.#refused = parts.first.refused;
    this.#answers = new BusAnswers(parts.nc, parts.logger);
    this.#records = new LedgerRecorder(parts.nc, parts.logger);
    this.#relaySources = {
      fleet: () => this.#current,
      isEnrolled: (node) => parts.enrolled.has(node),
      records: this.#records,
    };
    this.#applyFileFirst = !parts.standby;
    this.#driver = new LeaseDriver({
      bucket: parts.leaseBucket,
      lease: parts.lease,
      timings: parts.leaseTimings,
      now: parts.now,
      logger: parts.logger,
      changed: (leading) => (leading ? this.#lead() : this.#standBy()),
      idle: () => this.#follow(),
    });
  }

  /**
   * Reads the lease and, when this controller leads, stores and publishes its fleet; then answers
   * on the bus, keeps the lease, and watches the fleet file. The first reading is published before
   * anything is answered, so an enrolling node finds a complete delivery.
   * @throws the bus's error when the fleet cannot be stored or published.
   */
  async start(): Promise<void> {
    await this.#driver.tick();
    if (this.#failedFirst !== undefined) {
      await this.#driver.stop();
      throw this.#failedFirst;
    }
    if (!this.#p.lease.leading()) {
      this.#stale = true;
      await this.#follow();
    }
    this.#answer();
    this.#driver.start();
    if (this.#p.watch) this.#watch();
  }

  leading(): boolean {
    return this.#p.lease.leading();
  }

  leader(): LeaderStatus {
    const seen = this.#p.lease.seen();
    return {
      self: this.#p.lease.self,
      leading: this.leading(),
      leader: seen?.holder ?? null,
      term: seen?.term ?? null,
      fleetTerm: this.#fleetTerm,
    };
  }

  /**
   * A test's way to pause this controller as SIGSTOP would its lease: its renewals stop (the
   * lease runs out on its own clock, and a standby takes over); the returned function resumes.
   */
  pause(): () => void {
    return this.#driver.pause();
  }

  current(): FleetPlan {
    return this.#current;
  }

  reload(): Promise<ReloadOutcome> {
    return this.#exclusive(async () => {
      this.#mustLead("apply the fleet file");
      return this.#applyFile();
    });
  }

  // Reads the fleet file (and the manifests it names) and, when the fleet it makes differs from
  // the one stored, serves and stores it; then publishes what changed.
  async #applyFile(counted = true): Promise<ReloadOutcome> {
    let next: FleetPlan;
    try {
      next = await loadFleetPlan(this.fleetFile);
    } catch (err) {
      const problems = problemsOf(err);
      this.#refused = linesOf(err, problems);
      if (counted) this.#p.observer?.reloaded("refused");
      throw new FleetRefusedError(
        this.fleetFile,
        problems,
        `the mesh keeps serving the last good fleet (read at ${this.#current.readAt})`,
        { cause: err },
      );
    }
    this.#refused = null;
    if (counted) this.#p.observer?.reloaded("applied");
    // The same fleet as the one stored is not stored again: the stored one (and its term) stands.
    // One accepted and not stored yet is served, not stored: it is stored now.
    if (
      this.#storedSha === undefined ||
      this.#unstored !== undefined ||
      fleetText(next) !== fleetText(this.#current)
    ) {
      this.#current = next;
      // Standings of consumers the fleet no longer has would name failures nobody can fix.
      this.#p.standings.retainPlan(next.plan);
      const stored = next;
      this.#unstored = { readAt: next.readAt, since: this.#unstored?.since ?? Date.now() };
      return this.#pending.attempt("fleet", `the fleet read at ${next.readAt}`, async () => {
        await this.#store(stored);
        return this.#publishAll();
      });
    }
    // The stored fleet is this one already (a write the bus did not confirm may have landed late).
    this.#unstored = undefined;
    return this.#publishAll();
  }

  // Stores the fleet being served, in this leader's term.
  async #store(fleet: FleetPlan): Promise<void> {
    const term = this.#mustLead("store the fleet");
    this.#storedSha = (await storeFleet(this.#p.desired, fleet, { term })).sha256;
    if (this.#unstored?.readAt === fleet.readAt) this.#unstored = undefined;
    this.#fleetTerm = term;
  }

  async rotate(consumer: string, iface: string, who = "unknown"): Promise<{ readonly ledger?: string }> {
    const at = new Date().toISOString();
    try {
      await this.#rotate(consumer, iface);
    } catch (err) {
      // A standby carried nothing: only a rotation this controller tried is its to record. Not
      // waited for: a bus that could not store the password may not take the record either, and
      // the refusal is answered at once (a record that fails is said in the log).
      if (!(err instanceof NotLeaderError)) {
        void this.#recordRotation({ consumer, interface: iface, who, at }, (err as Error).message).catch(
          () => undefined,
        );
      }
      throw err;
    }
    const ledger = await this.#recordRotation({ consumer, interface: iface, who, at });
    return ledger === undefined ? {} : { ledger };
  }

  // The rotation in the consumer's ledger and its provider's, as far as the fleet names them;
  // answers why a record is missing (undefined when each was written).
  async #recordRotation(
    asked: Omit<RotationRecord, "via" | "ok" | "provider" | "login">,
    error?: string,
  ): Promise<string | undefined> {
    const entry = planEntries(this.#current.plan).find(
      (e) => e.consumer === asked.consumer && e.interface === asked.interface,
    );
    const record: RotationRecord = {
      ...asked,
      ...(entry === undefined ? {} : { provider: entry.provider, login: entry.login }),
      via: ROTATE_SURFACE,
      ...(error === undefined ? { ok: true } : { ok: false, error }),
    };
    const modules = [asked.consumer, entry?.provider].filter(
      (m, i, all): m is string => m !== undefined && all.indexOf(m) === i && this.#isFleetModule(m),
    );
    const problems = await Promise.all(modules.map((m) => this.#records.record(m, "rotate", record)));
    const missing = problems.filter((p) => p !== undefined);
    return missing.length === 0 ? undefined : missing.join("; ");
  }

  #rotate(consumer: string, iface: string): Promise<void> {
    return this.#exclusive(async () => {
      this.#mustLead("rotate passwords");
      if (!planEntries(this.#current.plan).some((e) => e.consumer === consumer && e.interface === iface)) {
        throw new UnknownConsumerError(consumer, iface);
      }
      try {
        await this.#s.passwords.rotate(consumer, iface);
      } catch (err) {
        if (err instanceof BusCannotStoreError) this.#restoreLater(err.what, err.restore);
        throw err;
      }
      this.#p.observer?.rotated();
      await this.#pending
        .attempt("deliveries", "the deliveries of a rotation", () => this.#publishAll())
        .catch((err: unknown) => {
          if (!(err instanceof WriteWaitsError)) throw err;
          this.#log.warn(err.message);
        });
    });
  }

  // A rotation the bus did not confirm: the old password is put back until the bus stores it (run
  // in the queue, after this rotation's answer), so that a new one committed late never stands.
  // `since` (wall clock, ms) is when it was refused, for a restore resumed from the restores file.
  #restoreLater(refused: string, restore: () => Promise<void>, since?: number): void {
    const what = `the settling of ${refused}'s rotation the bus did not confirm (the password before it is put back, unless a later one is stored)`;
    queueMicrotask(() => {
      // Only the leader writes: a retry that finds this controller standing by writes nothing.
      const leading = (): Promise<void> => {
        this.#mustLead("restore passwords");
        return restore();
      };
      void this.#exclusive(() => this.#pending.attempt(`restore ${refused}`, what, leading, since)).catch(
        (err: unknown) => {
          if (!(err instanceof WriteWaitsError)) this.#log.warn(`${what}: ${(err as Error).message}`);
        },
      );
    });
  }

  // What the restores file says is still to undo (a rotation refused before this controller was
  // killed, or before it stood by), or a rotation nobody confirmed found in the bus: resumed when
  // this controller leads, since only the leader writes. Each once until it is settled.
  #resumeRestores(): void {
    const passwords = this.#s.passwords;
    for (const r of passwords.pendingRestores()) {
      if (this.#restoring.has(r.key)) continue;
      this.#restoring.add(r.key);
      const since = Date.parse(r.since);
      this.#restoreLater(
        `${r.consumer}'s ${r.interface}`,
        async () => {
          await passwords.restore(r.key);
          this.#restoring.delete(r.key);
        },
        Number.isNaN(since) ? undefined : since,
      );
    }
  }

  async joinToken(node: string): Promise<string> {
    this.#mustLead("give join tokens");
    this.#knownNode(node);
    return this.#exclusive(() => this.#s.joinSecrets.tokenFor(node));
  }

  async renewJoinToken(node: string): Promise<string> {
    this.#mustLead("make join tokens");
    this.#knownNode(node);
    return this.#exclusive(() => this.#s.joinSecrets.renew(node));
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
      leader: this.leader(),
      waiting: [...this.#pending.waiting(), ...this.#s.ledgers.waiting(), ...this.#waitsToLead()].sort(
        (a, b) => a.since.localeCompare(b.since),
      ),
    });
  }

  // The dashboard's way in: the same relay and ledger read as the operator's requests on the bus.
  tool(call: ToolCall): Promise<ToolReply> {
    if (!this.leading()) {
      return Promise.resolve({
        ok: false,
        error: this.#notLeader("relay tools").message,
        code: "not-leader",
      });
    }
    return relayToolCall(this.#p.nc, { ...call, via: "dashboard" }, this.#relaySources);
  }

  ledger(module: string, limit: number): Promise<LedgerReadReply> {
    return readLedgerFor(this.#p.nc, { module, limit }, (m) => this.#isFleetModule(m));
  }

  stop(): Promise<void> {
    this.#stopped ??= (async () => {
      this.#watcher?.close();
      this.#pending.close();
      this.#s.ledgers.close();
      await this.#driver.stop();
      await this.#queue;
      await this.#answers.stop();
      await this.#leaderAnswers?.stop();
      await this.#tools?.stop();
      await this.#p.close();
    })();
    return this.#stopped;
  }

  // An accepted fleet that waits for this controller to lead again (its lease lapsed while the
  // bus could not store it) and to store it then, as `mesh status` lists it.
  #waitsToLead(): WaitingWrite[] {
    if (this.#unstored === undefined) return [];
    const what = `the fleet read at ${this.#unstored.readAt}`;
    // Still tried (the lease lapsed on the clock, and this controller is told at its next reading).
    if (this.#pending.waiting().some((w) => w.what === what)) return [];
    const since = new Date(this.#unstored.since).toISOString();
    return [
      {
        what,
        since,
        attempts: 0,
        error: this.leading()
          ? "this controller leads again and stores it next"
          : "this controller stands by until the bus renews its lease; it stores the fleet then",
        nextAt: new Date().toISOString(),
      },
    ];
  }

  // A module's ledger made in the background: the nodes that run it are issued its credentials.
  #use(stores: LeaderStores): LeaderStores {
    stores.ledgers.whenMade((module) => {
      const node = this.#current.modules.find((m) => m.name === module)?.node;
      if (node !== undefined) this.#syncNode(node);
    });
    return stores;
  }

  #newPending(): PendingWrites {
    return new PendingWrites({ logger: this.#p.logger, run: (fn) => this.#exclusive(fn) });
  }

  // One change at a time: a reload, a rotation and an enrollment each see the others whole.
  #exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  // The term this controller leads in; it throws when it does not lead now (checked before each
  // write, so a leader whose lease ran out stops at once, even halfway through a change).
  #mustLead(what: string): number {
    const term = this.#p.lease.term();
    if (term === undefined) throw this.#notLeader(what);
    return term;
  }

  #notLeader(what: string): NotLeaderError {
    const seen = this.#p.lease.seen();
    const other = seen !== undefined && seen.holder !== this.#p.lease.self;
    return new NotLeaderError(what, other ? seen.holder : null, other ? seen.term : null);
  }

  // This controller leads now: it serves the stored fleet (or, at its own start, its fleet file
  // when that differs), publishes it in its term, and answers what only the leader answers.
  async #lead(): Promise<void> {
    const term = this.#p.lease.term();
    this.#log.info(`controller ${this.#p.lease.self} leads the mesh in term ${term}`);
    const ledBefore = this.#ledTerm;
    this.#ledTerm = term;
    const serve = async (): Promise<void> => {
      if (this.#stale) {
        // Its own lease lapsed and it took it back in the same term: nobody led meanwhile, so
        // what it holds is what the bus holds. Opened again, the stores would list buckets'
        // keys, which waits for JetStream to place a consumer (tens of seconds when it places
        // it on a server that has just gone down, as after one is killed).
        if (term !== undefined && ledBefore === term) this.#s.ledgers.reopen();
        else {
          this.#s.ledgers.close();
          this.#s = this.#use(await this.#p.openStores());
        }
        this.#stale = false;
      }
      this.#resumeRestores();
      // Read, or this serving is tried again: a fleet that cannot be read now is not "none stored".
      const stored = await readStoredFleet(this.#p.desired);
      const head = await loadStoredFleetHead(this.#p.desired);
      if (stored !== undefined && stored.fleetFile === this.fleetFile && head !== undefined) {
        this.#current = stored;
        this.#storedSha = head.sha256;
        this.#fleetTerm = head.term;
      }
      // It led before, accepted a fleet the bus did not store, and its lease lapsed: when no
      // other leader stored a fleet since, the accepted one is applied again, not dropped.
      if (this.#fileChangedAt !== undefined) {
        this.#fileChangedAt = undefined;
        if (ledBefore !== undefined && (head?.term ?? 0) <= ledBefore) this.#applyFileFirst = true;
      }
      if (this.#unstored !== undefined) {
        if (ledBefore !== undefined && (head?.term ?? 0) <= ledBefore) this.#applyFileFirst = true;
        else {
          this.#log.warn(
            `the fleet read at ${this.#unstored.readAt} was not stored before another controller ` +
              `stored its own: that one is served; save the fleet file again to apply it`,
          );
          this.#unstored = undefined;
        }
      }
      if (this.#applyFileFirst || stored === undefined) {
        this.#applyFileFirst = false;
        // When the file is refused now, the fleet read at start (its last good one) is served.
        await this.#applyFile(false).catch(async (err: unknown) => {
          // Not applied (the bus failed halfway): the next try of this serving applies it again.
          if (!(err instanceof FleetRefusedError)) {
            this.#applyFileFirst = true;
            throw err;
          }
          if (stored === undefined) await this.#store(this.#current);
          await this.#publishAll();
        });
      } else {
        await this.#publishAll();
      }
    };
    try {
      // At its start, a failure fails the start; later (the lease taken again while the bus is
      // slow), serving waits and is tried again, and this controller answers as leader meanwhile:
      // a leader that answers nothing would stop every rotation and join token.
      await this.#exclusive(() =>
        this.#answeredOnce
          ? this.#pending.attempt("lead", `the fleet served in term ${term}`, serve)
          : serve(),
      );
    } catch (err) {
      if (!this.#answeredOnce) {
        this.#failedFirst = err;
        return;
      }
      this.#log.warn(`controller ${this.#p.lease.self} leads, but ${(err as Error).message}`);
    }
    this.#answerAsLeader();
  }

  // This controller no longer leads: it stops answering what only the leader answers.
  async #standBy(): Promise<void> {
    const seen = this.#p.lease.seen();
    this.#log.warn(
      `controller ${this.#p.lease.self} stands by` +
        (seen !== undefined && seen.holder !== this.#p.lease.self
          ? `: controller ${seen.holder} leads in term ${seen.term}`
          : ": its lease was not renewed in time"),
    );
    this.#stale = true;
    this.#pending.close();
    this.#s.ledgers.close();
    this.#pending = this.#newPending();
    // Dropped with what waited; resumed when it leads again.
    this.#restoring.clear();
    const answers = this.#leaderAnswers;
    const tools = this.#tools;
    this.#leaderAnswers = undefined;
    this.#tools = undefined;
    await answers?.stop();
    await tools?.stop();
  }

  // A standby follows the fleet stored by the leader, so its status and `mesh plan` show it.
  async #follow(): Promise<void> {
    const head = await loadStoredFleetHead(this.#p.desired);
    if (head === undefined || head.sha256 === this.#storedSha) return;
    const stored = await loadStoredFleet(this.#p.desired);
    if (stored === undefined || stored.fleetFile !== this.fleetFile) return;
    // It may have taken up the lead while it read (following runs beside the lease's readings):
    // then what it serves is what leading read or stored, never this older reading.
    if (this.leading()) return;
    this.#current = stored;
    this.#storedSha = head.sha256;
    this.#fleetTerm = head.term;
    this.#p.standings.retainPlan(stored.plan);
  }

  #knownNode(node: string): void {
    if (!this.#current.nodes.includes(node) && !this.#p.enrolled.has(node)) throw new UnknownNodeError(node);
  }

  #isFleetModule(module: string): boolean {
    return this.#current.modules.some((m) => m.name === module);
  }

  // Publishes `node`'s delivery from the fleet being served, saying so when it changed.
  async #publishNode(node: string): Promise<Published> {
    const term = this.#mustLead("publish deliveries");
    const result = await this.#s.deliveries.publish(
      node,
      this.#current,
      this.#p.enrolled.get(node),
      this.#s.credentials.forNode(node, this.#current),
      term,
      // Again right before the write, in this same term: every await since may have outlasted the lease.
      () => {
        if (this.#mustLead("publish deliveries") !== term) throw this.#notLeader("publish deliveries");
      },
    );
    if (result.changed)
      this.#log.info(`published generation ${result.generation} of node ${node}'s delivery`);
    return result;
  }

  async #publishAll(): Promise<ReloadOutcome> {
    const { passwords, credentials, credentialSync } = this.#s;
    const { enrolled } = this.#p;
    this.#mustLead("mint passwords");
    const before = passwords.minted;
    await passwords.ensureAll(planEntries(this.#current.plan));
    // Reading them may have found a rotation nobody confirmed (its controller killed meanwhile).
    this.#resumeRestores();
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
      if (!enrolled.has(node)) {
        // Its bucket is made apart: a node that has not enrolled is nothing to wait for.
        this.#s.ledgers.nodeBucket(node, () => this.#s.deliveries.bucket(node));
        continue;
      }
      try {
        const result = await this.#publishNode(node);
        if (result.changed) published.push(result);
      } catch (err) {
        if (err instanceof NotLeaderError) throw err;
        this.#deliverLater(node, err);
      }
    }
    await credentialSync.revokeRetired();
    return { published, minted };
  }

  // The fleet file changed while the lease waited to be renewed: applied once this controller
  // leads again (tried again until then; if it stands by meanwhile, `#lead` applies it).
  #applyWhenLeading(): void {
    const what = `the fleet file as saved at ${new Date().toISOString()}`;
    void this.#exclusive(() =>
      this.#pending.attempt("fleet file", what, async () => {
        this.#mustLead("apply the fleet file");
        this.#fileChangedAt = undefined;
        await this.#applyFile().catch((err: unknown) => {
          // A refused file is said; it is not tried again until it changes.
          if (!(err instanceof FleetRefusedError)) throw err;
          this.#log.error(err.message);
        });
      }),
    ).catch((err: unknown) => {
      if (!(err instanceof WriteWaitsError)) this.#log.warn(`${what}: ${(err as Error).message}`);
    });
  }

  // One node's delivery the bus did not take (its bucket's server is being replaced, say): it waits
  // and is tried again on its own, so that the other nodes' deliveries, and the change that made
  // them, do not wait for it.
  #deliverLater(node: string, refused: unknown): void {
    this.#log.warn(
      `node ${node}'s delivery waits: the bus did not take it (${(refused as Error).message}); it is tried again until stored`,
    );
    let first: unknown = refused;
    this.#pending
      .attempt(`delivery ${node}`, `node ${node}'s delivery`, async () => {
        if (first !== undefined) {
          const err = first;
          first = undefined;
          throw err;
        }
        await this.#publishNode(node);
      })
      .catch((err: unknown) => {
        if (!(err instanceof WriteWaitsError)) this.#log.warn((err as Error).message);
      });
  }

  // A node reported module keys not issued for: issue them and publish its delivery.
  #syncNode(node: string): void {
    if (this.#syncing.has(node) || !this.leading()) return;
    this.#syncing.add(node);
    this.#exclusive(async () => {
      this.#syncing.delete(node);
      await this.#pending.attempt(`delivery ${node}`, `node ${node}'s delivery`, async () => {
        await this.#s.credentialSync.sync(node, this.#current, this.#p.enrolled.has(node));
        await this.#publishNode(node);
      });
      await this.#s.credentialSync.revokeRetired();
    }).catch((err: unknown) =>
      this.#log.error(`node ${node}'s delivery could not be published: ${(err as Error).message}`),
    );
  }

  #enroll(record: EnrolledNode): Promise<void> {
    return this.#exclusive(async () => {
      this.#mustLead("enroll nodes");
      await this.#p.nodesState.put(record.node, record);
      this.#p.enrolled.set(record.node, record);
      this.#log.info(`node ${record.node} enrolled (NATS key ${record.natsPublicKey})`);
      await this.#publishNode(record.node);
    });
  }

  // What only the leader answers (every write), from when it leads until it stands by.
  #answerAsLeader(): void {
    if (this.#leaderAnswers !== undefined || this.#stopped !== undefined) return;
    const { nc, authority } = this.#p;
    const { joinSecrets } = this.#s;
    const answers = (this.#leaderAnswers = new BusAnswers(nc, this.#log));
    answers.answer(enrollSubject(), true, async (data) => {
      const reply = await answerEnrollment({ joinSecrets, authority, enroll: (r) => this.#enroll(r) }, data);
      if (!reply.ok) this.#log.warn(`an enrollment was refused: ${reply.error}`);
      return reply;
    });
    // Apart from the answers, which go one at a time: a slow delete must not hold up the next tool.
    this.#tools = serveToolRelay({ nc, logger: this.#log, queue: CONTROLLER_QUEUE, ...this.#relaySources });
    answers.answer(JOIN_TOKEN_SUBJECT, true, (data) =>
      answerJoinTokenRequest(data, (node, renew) =>
        renew ? this.renewJoinToken(node) : this.joinToken(node),
      ),
    );
    answers.answer(ROTATE_SUBJECT, true, (data) =>
      answerRotateRequest(data, (c, i, who) => this.rotate(c, i, who)),
    );
  }

  // What every controller answers on the bus, leading or standing by.
  #answer(): void {
    this.#answeredOnce = true;
    const { nc } = this.#p;
    const answers = this.#answers;
    answers.answer(STATUS_SUBJECT, true, () => Promise.resolve(this.status()));
    // Every controller, not one of the queue: a person's CLI names the leader and the standbys.
    answers.answer(CONTROLLERS_SUBJECT, false, () => Promise.resolve(this.leader()));
    answers.answer(LEDGER_READ_SUBJECT, true, (data) =>
      answerLedgerRead(nc, data, (m) => this.#isFleetModule(m)),
    );
    // `mesh plan` compares a fleet file with what is served; it reads, never changes. Answered
    // between changes, never in the middle of one: a fleet accepted and its passwords not minted
    // yet would be said to need passwords that are being minted.
    answers.answer(SERVED_FLEET_SUBJECT, true, () =>
      this.#exclusive(async () => ({
        ok: true,
        fleet: this.#current,
        keptPasswords: await this.#s.passwords.keys(),
      })),
    );
    answers.answer(allReportsSubject(), false, (data, subject) => {
      const node = reportingNode(subject);
      const report = node !== undefined ? parseReport(node, data, new Date()) : undefined;
      if (node !== undefined && report !== undefined) {
        this.#reports.set(node, report);
        if (this.#s.credentials.report(node, report.moduleKeys, this.#current)) this.#syncNode(node);
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
        if (!this.leading()) {
          // Its own lease lapsed (the bus slow to renew it), and no other controller holds it:
          // the change is applied when it leads again, unless another leader stores a fleet first.
          const seen = this.#p.lease.seen();
          if (this.#ledTerm !== undefined && (seen === undefined || seen.holder === this.#p.lease.self)) {
            this.#fileChangedAt = this.#fileChangedAt ?? Date.now();
            this.#log.warn(
              `the fleet file ${this.fleetFile} changed while this controller's lease waits to be renewed: ` +
                `it is applied when the bus renews it`,
            );
            this.#applyWhenLeading();
            return;
          }
          this.#log.warn(
            `the fleet file ${this.fleetFile} changed, but this controller stands by: the leader's fleet is ` +
              `served; edit the fleet on the leader's machine (mesh status names it)`,
          );
          return;
        }
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

// A fleet as JSON, without when it was read: two readings of the same files give the same text.
function fleetText(fleet: FleetPlan): string {
  return JSON.stringify({ ...fleet, readAt: undefined });
}
