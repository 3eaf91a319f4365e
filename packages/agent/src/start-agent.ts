// Starting a node's agent: its identity (made on first start, kept after), its enrollment (only
// when it has no credentials yet, or the bus no longer takes them and a join token is at hand),
// its bus connection, and then the agent at work.
import { setTimeout as sleep } from "node:timers/promises";
import { chmod, mkdir, readdir, rm } from "node:fs/promises";
import { isAbsolute, join } from "node:path";
import {
  assertNodeName,
  BusCredentialsRefusedError,
  BusUnreachableError,
  closeBus,
  connectBus,
  credsFor,
  inboxPrefix,
  type BusLogger,
} from "@mesh/bus";
import { StateDirError } from "@mesh/manifest";
import type { NatsConnection } from "@nats-io/transport-node";
import { enrollNode, ENROLL_WITHIN_MS } from "./enroll-node.ts";
import { parseJoinToken } from "@mesh/bus";
import { JournalFollowers } from "./journal-follower.ts";
import { LedgerBacklog } from "./ledger-backlog.ts";
import { followLedgerCredentials, ledgersFileOf } from "./ledger-credentials.ts";
import { DEFAULT_SUPERVISION } from "./module-process.ts";
import { NodeAgent, type AgentStatus, type AgentTimings } from "./node-agent.ts";
import {
  identityFiles,
  loadOrMakeIdentity,
  readBusCa,
  readBusServers,
  readIssuedJwt,
  writeBusCa,
  writeBusServers,
  writeNodeCreds,
} from "./node-identity.ts";
import { ProcessRecords, stopLeftovers } from "./process-records.ts";
import { loadOrMakeMeshId } from "./mesh-id.ts";
import { ModuleCgroups } from "./module-cgroups.ts";
import { lockStateDir, type StateLock } from "./state-lock.ts";
import { serveTools } from "./tool-runner.ts";
import type { IsolationMode } from "./module-users.ts";

/** How to start a node's agent. */
export interface StartAgentOptions {
  /** The node's name, as in the fleet file. */
  readonly node: string;
  /** The node's state directory (absolute): keys, credentials, secrets, module files and logs. */
  readonly stateDir: string;
  /** The controller's join token for this node; needed only until the node has enrolled. */
  readonly joinToken?: string;
  readonly logger: BusLogger;
  /** The environment modules inherit; the agent's own by default. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The bus's URLs, when they differ from the join token's or the last enrollment's. */
  readonly servers?: string | readonly string[];
  /**
   * The mesh's bus CA (PEM) when the bus uses TLS, in place of the join token's or the one kept
   * from the last start (`<state>/bus-ca.pem`).
   */
  readonly ca?: string;
  /** Shorter delays, for tests; `stopGraceMs` is the grace period a module has after SIGTERM. */
  readonly timings?: Partial<AgentTimings>;
  /**
   * When the agent runs as root, a module whose own user cannot read its command or manifest
   * directory is refused (`strict`: what `mesh up` and `mesh agent` do unless told) or run as the
   * agent's user (`auto`, the default here, and `npm start`'s).
   */
  readonly isolation?: IsolationMode;
  /**
   * The Prometheus file_sd JSON the controller on this machine keeps (`mesh up` gives its own): a
   * module's templates name it as `{mesh.targets}`. Absent: a module that names it is not started.
   */
  readonly scrapeTargets?: string;
  /**
   * The controller's scrape token (`mesh up` gives its own): a module's templates name it as
   * `{mesh.scrape-token}`, in run.env or a rendered file, never in args. Absent: a module that
   * names it is not started.
   */
  readonly scrapeToken?: string;
  /** Aborted while the agent starts (waiting for the bus, enrolling): it gives up at once. */
  readonly signal?: AbortSignal;
  /**
   * Whether the agent takes the lock of its state directory (default true): one agent per state
   * directory. Only a caller that holds the lock itself says false.
   */
  readonly lock?: boolean;
}

/** A running agent. */
export interface Agent {
  /** Stops every module (SIGTERM, SIGKILL after the grace period), reports a last time, leaves the bus and releases the state lock. */
  stop(): Promise<void>;
  /** Its report as of now (modules, files, generation) and whether it has the bus. */
  status(): AgentStatus;
}

