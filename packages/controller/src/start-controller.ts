// Starting the controller: its keys, its bus connection (with a credential it issues itself), and
// the buckets and stores it works with, composed into the `FleetController` that serves the fleet.
import { setTimeout as sleep } from "node:timers/promises";
import { mkdir, readFile } from "node:fs/promises";
import { hostname, userInfo } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import {
  belowReplicas,
  BusCredentialsRefusedError,
  BusTlsError,
  BusUnreachableError,
  closeBus,
  connectBus,
  credsFor,
  DESIRED_STATE_BUCKET,
  inboxPrefix,
  migrateLedgers,
  NODES_BUCKET,
  openState,
  raiseReplicas,
  StateValueError,
  writeFileAtomic,
  type BusAuthority,
  type BusLogger,
  type BusState,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";
import { saveAuthority } from "./authority-file.ts";
import { BusFormatError, settleBusFormat } from "./bus-format.ts";
import { ControllerKeysError, loadOrCreateControllerKeys, type ControllerKeys } from "./controller-keys.ts";
import { observeDeliveries, type ControllerObserver } from "./controller-metrics.ts";
import { ControllerLease, DEFAULT_LEASE_TIMINGS, type LeaseTimings } from "./controller-lease.ts";
import { CredentialSync } from "./credential-sync.ts";
import { parseEnrolledNode, type EnrolledNode } from "./enrollment.ts";
import { FleetController, NotLeaderError, type Controller, type LeaderStores } from "./fleet-controller.ts";
import { FleetRefusedError, loadFleetPlan, type FleetPlan } from "./fleet-plan.ts";
import { linesOf, problemsOf } from "./fleet-problems.ts";
import { JoinSecrets } from "./join-secrets.ts";
import { CONTROLLER_LEASE_BUCKET } from "./lease-driver.ts";
import { accountUpdates, ModuleCredentials } from "./module-credentials.ts";
import { ModuleLedgers, type ModuleLedgersOptions } from "./module-ledgers.ts";
import { NodeDeliveries } from "./node-deliveries.ts";
import { controllerPermissions } from "./node-permissions.ts";
import { PasswordStore } from "./password-store.ts";
import { RestoreIntents } from "./restore-intents.ts";
import { syncRevocations } from "./revocation-list.ts";
import { StandingsBook } from "./standings-book.ts";
import { loadStoredFleet } from "./stored-fleet.ts";

/** How to start the controller. */
export interface ControllerOptions {
  /** The controller's state directory (`<meshState>/controller`): its key file lives here. */
  readonly stateDir: string;
  /**
   * The fleet file this machine applies (`mesh up FILE`): applied at start when it differs from
   * the fleet stored in the bus, and at each save while this controller leads, each time expecting
   * the revision this machine last applied. Absent: the stored fleet is served. A standby never
   * applies it (a take-over serves what was last applied).
   */
  readonly fleetFile?: string;
  /** How many applied revisions the bus keeps (default 100). */
  readonly fleetHistory?: number;
  /** The bus's URLs. */
  readonly servers: readonly string[];
  /** The mesh's bus authority (see `loadOrCreateAuthority`): the controller issues every credential with it. */
  readonly authority: BusAuthority;
  /** Where the controller says what it does. It is never given a password or a join secret. */
  readonly logger: BusLogger;
  /**
   * The mesh's bus CA (PEM) when the bus uses TLS: every connection of the controller trusts only
   * the servers it signed, and each join token carries it to its node.
   */
  readonly ca?: string;
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
  /**
   * Start as a standby (`mesh controller --standby-of`): wait until the lease has gone unrenewed
   * for `takeOverAfterMs`, then lead and serve the fleet stored on the bus. Otherwise (the
   * default) it leads at once when no other controller holds a live lease.
   */
  readonly standby?: boolean;
  /** This controller's id in the lease and in `mesh status`; default `<hostname>:<stateDir>`. Keep it across restarts. */
  readonly controllerId?: string;
  /** Shorter lease timings, for tests (default: renewed every 2 s, taken over after 10 s, given up after 6 s). */
  readonly leaseTimings?: Partial<LeaseTimings>;
  /** The monotonic clock (ms) the lease is measured on; `performance.now` by default (tests). */
  readonly clock?: () => number;
  /**
   * Wait for a bus that is not ready yet (no server answers, or JetStream has no quorum: the
   * cluster is still forming), trying the start again every `retryMs` (default 2 s) and saying why
   * once per reason, until `signal` is aborted. Without it, the first such failure is thrown.
   */
  readonly waitForBus?: { readonly signal?: AbortSignal; readonly retryMs?: number };
  /**
   * Makes the ledger every module shares (default `ensureLedger`), in the background as the
   * controller starts leading; tests hold it back to show that nothing waits for it.
   */
  readonly makeLedger?: ModuleLedgersOptions["ensure"];
}

/** How long a controller that waits for the bus waits between two starts, by default. */
export const BUS_WAIT_RETRY_MS = 2_000;

/**
 * Whether a start failed only because the bus is not ready yet: no server answered, or JetStream
 * could not answer (no meta leader yet, too few servers up, a request that timed out). A refused
 * credential, a refused fleet or a damaged key file is not: waiting would not mend it.
 */
export function busNotReady(err: unknown): boolean {
  if (err instanceof BusUnreachableError) return true;
  if (
    err instanceof BusCredentialsRefusedError ||
    err instanceof BusTlsError ||
    err instanceof FleetRefusedError ||
    err instanceof ControllerKeysError ||
    err instanceof BusFormatError
  )
    return false;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (
      /timeout|timed out|temporarily unavailable|no responders|jetstream (is )?not enabled|insufficient resources|no suitable peers|cannot store|connection (closed|draining)|disconnect/i.test(
        e.message,
      )
    )
      return true;
  }
  return false;
}

