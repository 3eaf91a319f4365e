// Starting a node's agent: its identity (made on first start, kept after), its enrollment (only
// when it has no credentials yet, or the bus no longer takes them and a join token is at hand),
// its bus connection, and then the agent at work.
import { chmod, mkdir } from "node:fs/promises";
import { isAbsolute } from "node:path";
import {
  assertNodeName,
  BusCredentialsRefusedError,
  BusUnreachableError,
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
import { followLedgerCredentials, ledgersFileOf } from "./ledger-credentials.ts";
import { DEFAULT_SUPERVISION } from "./module-process.ts";
import { NodeAgent, type AgentStatus, type AgentTimings } from "./node-agent.ts";
import {
  identityFiles,
  loadOrMakeIdentity,
  readBusServers,
  readIssuedJwt,
  writeBusServers,
  writeNodeCreds,
} from "./node-identity.ts";
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
  /** Shorter delays, for tests. */
  readonly timings?: Partial<AgentTimings>;
  /**
   * When the agent runs as root, a module whose own user cannot read its command or manifest
   * directory is refused (`strict`: what `mesh up` and `mesh agent` do unless told) or run as the
   * agent's user (`auto`, the default here, and `npm start`'s).
   */
  readonly isolation?: IsolationMode;
}

/** A running agent. */
export interface Agent {
  /** Stops every module (SIGTERM, SIGKILL after 10 s), reports a last time and leaves the bus. */
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

/** The contract's delays: report every 10 s, restart after 1 s doubling to 1 min, 10 s to stop. */
export const DEFAULT_AGENT_TIMINGS: AgentTimings = {
  ...DEFAULT_SUPERVISION,
  reportEveryMs: 10_000,
  enrollWithinMs: ENROLL_WITHIN_MS,
  retryMs: 1_000,
};

/**
 * Starts the agent of `options.node`: makes or loads its keys, enrolls with the join token when it
 * has no credentials, connects to the bus (waiting for a bus that does not answer yet), and follows
 * its deliveries. Resolves once connected.
 * @throws InvalidNodeNameError; StateDirError; JoinTokenError; KeysFileError; AgentNotEnrolledError;
 * EnrollmentError; BusCredentialsRefusedError when the bus refuses the node and no join token is given.
 */
export async function startAgent(options: StartAgentOptions): Promise<Agent> {
  const node = assertNodeName(options.node);
  const { stateDir, logger } = options;
  if (!isAbsolute(stateDir)) throw new StateDirError(stateDir);
  const timings: AgentTimings = { ...DEFAULT_AGENT_TIMINGS, ...options.timings };
  const token = options.joinToken === undefined ? undefined : parseJoinToken(options.joinToken, node);
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  // Traverse only: each module reaches its own directory under it, and lists nothing.
  await chmod(stateDir, 0o711);

  const files = identityFiles(stateDir);
  const { identity, made } = await loadOrMakeIdentity(files);
  if (made) logger.info(`node ${node} made its key pairs; the private halves stay in ${files.keys}`);
  const given = typeof options.servers === "string" ? [options.servers] : options.servers;
  const servers = given ?? token?.servers ?? (await readBusServers(files));
  if (servers === undefined || servers.length === 0) {
    throw new AgentNotEnrolledError(node, files.bus, "does not know where the bus is");
  }
  if (given !== undefined || token !== undefined) await writeBusServers(files, servers);

  // Keys made just now cannot match credentials left from before: those belong to other keys.
  const jwt = made ? undefined : await readIssuedJwt(files);
  let creds = jwt === undefined ? undefined : credsFor(jwt, identity.nats.seed);
  let enrolledNow = false;
  const enroll = async (why: string): Promise<Uint8Array> => {
    if (token === undefined) throw new AgentNotEnrolledError(node, files.creds, why);
    const issued = await enrollNode(token, identity, logger, timings.enrollWithinMs);
    enrolledNow = true;
    logger.info(`node ${node} enrolled; its credentials are in ${files.creds}`);
    return writeNodeCreds(files, issued, identity);
  };
  creds ??= await enroll("has not enrolled");

  let nc: NatsConnection;
  try {
    nc = await connectNode(node, servers, () => creds, logger, timings.retryMs);
  } catch (err) {
    if (!(err instanceof BusCredentialsRefusedError) || token === undefined || enrolledNow) throw err;
    logger.warn(`the bus refused node ${node}'s credentials; enrolling again with the join token`);
    creds = await enroll("was refused by the bus");
    nc = await connectNode(node, servers, () => creds, logger, timings.retryMs);
  }

  // Each module's ledger: written on its own connection, from the `ledgers` secret the agent keeps.
  const ledgerFile = ledgersFileOf(stateDir, options.env ?? process.env);
  const ledgers = await followLedgerCredentials({ file: ledgerFile, servers, logger });
  const agent = new NodeAgent({
    node,
    stateDir,
    nc,
    servers,
    identity,
    logger,
    baseEnv: options.env ?? process.env,
    timings,
    ...(options.isolation === undefined ? {} : { isolation: options.isolation }),
  });
  agent.run();
  // Asked on every tool call and every journal pass: not `status()`, which reads each module's metrics.url.
  const modules = () => agent.modules();
  const journals = new JournalFollowers({ node, stateDir, ledgers, logger, modules });
  const tools = serveTools({
    nc,
    node,
    stateDir,
    modules,
    ledger: (module) => ledgers.writer(module),
    logger,
    env: options.env ?? process.env,
  });
  logger.info(`the agent of node ${node} is connected to the bus at ${servers.join(", ")}`);
  const stop = async (): Promise<void> => {
    await tools.stop();
    await agent.stop();
    await journals.stop();
    await ledgers.stop();
  };
  return { stop, status: () => agent.status() };
}

// The first connection waits for a bus that is not up yet, as a reconnect does; a refusal is final.
async function connectNode(
  node: string,
  servers: readonly string[],
  creds: () => Uint8Array | undefined,
  logger: BusLogger,
  retryMs: number,
): Promise<NatsConnection> {
  let said = false;
  for (;;) {
    try {
      return await connectBus({
        servers,
        creds: () => creds() ?? new Uint8Array(),
        name: node,
        inboxPrefix: inboxPrefix(node),
        log: logger,
      });
    } catch (err) {
      if (!(err instanceof BusUnreachableError)) throw err;
      if (!said) logger.warn(`${err.message}; node ${node} keeps trying`);
      said = true;
      await new Promise((r) => setTimeout(r, retryMs));
    }
  }
}