/** The node has never enrolled and no join token was given. */
export class AgentNotEnrolledError extends Error {
  override name = "AgentNotEnrolledError";
  constructor(
    readonly node: string,
    readonly path: string,
    why: string,
  ) {
    super(`node ${node} ${why} (${path}): start its agent with the join token the controller made for it`);
  }
}

/** The agent was stopped (its `signal` aborted) before it had started. */
export class AgentStartAbortedError extends Error {
  override name = "AgentStartAbortedError";
  constructor(readonly node: string) {
    super(`the agent of node ${node} was stopped while it started`);
  }
}

/**
 * The contract's delays: report every 10 s, restart after 1 s doubling to 1 min, 10 s to stop, and
 * a module waits up to 30 s for its bus credential before its first start.
 */
export const DEFAULT_AGENT_TIMINGS: AgentTimings = {
  ...DEFAULT_SUPERVISION,
  reportEveryMs: 10_000,
  enrollWithinMs: ENROLL_WITHIN_MS,
  retryMs: 1_000,
  credentialWaitMs: 30_000,
};

/**
 * Starts the agent of `options.node`: makes or loads its keys, enrolls with the join token when it
 * has no credentials, connects to the bus (waiting for a bus that does not answer yet), and follows
 * its deliveries. Resolves once connected. It first takes the state directory's lock and stops
 * whatever module processes the last agent of this directory left running.
 * @throws InvalidNodeNameError; StateDirError; StateLockedError when another agent holds the state
 * directory; JoinTokenError; KeysFileError; AgentNotEnrolledError; EnrollmentError;
 * BusCredentialsRefusedError when the bus refuses the node and no join token is given;
 * AgentStartAbortedError when `signal` is aborted first.
 */
export async function startAgent(options: StartAgentOptions): Promise<Agent> {
  const node = assertNodeName(options.node);
  const { stateDir, logger } = options;
  if (!isAbsolute(stateDir)) throw new StateDirError(stateDir);
  const token = options.joinToken === undefined ? undefined : parseJoinToken(options.joinToken, node);
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  // Traverse only: each module reaches its own directory under it, and lists nothing.
  await chmod(stateDir, 0o711);
  let lock: StateLock | undefined;
  if (options.lock !== false) {
    lock = await lockStateDir(stateDir, `the agent of node ${node}`);
    if (lock.tookOver !== undefined) {
      logger.warn(
        `took over the lock of ${stateDir} from ${lock.tookOver.who} (${lock.tookOver.why}): ` +
          `what it left running is stopped`,
      );
    }
  }
  try {
    return await startLocked(node, token, options, lock);
  } catch (err) {
    await lock?.release();
    throw err;
  }
}