/**
 * Starts the controller: connects to the bus with a credential it issues itself, opens its state
 * buckets, reads the fleet, mints what is missing, publishes each enrolled node's delivery, and
 * answers enrollments, status and rotation requests; it also watches the fleet file.
 * @throws FleetRefusedError when the fleet file is refused and no last good fleet for it is kept;
 * BusCredentialsRefusedError / BusUnreachableError when the bus refuses or does not answer;
 * ControllerKeysError when its key file is damaged.
 */
export async function startController(options: ControllerOptions): Promise<Controller> {
  const wait = options.waitForBus;
  if (wait === undefined) return startOnce(options);
  // A controller started with the servers of its cluster (a boot, every machine at once) finds
  // JetStream without a quorum for a while: it waits for it instead of exiting.
  const retryMs = wait.retryMs ?? BUS_WAIT_RETRY_MS;
  const aborted = (): boolean => wait.signal?.aborted === true;
  let said = "";
  for (;;) {
    try {
      return await startOnce(options);
    } catch (err) {
      if (!busNotReady(err) || aborted()) throw err;
      const why = (err as Error).message;
      if (why !== said)
        options.logger.warn(
          `the controller waits for the bus (${why}); it tries again every ${retryMs / 1000} s`,
        );
      said = why;
      // Cut short by a stop: the caller sees the abort.
      await sleep(retryMs, undefined, { signal: wait.signal }).catch(() => undefined);
      if (aborted()) throw err;
    }
  }
}

/** The shortest wait for one read or write of the lease (a loaded machine answers in hundreds of ms). */
const LEASE_REQUEST_MIN_MS = 2_000;

async function startOnce(options: ControllerOptions): Promise<Controller> {
  const log = options.logger;
  const fleetFile = options.fleetFile === undefined ? undefined : resolve(options.fleetFile);
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
    // Tens of thousands of requests for a large fleet's delivery: each taking a stack it never
    // uses was much of their cost (and of the garbage collector's).
    requestTraces: false,
    log,
    ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
    ...(options.ca !== undefined ? { ca: options.ca } : {}),
  });
  try {
    return await run(nc, fleetFile, keys.seal, options, keys.nats.publicKey);
  } catch (err) {
    await closeBus(nc);
    throw err;
  }
}

