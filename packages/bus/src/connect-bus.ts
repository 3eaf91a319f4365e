// One way to open a bus connection for every part of the mesh: credentials from a creds file's
// bytes, reconnection for as long as it takes (a bus that restarts must not strand an agent), and
// what goes wrong said in words an operator can act on.
import {
  AuthorizationError,
  connect,
  ConnectionError,
  credsAuthenticator,
  PermissionViolationError,
  UserAuthenticationExpiredError,
  type NatsConnection,
} from "@nats-io/transport-node";
import { setBusReplicas } from "./bus-replicas.ts";

/** Where bus connections say what happens to them. Never given a secret. */
export interface BusLogger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** How to open a bus connection. */
export interface ConnectBusOptions {
  /** One or more `nats://host:port` URLs. */
  readonly servers: string | readonly string[];
  /**
   * The creds file's contents (see `credsFor`), or a function returning them, called at each
   * (re)connect, so a credential rewritten on disk is picked up without a restart.
   */
  readonly creds: Uint8Array | (() => Uint8Array);
  /** Who is connecting (a node, a module, `controller`): shown in the server's logs and in messages. */
  readonly name: string;
  /** Replies go to this prefix (see `inboxPrefix`); needed when the user may subscribe only to its own inbox. */
  readonly inboxPrefix?: string;
  /**
   * The mesh's bus CA (PEM file): the connection then uses TLS and trusts only servers whose
   * certificate it signed (see `mesh bus-config --tls-dir`).
   */
  readonly caFile?: string;
  /**
   * How many copies of each stream and KV bucket made on this connection (see `replicasFor`);
   * default 3 on a cluster of 3 or more servers, else 1.
   */
  readonly replicas?: number;
  /** Keep trying when no server answers at first, instead of failing at once. */
  readonly waitForServer?: boolean;
  readonly log?: BusLogger;
}

/** The bus refused the credentials: issued by another authority, expired, or revoked. */
export class BusCredentialsRefusedError extends Error {
  override name = "BusCredentialsRefusedError";
  constructor(
    readonly who: string,
    readonly servers: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the bus at ${servers} refused ${who}'s credentials (they are expired, revoked, or issued for another ` +
        `mesh): ask the controller for new ones (enroll again), or check that this is the right bus`,
      options,
    );
  }
}

/** No bus server answered at the given address. */
export class BusUnreachableError extends Error {
  override name = "BusUnreachableError";
  constructor(
    readonly who: string,
    readonly servers: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${who} could not reach the bus at ${servers}: check that nats-server is running there ` +
        `and that the address and port are right`,
      options,
    );
  }
}

/** How often every mesh connection pings its server. */
export const BUS_PING_INTERVAL_MS = 2_000;
/** How many unanswered pings give a server up. */
export const BUS_MAX_PINGS_OUT = 2;
/** How long a connection attempt to one server may take. */
export const BUS_CONNECT_TIMEOUT_MS = 2_000;

/**
 * Opens a bus connection authenticated by `creds`, which reconnects for as long as it takes after
 * the server goes away. Permission refusals and disconnections are said to `log`.
 * @throws BusCredentialsRefusedError when the server refuses the credentials; BusUnreachableError
 * when no server answers (and `waitForServer` is not set); InvalidReplicasError for a `replicas`
 * outside 1–5.
 */
export async function connectBus(options: ConnectBusOptions): Promise<NatsConnection> {
  const servers = typeof options.servers === "string" ? [options.servers] : [...options.servers];
  const where = servers.join(", ");
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers,
      name: options.name,
      authenticator: credsAuthenticator(options.creds),
      maxReconnectAttempts: -1,
      reconnectTimeWait: 1_000,
      // A server cut off without closing its sockets answers nothing: two missed pings 2 s apart
      // give it up, so the connection moves to another server of the cluster within seconds
      // (nats.js's default, 2 min × 2, went unnoticed for minutes).
      pingInterval: BUS_PING_INTERVAL_MS,
      maxPingOut: BUS_MAX_PINGS_OUT,
      timeout: BUS_CONNECT_TIMEOUT_MS,
      waitOnFirstConnect: options.waitForServer === true,
      ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
      ...(options.caFile !== undefined ? { tls: { caFile: options.caFile } } : {}),
    });
  } catch (err) {
    throw explainBusError(err, options.name, where);
  }
  if (options.replicas !== undefined) setBusReplicas(nc, options.replicas);
  if (options.log !== undefined) watchStatus(nc, options.name, where, options.log);
  return nc;
}

/**
 * Closes a bus connection after delivering what it has buffered. Safe to call twice.
 * @throws nothing: a connection that cannot drain is closed outright.
 */
export async function closeBus(nc: NatsConnection): Promise<void> {
  if (nc.isClosed()) return;
  try {
    // A drain started while the connection is away (its credential just revoked, say) can wait
    // forever for a server that will not take it back; the connection closing ends the wait.
    await Promise.race([nc.drain(), nc.closed()]);
  } catch {
    await nc.close();
  }
}

/**
 * The same failure, said in words an operator can act on when it is one the bus package knows:
 * refused credentials or an unreachable server. Anything else is returned as it is.
 */
export function explainBusError(err: unknown, who: string, servers: string): unknown {
  if (
    err instanceof AuthorizationError ||
    err instanceof UserAuthenticationExpiredError ||
    (err instanceof Error && /authorization violation|authentication (expired|revoked)/i.test(err.message))
  ) {
    return new BusCredentialsRefusedError(who, servers, { cause: err });
  }
  if (
    err instanceof ConnectionError ||
    (err instanceof Error && /ECONNREFUSED|connection refused/i.test(err.message))
  ) {
    return new BusUnreachableError(who, servers, { cause: err });
  }
  return err;
}

function watchStatus(nc: NatsConnection, who: string, where: string, log: BusLogger): void {
  void (async () => {
    let down = false;
    let lastWarning = "";
    // A refused reconnect reports the same error on each attempt: said once is enough.
    const warnOnce = (message: string): void => {
      if (message !== lastWarning) log.warn(message);
      lastWarning = message;
    };
    for await (const status of nc.status()) {
      switch (status.type) {
        case "disconnect":
          if (!down)
            log.warn(`${who} lost the bus at ${status.server}; reconnecting for as long as it takes`);
          down = true;
          break;
        case "reconnect":
          log.info(`${who} is connected to the bus again at ${status.server}`);
          down = false;
          lastWarning = "";
          break;
        case "error":
          warnOnce(describeServerError(status.error, who, where));
          break;
        default:
          break;
      }
    }
  })().catch(() => undefined);
  void nc.closed().then((err) => {
    if (err !== undefined && err !== null) {
      const explained = explainBusError(err, who, where);
      log.error(
        `${who}'s bus connection closed: ${explained instanceof Error ? explained.message : String(err)}`,
      );
    }
  });
}

function describeServerError(err: Error, who: string, where: string): string {
  if (err instanceof PermissionViolationError) {
    const what = err.operation === "publish" ? "publish to" : "subscribe to";
    return (
      `the bus refused to let ${who} ${what} ${JSON.stringify(err.subject)}: its credentials do not ` +
      `allow it (the controller derives them; declare it where the controller reads it, or use a subject it allows)`
    );
  }
  const explained = explainBusError(err, who, where);
  return explained instanceof Error ? explained.message : `the bus said: ${err.message}`;
}