async function startLocked(
  node: string,
  token: ReturnType<typeof parseJoinToken> | undefined,
  options: StartAgentOptions,
  lock: StateLock | undefined,
): Promise<Agent> {
  const { stateDir, logger, signal } = options;
  const timings: AgentTimings = { ...DEFAULT_AGENT_TIMINGS, ...options.timings };
  const aborted = (): void => {
    if (signal?.aborted === true) throw new AgentStartAbortedError(node);
  };
  const records = new ProcessRecords(stateDir);
  await stopLeftoverModules(stateDir, timings.stopGraceMs, logger, records);
  await removeTempFiles(stateDir);
  const { id: meshId, made: madeId } = await loadOrMakeMeshId(stateDir);
  if (madeId)
    logger.info(
      `node ${node}'s mesh id is ${meshId}: its module users and cgroups are named mesh-${meshId}-<module>`,
    );
  const cgroups = ModuleCgroups.open({ meshId, stateDir, logger });
  await sweepCgroups(cgroups, node, logger);
  aborted();

  const files = identityFiles(stateDir);
  const { identity, made } = await loadOrMakeIdentity(files);
  if (made) logger.info(`node ${node} made its key pairs; the private halves stay in ${files.keys}`);
  const given = typeof options.servers === "string" ? [options.servers] : options.servers;
  // The join token's servers serve to enroll; after that, the ones last used come first.
  const stored = await readBusServers(files);
  const servers = given ?? unique([...(stored ?? []), ...(token?.servers ?? [])]);
  if (servers.length === 0) {
    throw new AgentNotEnrolledError(node, files.bus, "does not know where the bus is");
  }
  if (JSON.stringify(servers) !== JSON.stringify(stored)) await writeBusServers(files, servers);
  // The bus CA: given, else the join token's, else the one kept from the last start.
  const storedCa = await readBusCa(files);
  const ca = options.ca ?? token?.ca ?? storedCa;
  if (ca !== undefined && ca !== storedCa) await writeBusCa(files, ca);

  // Keys made just now cannot match credentials left from before: those belong to other keys.
  const jwt = made ? undefined : await readIssuedJwt(files);
  let creds = jwt === undefined ? undefined : credsFor(jwt, identity.nats.seed);
  let enrolledNow = false;
  const enroll = async (why: string): Promise<Uint8Array> => {
    if (token === undefined) throw new AgentNotEnrolledError(node, files.creds, why);
    const issued = await untilAborted(
      node,
      signal,
      // Through the bus that serves now: a stored token names the port its bus had when it was made.
      enrollNode(
        { ...token, servers, ...(ca !== undefined ? { ca } : {}) },
        identity,
        logger,
        timings.enrollWithinMs,
      ),
    );
    enrolledNow = true;
    logger.info(`node ${node} enrolled; its credentials are in ${files.creds}`);
    return writeNodeCreds(files, issued, identity);
  };
  creds ??= await enroll("has not enrolled");

  let nc: NatsConnection;
  try {
    nc = await connectNode(node, servers, ca, () => creds, logger, timings.retryMs, signal);
  } catch (err) {
    if (!(err instanceof BusCredentialsRefusedError) || token === undefined || enrolledNow) throw err;
    logger.warn(`the bus refused node ${node}'s credentials; enrolling again with the join token`);
    creds = await enroll("was refused by the bus");
    nc = await connectNode(node, servers, ca, () => creds, logger, timings.retryMs, signal);
  }
  if (signal?.aborted === true) {
    await closeBus(nc);
    throw new AgentStartAbortedError(node);
  }
  // An agent not told where the bus is learns the cluster's other servers from the one it reached.
  if (given === undefined) learnServers(nc, files, servers, logger);

  // Each module's ledger: written on its own connection, from the `ledgers` secret the agent keeps.
  const ledgerFile = ledgersFileOf(stateDir, options.env ?? process.env);
  const ledgers = await followLedgerCredentials({
    file: ledgerFile,
    servers,
    logger,
    ...(ca !== undefined ? { ca } : {}),
  });
  const agent = new NodeAgent({
    node,
    stateDir,
    nc,
    servers,
    ...(ca !== undefined ? { caFile: files.ca } : {}),
    identity,
    logger,
    baseEnv: options.env ?? process.env,
    timings,
    ...(options.isolation === undefined ? {} : { isolation: options.isolation }),
    ...(options.scrapeTargets === undefined ? {} : { scrapeTargets: options.scrapeTargets }),
    ...(options.scrapeToken === undefined ? {} : { scrapeToken: options.scrapeToken }),
    records,
    meshId,
    cgroups,
  });
  agent.run();
  // Asked on every tool call and every journal pass: not `status()`, which reads each module's metrics.url.
  const modules = () => agent.modules();
  const journals = new JournalFollowers({ node, stateDir, ledgers, logger, modules });
  // A tool's entry the module's ledger cannot take yet (made beside the module, maybe after it
  // started) waits here rather than holding up the tool's answer.
  const backlog = new LedgerBacklog({ ledger: (module) => ledgers.writer(module), logger });
  const tools = serveTools({
    nc,
    node,
    stateDir,
    modules,
    ledger: (module) => ledgers.writer(module),
    backlog,
    logger,
    env: options.env ?? process.env,
    misbehaving: agent.misbehaving,
    consumers: (module) => agent.consumersOf(module),
  });
  logger.info(`the agent of node ${node} is connected to the bus at ${servers.join(", ")}`);
  const stop = async (): Promise<void> => {
    await tools.stop();
    await agent.stop();
    await journals.stop();
    await backlog.stop();
    await ledgers.stop();
    await lock?.release();
  };
  return { stop, status: () => agent.status() };
}