// The composition root: the buckets, stores and publishers the controller works with, opened once
// and handed to the `FleetController` that serves the fleet.
async function run(
  nc: NatsConnection,
  fleetFile: string | undefined,
  sealKeys: ControllerKeys["seal"],
  options: ControllerOptions,
  controllerKey: string,
): Promise<Controller> {
  const log = options.logger;
  await raiseReplicas(nc, log);
  const desired = await openState<unknown>(nc, DESIRED_STATE_BUCKET);
  // Before anything is read or written there: a bus of a newer mesh is refused, an older one migrated.
  await settleBusFormat(desired, log);
  const nodesState: BusState<EnrolledNode> = await openState(nc, NODES_BUCKET, { parse: parseEnrolledNode });
  const enrolled = await readEnrolled(nodesState, log);
  const leaseTimings = { ...DEFAULT_LEASE_TIMINGS, ...options.leaseTimings };
  const now = options.clock ?? (() => performance.now());
  const lease = new ControllerLease(
    options.controllerId ?? `${hostname()}:${resolve(options.stateDir)}`,
    leaseTimings,
    now,
    options.standby === true,
  );
  // A renewal the bus cannot take now (JetStream electing the lease's stream a new leader) is
  // given up within about a renewal period and tried again, not waited on for the client's 5 s.
  const leaseBucket = await openState<unknown>(nc, CONTROLLER_LEASE_BUCKET, {
    timeoutMs: Math.max(LEASE_REQUEST_MIN_MS, leaseTimings.renewEveryMs),
  });
  const mustLead = (what: string): void => {
    if (!lease.leading()) {
      const seen = lease.seen();
      const other = seen !== undefined && seen.holder !== lease.self;
      throw new NotLeaderError(what, other ? seen.holder : null, other ? seen.term : null);
    }
  };
  const revocations = accountUpdates(options.authority, options.servers, log, options.ca);
  // Read once: the rotations this controller (before a restart) left to undo, resumed when it leads.
  const restores = await RestoreIntents.load(options.stateDir, log);
  // What the leader writes through, opened from the bus: at start, and again at each take-over.
  const openStores = async (): Promise<LeaderStores> => {
    const passwords = await PasswordStore.open(nc, sealKeys, log, restores);
    const ledgers = new ModuleLedgers({
      nc,
      logger: log,
      ...(options.makeLedger !== undefined ? { ensure: options.makeLedger } : {}),
      // An older mesh's ledgers (a stream and a bucket per module), copied into the shared ones,
      // with what was copied written down in the controller's bucket.
      migrate: () => migrateLedgers(nc, desired, log),
    });
    // The ledger every module shares, made (or found) once as this controller starts leading.
    ledgers.prepare();
    const credentials = await ModuleCredentials.open({
      nc,
      ledgers,
      authority: options.authority,
      logger: log,
      isReserved: (key) =>
        key === controllerKey || [...enrolled.values()].some((n) => n.natsPublicKey === key),
      // Stored on the bus with every revocation stored before (so no leader pushes an older list),
      // saved, so a revocation outlives a restart; pushed, so it applies now. Only by the leader.
      applyRevocations: async () => {
        mustLead("revoke keys");
        await syncRevocations(desired, options.authority);
        await saveAuthority(options.stateDir, options.authority);
        mustLead("push account updates");
        await revocations.push();
      },
    });
    return {
      passwords,
      deliveries: observeDeliveries(new NodeDeliveries(nc, desired, passwords), options.observer),
      joinSecrets: new JoinSecrets(
        desired,
        sealKeys,
        options.authority,
        options.joinServers ?? options.servers,
        log,
        options.ca,
      ),
      credentials,
      credentialSync: new CredentialSync(credentials, log),
      ledgers,
    };
  };
  // A start that failed leaves no connection open: it may be tried again (`waitForBus`).
  try {
    return await serveFleet();
  } catch (err) {
    await revocations.close();
    throw err;
  }

  async function serveFleet(): Promise<Controller> {
    const stores = await openStores();
    // What the start could not raise (a server down) is raised once the servers are back.
    if ((await belowReplicas(nc).catch(() => [])).length > 0) stores.ledgers.raiseLater();
    // A standby never reads a file of its own: it serves what the bus stores.
    const first =
      fleetFile === undefined || options.standby === true
        ? { fleet: (await loadStoredFleet(desired)) ?? emptyFleet(), refused: null }
        : await readFirstFleet(fleetFile, desired, log);
    const appliedFile = join(options.stateDir, APPLIED_FILE);
    const controller = new FleetController({
      nc,
      fleetFile,
      applied: {
        read: () => readApplied(appliedFile),
        write: async (revision) => {
          await writeFileAtomic(appliedFile, `${JSON.stringify({ revision })}\n`, 0o600);
        },
      },
      who: whoRuns(),
      ...(options.fleetHistory !== undefined ? { historyKeep: options.fleetHistory } : {}),
      first,
      authority: options.authority,
      desired,
      nodesState,
      enrolled,
      stores,
      openStores: async () => {
        const again = await readEnrolled(nodesState, log);
        enrolled.clear();
        for (const [node, record] of again) enrolled.set(node, record);
        return openStores();
      },
      standings: new StandingsBook({ logger: log }),
      logger: log,
      ...(options.observer !== undefined ? { observer: options.observer } : {}),
      watch: options.watch !== false && options.standby !== true && fleetFile !== undefined,
      lease,
      leaseBucket,
      leaseTimings,
      now,
      standby: options.standby === true,
      close: async () => {
        await revocations.close();
        await closeBus(nc);
      },
    });
    await controller.start();
    return controller;
  }
}

