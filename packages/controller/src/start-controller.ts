// The controller: reads the fleet, keeps one password per consumer, enrolls nodes, and publishes to
// each node exactly what it takes part in. Every change it makes (a reload, a rotation, an
// enrollment) runs one at a time, so two of them never publish interleaved halves.
import { mkdir } from "node:fs/promises";
import { resolve } from "node:path";
import {
  allReportsSubject,
  closeBus,
  connectBus,
  credsFor,
  DESIRED_STATE_BUCKET,
  enrollSubject,
  inboxPrefix,
  NODES_BUCKET,
  openState,
  raiseReplicas,
  type BusAuthority,
  type BusLogger,
  type BusState,
} from "@mesh/bus";
import { formatProblem, type Problem } from "@mesh/manifest";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { saveAuthority } from "./authority-file.ts";
import { loadOrCreateControllerKeys } from "./controller-keys.ts";
import { observeDeliveries, type ControllerObserver } from "./controller-metrics.ts";
import { controllerStatus, type ControllerStatus } from "./controller-status.ts";
import { planEntries } from "@mesh/manifest";
import { answerEnrollment, parseEnrolledNode, type EnrolledNode } from "./enrollment.ts";
import { FleetRefusedError, loadFleetPlan, type FleetPlan } from "./fleet-plan.ts";
import { JoinSecrets } from "./join-secrets.ts";
import { answerJoinTokenRequest } from "./join-token-request.ts";
import { answerLedgerRead, readLedgerFor, type LedgerReadReply } from "./ledger-reader.ts";
import { accountUpdates, ModuleCredentials } from "./module-credentials.ts";
import { NodeDeliveries, type Published } from "./node-deliveries.ts";
import {
  controllerPermissions,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
} from "./node-permissions.ts";
import { parseReport, reportingNode, type NodeReport } from "./node-reports.ts";
import { PendingWrites, WriteWaitsError } from "./pending-writes.ts";
import { BusCannotStoreError, PasswordStore } from "./password-store.ts";
import { StandingsBook, STANDINGS_SUBJECT } from "./standings-book.ts";
import { loadStoredFleet, storeFleet } from "./stored-fleet.ts";
import { relayToolCall, serveToolRelay, type ToolCall, type ToolReply } from "./tool-relay.ts";
import { watchFleetFile, type FleetFileWatch } from "./watch-fleet-file.ts";

/** How to start the controller. */
export interface ControllerOptions {
  /** The controller's state directory (`<meshState>/controller`): its key file lives here. */
  readonly stateDir: string;
  /** The fleet file (mesh.yaml). */
  readonly fleetFile: string;
  /** The bus's URLs. */
  readonly servers: readonly string[];
  /** The mesh's bus authority (see `loadOrCreateAuthority`): the controller issues every credential with it. */
  readonly authority: BusAuthority;
  /** Where the controller says what it does. It is never given a password or a join secret. */
  readonly logger: BusLogger;
  /** The bus's URLs as other nodes reach them, written into join tokens; `servers` when absent. */
  readonly joinServers?: readonly string[];
  /** Watch the fleet file and reload when it changes (default true). */
  readonly watch?: boolean;
  /** Told of reloads, deliveries published, passwords minted and rotations, to count them (metrics). */
  readonly observer?: ControllerObserver;
  /**
   * Copies of every stream and KV bucket the mesh makes; existing ones are raised to it at start.
   * Default: 3 on a cluster of 3 or more servers, else 1.
   */
  readonly replicas?: number;
}

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

const QUEUE = "mesh-controller";

/**
 * Starts the controller: connects to the bus with a credential it issues itself, opens its state
 * buckets, reads the fleet, mints what is missing, publishes each enrolled node's delivery, and
 * answers enrollments, status and rotation requests; it also watches the fleet file.
 * @throws FleetRefusedError when the fleet file is refused and no last good fleet for it is kept;
 * BusCredentialsRefusedError / BusUnreachableError when the bus refuses or does not answer;
 * ControllerKeysError when its key file is damaged.
 */
export async function startController(options: ControllerOptions): Promise<Controller> {
  const log = options.logger;
  const fleetFile = resolve(options.fleetFile);
  await mkdir(options.stateDir, { recursive: true, mode: 0o700 });
  const keys = await loadOrCreateControllerKeys(options.stateDir);
  const jwt = await options.authority.issueUser({
    name: "controller",
    publicKey: keys.nats.publicKey,
    permissions: controllerPermissions(),
  });
  const nc = await connectBus({
    servers: options.servers,
    creds: credsFor(jwt, keys.nats.seed),
    name: "controller",
    inboxPrefix: inboxPrefix("controller"),
    log,
    ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
  });
  try {
    return await run(nc, fleetFile, keys.seal, options, keys.nats.publicKey);
  } catch (err) {
    await closeBus(nc);
    throw err;
  }
}

