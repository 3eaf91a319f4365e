// One way to open a bus connection for every part of the mesh: credentials from a creds file's
// bytes, reconnection for as long as it takes (a bus that restarts must not strand an agent), and
// what goes wrong said in words an operator can act on.
import {
  AuthorizationError,
  connect,
  ConnectionError,
  PermissionViolationError,
  UserAuthenticationExpiredError,
  type NatsConnection,
} from "@nats-io/transport-node";
import type { Logger } from "@mesh/manifest";
import { credsAuthenticator } from "./creds-auth.ts";
import { setBusReplicas } from "./replica-count.ts";

/** Where bus connections say what happens to them: the mesh's one `Logger`, by the bus's name. */
export type BusLogger = Logger;

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
  /** The mesh's bus CA as PEM text (what a join token carries), in place of `caFile`. */
  readonly ca?: string;
  /**
   * How many copies of each stream and KV bucket made on this connection (see `replicasFor`);
   * default 3 on a cluster of 3 or more servers, else 1.
   */
  readonly replicas?: number;
  /** Keep trying when no server answers at first, instead of failing at once. */
  readonly waitForServer?: boolean;
  /**
   * Whether an error of a request (a timeout, say) also carries the stack of where the request was
   * made (default true). That stack is taken for every request, answered or not: on a connection
   * that makes tens of thousands (a large fleet's controller) it is a good part of their cost. The
   * error's message is the same either way.
   */
  readonly requestTraces?: boolean;
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

/** Why a TLS connection to the bus failed, as `BusTlsError` says it. */
export type BusTlsProblem = "no-ca" | "untrusted" | "wrong-name" | "not-offered";

/**
 * A TLS connection to the bus could not be made: no CA was given for a `tls://` URL, the server's
 * certificate is not signed by the CA given, it names another address, or the server offers no TLS.
 */
export class BusTlsError extends Error {
  override name = "BusTlsError";
  constructor(
    readonly who: string,
    readonly servers: string,
    readonly problem: BusTlsProblem,
    options?: { cause?: unknown },
  ) {
    const detail = options?.cause instanceof Error ? ` (${options.cause.message})` : "";
    const ca = "the mesh's bus CA (ca.pem in the directory given to mesh bus-config --tls-dir)";
    super(
      problem === "no-ca"
        ? `${who} cannot use the bus at ${servers}: it uses TLS and no bus CA was given: pass ${ca} with ` +
            `--bus-ca FILE, or join with a token from a controller started with --bus-ca`
        : problem === "untrusted"
          ? `the bus at ${servers} presented a certificate that ${who} does not trust${detail}: pass ${ca} ` +
            `with --bus-ca FILE, the CA that signed the servers' certificates`
          : problem === "wrong-name"
            ? `the certificate of the bus at ${servers} is not for the address ${who} used${detail}: use the ` +
              `address given to mesh bus-config --server for that server, or write its configuration again with ` +
              `the address the clients use`
            : `the bus at ${servers} offers no TLS, but ${who} was given a bus CA: give its tls:// URLs of a ` +
              `cluster configured with mesh bus-config --tls-dir, or leave out --bus-ca`,
      options,
    );
  }
}

// Node's TLS verification failures (tls.TLSSocket authorizationError codes).
const UNTRUSTED_CODES = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "CERT_UNTRUSTED",
]);

function tlsProblemOf(err: unknown): BusTlsProblem | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (code === "ERR_TLS_CERT_ALTNAME_INVALID" || /does not match certificate's altnames/i.test(e.message))
      return "wrong-name";
    if (
      (typeof code === "string" && UNTRUSTED_CODES.has(code)) ||
      /unable to verify the first certificate|self[- ]signed certificate|unable to get (local )?issuer certificate/i.test(
        e.message,
      )
    )
      return "untrusted";
    if (/tls.{0,20}is not available on this server/i.test(e.message)) return "not-offered";
  }
  return undefined;
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
 * when no server answers (and `waitForServer` is not set); BusTlsError for a `tls://` URL without a
 * CA, or a server whose certificate the CA did not sign or that names another address;
 * InvalidReplicasError for a `replicas` outside 1–5.
 */
export async function connectBus(options: ConnectBusOptions): Promise<NatsConnection> {
  const servers = typeof options.servers === "string" ? [options.servers] : [...options.servers];
  const where = servers.join(", ");
  const ca =
    options.ca !== undefined
      ? { ca: options.ca }
      : options.caFile !== undefined
        ? { caFile: options.caFile }
        : undefined;
  // Without a CA the server's certificate would be checked against the system's CAs, which never
  // signed a mesh bus's: said now, with the fix, instead of as a certificate error.
  if (ca === undefined && servers.some((s) => /^tls:\/\//i.test(s)))
    throw new BusTlsError(options.name, where, "no-ca");
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
      ...(options.requestTraces === false ? { noAsyncTraces: true } : {}),
      ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
      ...(ca !== undefined ? { tls: ca } : {}),
    });
  } catch (err) {
    const explained = explainBusError(err, options.name, where);
    if (explained instanceof BusTlsError && explained.problem === "untrusted" && ca === undefined)
      throw new BusTlsError(options.name, where, "no-ca", { cause: err });
    throw explained;
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
  if (err instanceof BusTlsError) return err;
  const tls = tlsProblemOf(err);
  // A server that wants TLS, reached with no CA, fails as a certificate it cannot check.
  if (tls !== undefined) return new BusTlsError(who, servers, tls, { cause: err });
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