// The enrolled nodes; a record that is not one is skipped (that node enrolls again).
// @throws the bus's error when a record cannot be read now.
async function readEnrolled(
  nodesState: BusState<EnrolledNode>,
  log: BusLogger,
): Promise<Map<string, EnrolledNode>> {
  const enrolled = new Map<string, EnrolledNode>();
  for (const node of await nodesState.keys()) {
    try {
      const record = await nodesState.get(node);
      if (record !== undefined) enrolled.set(node, record);
    } catch (err) {
      // A bus that does not answer now is not a damaged record: read as "not enrolled", every
      // module of that node would have its credentials revoked. The start (or take-over) fails
      // and is tried again.
      if (!(err instanceof StateValueError)) throw err;
      log.warn(`${err.message}; node ${node} must enroll again`);
    }
  }
  return enrolled;
}

// The fleet file's fleet, or, when it is refused, the last good fleet stored from it.
async function readFirstFleet(
  fleetFile: string,
  desired: BusState<unknown>,
  log: BusLogger,
): Promise<{ fleet: FleetPlan; refused: readonly string[] | null }> {
  try {
    return { fleet: await loadFleetPlan(fleetFile), refused: null };
  } catch (err) {
    const problems = problemsOf(err);
    const stored = await loadStoredFleet(desired);
    if (stored === undefined) {
      throw new FleetRefusedError(
        fleetFile,
        problems,
        "no fleet was served from it before, so nothing is served",
        { cause: err },
      );
    }
    log.error(
      new FleetRefusedError(
        fleetFile,
        problems,
        `the mesh keeps serving the last good fleet (read at ${stored.readAt})`,
        { cause: err },
      ).message,
    );
    return { fleet: stored, refused: linesOf(err, problems) };
  }
}

/** The file in the controller's state directory naming the revision this machine last applied from its fleet file. */
export const APPLIED_FILE = "fleet-applied.json";

async function readApplied(file: string): Promise<number | undefined> {
  try {
    const v = JSON.parse(await readFile(file, "utf8")) as { revision?: unknown };
    return typeof v.revision === "number" ? v.revision : undefined;
  } catch {
    return undefined;
  }
}

function whoRuns(): string {
  try {
    return userInfo().username;
  } catch {
    return process.env["USER"] ?? `uid ${process.getuid?.() ?? "unknown"}`;
  }
}

/** The fleet served before any is applied: no node, no module. */
function emptyFleet(): FleetPlan {
  return { fleetFile: "", plan: { instances: [] }, nodes: [], modules: [], readAt: new Date().toISOString() };
}