async function run(
  nc: NatsConnection,
  fleetFile: string,
  sealKeys: Awaited<ReturnType<typeof loadOrCreateControllerKeys>>["seal"],
  options: ControllerOptions,
  controllerKey: string,
): Promise<Controller> {
  const log = options.logger;
  await raiseReplicas(nc, log);
  const desired = await openState<unknown>(nc, DESIRED_STATE_BUCKET);
  const nodesState: BusState<EnrolledNode> = await openState(nc, NODES_BUCKET, { parse: parseEnrolledNode });
  const passwords = await PasswordStore.open(nc, sealKeys, log);
  const deliveries = observeDeliveries(new NodeDeliveries(nc, desired, passwords), options.observer);
  const joinSecrets = new JoinSecrets(
    desired,
    sealKeys,
    options.authority,
    options.joinServers ?? options.servers,
    log,
  );

  const enrolled = new Map<string, EnrolledNode>();
  for (const node of await nodesState.keys()) {
    try {
      const record = await nodesState.get(node);
      if (record !== undefined) enrolled.set(node, record);
    } catch (err) {
      log.warn(`${(err as Error).message}; node ${node} must enroll again`);
    }
  }
  const revocations = accountUpdates(options.authority, options.servers, log);
  const credentials = await ModuleCredentials.open({
    nc,
    authority: options.authority,
    logger: log,
    isReserved: (key) => key === controllerKey || [...enrolled.values()].some((n) => n.natsPublicKey === key),
    // Saved first, so a revocation outlives a restart; pushed, so it applies now.
    applyRevocations: async () => {
      await saveAuthority(options.stateDir, options.authority);
      await revocations.push();
    },
  });

  let current: FleetPlan;
  let refused: readonly string[] | null = null;
  try {
    current = await loadFleetPlan(fleetFile);
  } catch (err) {
    const problems = problemsOf(err);
    const stored = await loadStoredFleet(desired);
    if (stored === undefined || stored.fleetFile !== fleetFile) {
      throw new FleetRefusedError(
        fleetFile,
        problems,
        "no fleet was served from it before, so nothing is served",
        {
          cause: err,
        },
      );
    }
    current = stored;
    refused = linesOf(err, problems);
    log.error(
      new FleetRefusedError(
        fleetFile,
        problems,
        `the mesh keeps serving the last good fleet (read at ${stored.readAt})`,
        { cause: err },
      ).message,
    );
  }

  // One change at a time: a reload, a rotation and an enrollment each see the others whole.
  let queue: Promise<unknown> = Promise.resolve();
  const exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    const next = queue.then(fn);
    queue = next.catch(() => undefined);
    return next;
  };
  // Nothing accepted is dropped: what the bus cannot store now is tried again until it is.
  const pending = new PendingWrites({ logger: log, run: exclusive });

  // Publishes `node`'s delivery from the fleet being served, saying so when it changed.
  const publishNode = async (node: string): Promise<Published> => {
    const result = await deliveries.publish(
      node,
      current,
      enrolled.get(node),
      credentials.forNode(node, current),
    );
    if (result.changed) log.info(`published generation ${result.generation} of node ${node}'s delivery`);
    return result;
  };

  const publishAll = async (): Promise<ReloadOutcome> => {
    const before = passwords.minted;
    await passwords.ensureAll(planEntries(current.plan));
    const minted = passwords.minted - before;
    if (minted > 0) log.info(`minted ${minted} password(s) for consumers new to the fleet, kept sealed`);
    options.observer?.minted(minted);
    const published: Published[] = [];
    const nodes = [...new Set([...current.nodes, ...enrolled.keys()])].sort();
    // A node gone from the fleet and never enrolled may still hold credentials: they are revoked.
    for (const node of new Set([...nodes, ...credentials.nodes()])) await syncCredentials(node);
    for (const node of nodes) {
      const result = await publishNode(node);
      if (result.changed) published.push(result);
    }
    await revokeRetired();
    return { published, minted };
  };

  // A credential that cannot be issued now (the bus refused a ledger) must not hold back the
  // deliveries: the node's next report tries again.
  const syncCredentials = async (node: string): Promise<void> => {
    try {
      await credentials.sync(node, current, enrolled.has(node));
    } catch (err) {
      log.error(
        `the module credentials of node ${node} could not be issued (${(err as Error).message}); ` +
          `its next report tries again`,
      );
    }
  };

  // After the deliveries: a module gets its new credential before its old one stops working.
  const revokeRetired = async (): Promise<void> => {
    try {
      const revoked = await credentials.revokeRetired();
      if (revoked > 0) log.info(`revoked ${revoked} module key(s) the controller no longer issues for`);
    } catch (err) {
      log.error(
        `module keys no longer issued for could not be revoked yet (${(err as Error).message}); ` +
          `the controller tries again with the next change`,
      );
    }
  };

  // A node reported module keys not issued for: issue them and publish its delivery, once however
  // many reports arrive meanwhile.
  const syncing = new Set<string>();
  const syncNode = (node: string): void => {
    if (syncing.has(node)) return;
    syncing.add(node);
    exclusive(async () => {
      syncing.delete(node);
      await pending.attempt(`delivery ${node}`, `node ${node}'s delivery`, async () => {
        await syncCredentials(node);
        await publishNode(node);
      });
      await revokeRetired();
    }).catch((err: unknown) =>
      log.error(`node ${node}'s delivery could not be published: ${(err as Error).message}`),
    );
  };

  const reload = (): Promise<ReloadOutcome> =>
    exclusive(async () => {
      let next: FleetPlan;
      try {
        next = await loadFleetPlan(fleetFile);
      } catch (err) {
        const problems = problemsOf(err);
        refused = linesOf(err, problems);
        options.observer?.reloaded("refused");
        throw new FleetRefusedError(
          fleetFile,
          problems,
          `the mesh keeps serving the last good fleet (read at ${current.readAt})`,
          { cause: err },
        );
      }
      current = next;
      refused = null;
      options.observer?.reloaded("applied");
      // Standings of consumers the fleet no longer has would name failures nobody can fix.
      standings.retainPlan(next.plan);
      return pending.attempt("fleet", `the fleet read at ${next.readAt}`, async () => {
        await storeFleet(desired, current);
        return publishAll();
      });
    });

  const hasConsumer = (consumer: string, iface: string): boolean =>
    planEntries(current.plan).some((e) => e.consumer === consumer && e.interface === iface);

  const rotate = (consumer: string, iface: string): Promise<void> =>
    exclusive(async () => {
      if (!hasConsumer(consumer, iface)) throw new UnknownConsumerError(consumer, iface);
      await passwords.rotate(consumer, iface);
      options.observer?.rotated();
      await pending
        .attempt("deliveries", "the deliveries of a rotation", publishAll)
        .catch((err: unknown) => {
          if (!(err instanceof WriteWaitsError)) throw err;
          log.warn(err.message);
        });
    });

  const knownNode = (node: string): void => {
    if (!current.nodes.includes(node) && !enrolled.has(node)) throw new UnknownNodeError(node);
  };

  const reports = new Map<string, NodeReport>();
  const standings = new StandingsBook({ logger: log });
  const status = (): ControllerStatus =>
    controllerStatus({
      plan: current.plan,
      fleetFile,
      readAt: current.readAt,
      refused,
      fleetNodes: current.nodes,
      enrolled: new Set(enrolled.keys()),
      reports,
      failing: standings.failing(),
      waiting: pending.waiting(),
    });

  // The first reading is published before anything is answered, so an enrolling node finds a
  // complete delivery.
  await storeFleet(desired, current);
  await exclusive(publishAll);

  const subscriptions: Subscription[] = [];
  const loops: Promise<void>[] = [];
  const serve = (
    subject: string,
    queued: boolean,
    handle: (data: Uint8Array, subject: string) => Promise<unknown>,
  ): void => {
    const sub = nc.subscribe(subject, queued ? { queue: QUEUE } : {});
    subscriptions.push(sub);
    loops.push(
      (async () => {
        for await (const msg of sub) {
          try {
            const answer = await handle(msg.data, msg.subject);
            if (answer !== undefined && msg.reply !== undefined && msg.reply !== "")
              msg.respond(JSON.stringify(answer));
          } catch (err) {
            log.error(`the controller could not answer on ${msg.subject}: ${(err as Error).message}`);
          }
        }
      })(),
    );
  };

  serve(enrollSubject(), true, async (data) => {
    const reply = await answerEnrollment(
      {
        joinSecrets,
        authority: options.authority,
        enroll: (record) =>
          exclusive(async () => {
            await nodesState.put(record.node, record);
            enrolled.set(record.node, record);
            log.info(`node ${record.node} enrolled (NATS key ${record.natsPublicKey})`);
            await publishNode(record.node);
          }),
      },
      data,
    );
    if (!reply.ok) log.warn(`an enrollment was refused: ${reply.error}`);
    return reply;
  });
  serve(STATUS_SUBJECT, true, () => Promise.resolve(status()));
  // Apart from `serve`, which answers one at a time: a slow delete must not hold up the next tool.
  const relaySources = { fleet: () => current, isEnrolled: (node: string) => enrolled.has(node) };
  const tools = serveToolRelay({ nc, logger: log, queue: QUEUE, ...relaySources });
  const isFleetModule = (module: string): boolean => current.modules.some((m) => m.name === module);
  serve(LEDGER_READ_SUBJECT, true, (data) => answerLedgerRead(nc, data, isFleetModule));
  // `mesh plan` compares a fleet file with what is served; it reads, never changes.
  serve(SERVED_FLEET_SUBJECT, true, async () => ({
    ok: true,
    fleet: current,
    keptPasswords: await passwords.keys(),
  }));
  serve(JOIN_TOKEN_SUBJECT, true, (data) =>
    answerJoinTokenRequest(data, async (node, renew) => {
      knownNode(node);
      return exclusive(() => (renew ? joinSecrets.renew(node) : joinSecrets.tokenFor(node)));
    }),
  );
  serve(ROTATE_SUBJECT, true, async (data) => {
    let body: { consumer?: unknown; interface?: unknown };
    try {
      body = JSON.parse(new TextDecoder().decode(data)) as typeof body;
    } catch {
      return { ok: false, error: "the rotation request is not JSON: send {consumer, interface}" };
    }
    if (typeof body?.consumer !== "string" || typeof body.interface !== "string") {
      return {
        ok: false,
        error: "the rotation request names no consumer and interface: send {consumer, interface}",
      };
    }
    try {
      await rotate(body.consumer, body.interface);
      return { ok: true };
    } catch (err) {
      if (err instanceof BusCannotStoreError) return { ok: false, error: err.message, busCannotStore: true };
      return { ok: false, error: (err as Error).message };
    }
  });
  serve(allReportsSubject(), false, (data, subject) => {
    const node = reportingNode(subject);
    const report = node !== undefined ? parseReport(node, data, new Date()) : undefined;
    if (node !== undefined && report !== undefined) {
      reports.set(node, report);
      if (credentials.report(node, report.moduleKeys, current)) syncNode(node);
    }
    return Promise.resolve(undefined);
  });

  // Not queued: every controller keeps its own book of what the providers say.
  serve(STANDINGS_SUBJECT, false, (data, subject) => {
    standings.take(subject, data);
    return Promise.resolve(undefined);
  });

  let watcher: FleetFileWatch | undefined;
  if (options.watch !== false) {
    watcher = watchFleetFile(
      fleetFile,
      () => {
        reload().then(
          (outcome) =>
            log.info(
              `read the fleet file ${fleetFile} again: ${outcome.published.length} node(s) got a new delivery` +
                (outcome.minted > 0 ? `, ${outcome.minted} password(s) minted` : ""),
            ),
          (err: unknown) => log.error((err as Error).message),
        );
      },
      log,
    );
  }

  let stopped: Promise<void> | undefined;
  return {
    fleetFile,
    current: () => current,
    reload,
    rotate,
    async joinToken(node) {
      knownNode(node);
      return exclusive(() => joinSecrets.tokenFor(node));
    },
    async renewJoinToken(node) {
      knownNode(node);
      return exclusive(() => joinSecrets.renew(node));
    },
    status,
    // The dashboard's way in: the same relay and ledger read as the operator's requests on the bus.
    tool: (call) => relayToolCall(nc, call, relaySources),
    ledger: (module, limit) => readLedgerFor(nc, { module, limit }, isFleetModule),
    stop() {
      stopped ??= (async () => {
        watcher?.close();
        pending.close();
        await queue;
        for (const sub of subscriptions) sub.unsubscribe();
        await Promise.all(loops);
        await tools.stop();
        await revocations.close();
        await closeBus(nc);
      })();
      return stopped;
    },
  };
}

function problemsOf(err: unknown): readonly Problem[] {
  const problems = (err as { problems?: unknown }).problems;
  return Array.isArray(problems) ? (problems as Problem[]) : [];
}

function linesOf(err: unknown, problems: readonly Problem[]): string[] {
  return problems.length > 0 ? problems.map(formatProblem) : [(err as Error).message];
}