// The first connection waits for a bus that is not up yet, as a reconnect does; a refusal is final.
async function connectNode(
  node: string,
  servers: readonly string[],
  ca: string | undefined,
  creds: () => Uint8Array | undefined,
  logger: BusLogger,
  retryMs: number,
  signal?: AbortSignal,
): Promise<NatsConnection> {
  let said = false;
  for (;;) {
    if (signal?.aborted === true) throw new AgentStartAbortedError(node);
    try {
      return await connectBus({
        servers,
        creds: () => creds() ?? new Uint8Array(),
        name: node,
        inboxPrefix: inboxPrefix(node),
        log: logger,
        ...(ca !== undefined ? { ca } : {}),
      });
    } catch (err) {
      if (!(err instanceof BusUnreachableError)) throw err;
      if (!said) logger.warn(`${err.message}; node ${node} keeps trying`);
      said = true;
      // Cut short by a stop: the caller sees the abort.
      await sleep(retryMs, undefined, { signal }).catch(() => undefined);
    }
  }
}

// What the promise gives, or AgentStartAbortedError as soon as `signal` is aborted.
function untilAborted<T>(node: string, signal: AbortSignal | undefined, promise: Promise<T>): Promise<T> {
  if (signal === undefined) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new AgentStartAbortedError(node));
    if (signal.aborted) onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values)];
}

/**
 * Stops every module process that the last agent of `stateDir` left running: those in its records
 * (same PID and start time) and any process whose environment says it is a module of this state
 * directory (`MESH_STATE_DIR` and `MESH_MODULE`), one killed before its record was written. Each
 * gets SIGTERM, then SIGKILL after `graceMs`. Never adopted: its log pipe died with the agent.
 */
export async function stopLeftoverModules(
  stateDir: string,
  graceMs: number,
  logger: BusLogger,
  records: ProcessRecords = new ProcessRecords(stateDir),
): Promise<void> {
  await stopLeftovers({
    records,
    kind: "module",
    marked: (env) => env.get("MESH_STATE_DIR") === stateDir && env.has("MESH_MODULE"),
    graceMs,
    logger,
    where: `node state ${stateDir}`,
  });
}

// What a killed run left in this mesh's cgroups (a child that left its process group and emptied
// its environment is found by nothing else) is ended, and the cgroups removed, before any module starts.
async function sweepCgroups(cgroups: ModuleCgroups, node: string, logger: BusLogger): Promise<void> {
  const swept = await cgroups.sweep();
  const held = swept.filter((c) => c.killed > 0);
  if (held.length > 0) {
    logger.warn(
      `ended what the last run of node ${node} left in its modules' cgroups: ` +
        held.map((c) => `${c.killed} process(es) in ${c.name}`).join(", "),
    );
  }
}

// A write cut short by a kill leaves its temp file (`.<name>.<hex>.tmp`), never a partial file:
// those are removed at start, under the lock, when no write of this directory is under way.
async function removeTempFiles(dir: string, depth = 0): Promise<void> {
  if (depth > 4) return;
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) await removeTempFiles(path, depth + 1);
    else if (entry.isFile() && /^\..+\.[0-9a-f]{12}\.tmp$/.test(entry.name)) await rm(path, { force: true });
  }
}

// The bus's INFO names the cluster's servers (`connect_urls`): kept in bus.json with those the
// agent used, so a restart reaches the cluster even when the one it first joined is gone.
function learnServers(
  nc: NatsConnection,
  files: ReturnType<typeof identityFiles>,
  used: readonly string[],
  logger: BusLogger,
): void {
  let known = [...used];
  const learn = (): void => {
    // A cluster with TLS gossips bare host:port: kept as tls:// like the URLs the agent was given.
    const scheme = used.some((u) => /^tls:\/\//i.test(u)) ? "tls" : "nats";
    const urls = (nc.info?.connect_urls ?? []).map((u) => (u.includes("://") ? u : `${scheme}://${u}`));
    const next = unique([...known, ...urls]);
    if (next.length === known.length) return;
    known = next;
    writeBusServers(files, known).then(
      () => logger.info(`the bus servers are now ${known.join(", ")} (kept in ${files.bus})`),
      (err: unknown) =>
        logger.warn(`could not keep the bus servers in ${files.bus}: ${(err as Error).message}`),
    );
  };
  learn();
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === "update" || status.type === "reconnect") learn();
    }
  })().catch(() => undefined);
}
