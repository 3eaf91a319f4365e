// A NATS cluster for the mesh: one nats-server configuration per server, each trusting the mesh's
// operator, keeping account JWTs with the `full` resolver (so revocations survive a restart and
// reach every server), with its own JetStream store and routes to every other server.
import { join } from "node:path";
import type { BusAuthority, TlsFiles } from "./authority.ts";

/** One server of the cluster, as `NAME=HOST:CLIENT_PORT:CLUSTER_PORT` says it. */
export interface ClusterServer {
  /** The server's name (`server_name`), unique in the cluster. */
  readonly name: string;
  /** The address other machines reach it at, and the one it listens on. */
  readonly host: string;
  readonly clientPort: number;
  readonly clusterPort: number;
}

/** What `clusterServerConfigs` writes. */
export interface ClusterConfigRequest {
  /** The cluster's name, the same on every server. */
  readonly cluster: string;
  readonly servers: readonly ClusterServer[];
  /**
   * Where each server keeps its own files on its machine: `<dataDir>/<name>/jetstream` (the
   * JetStream store), `<dataDir>/<name>/jwt` (the account JWTs) and `<dataDir>/<name>/tls`.
   */
  readonly dataDir: string;
  /** Use TLS for clients and routes, with certificates in `<dataDir>/<name>/tls` (see `clusterTlsFiles`). */
  readonly tls?: boolean;
}

/** One server's configuration. */
export interface ClusterServerConfig {
  readonly server: ClusterServer;
  /** The directory its files live in on its machine (`<dataDir>/<name>`). */
  readonly dir: string;
  readonly text: string;
  /**
   * Files to write under `dir` only when they are not there yet (relative path → text): the mesh
   * account's JWT that the `full` resolver starts from.
   */
  readonly seedFiles: Readonly<Record<string, string>>;
}

/** A `--server` value that does not say `NAME=HOST:CLIENT_PORT:CLUSTER_PORT`, or a cluster that cannot be. */
export class ClusterSpecError extends Error {
  override name = "ClusterSpecError";
  constructor(
    readonly spec: string,
    why: string,
  ) {
    super(`${JSON.stringify(spec)} ${why}`);
  }
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
const HOST = /^[A-Za-z0-9._-]+$|^\[[0-9A-Fa-f:.]+\]$/;

/**
 * Reads `NAME=HOST:CLIENT_PORT:CLUSTER_PORT` (an IPv6 host in brackets).
 * @throws ClusterSpecError naming what is wrong.
 */
export function parseClusterServer(spec: string): ClusterServer {
  const match = /^([^=]+)=(.+):(\d+):(\d+)$/.exec(spec.trim());
  if (match === null) {
    throw new ClusterSpecError(
      spec,
      "is not NAME=HOST:CLIENT_PORT:CLUSTER_PORT (e.g. n1=10.0.0.1:4222:6222)",
    );
  }
  const [, name = "", host = "", client = "", route = ""] = match;
  if (!NAME.test(name)) throw new ClusterSpecError(spec, "has a name that is not letters, digits, - and _");
  if (!HOST.test(host)) throw new ClusterSpecError(spec, "has a host that is not a name or an address");
  const port = (text: string): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 1 || n > 65535)
      throw new ClusterSpecError(spec, `has port ${text}, not 1-65535`);
    return n;
  };
  return { name, host, clientPort: port(client), clusterPort: port(route) };
}

/** The TLS files of one server, in its directory on its machine. */
export function clusterTlsFiles(dir: string): TlsFiles {
  const tls = join(dir, "tls");
  return {
    certFile: join(tls, "server.pem"),
    keyFile: join(tls, "server-key.pem"),
    caFile: join(tls, "ca.pem"),
  };
}

/** The client URLs of the cluster (`nats://` or `tls://`), for `--bus` and join tokens. */
export function clusterClientUrls(servers: readonly ClusterServer[], tls = false): string[] {
  return servers.map((s) => `${tls ? "tls" : "nats"}://${s.host}:${s.clientPort}`);
}

/**
 * One configuration per server: the mesh's operator, the `full` account resolver (deletes
 * refused), JetStream with its own store, a cluster block with routes to every other server, and
 * TLS for clients and routes when asked. No `authorization` block.
 * @throws ClusterSpecError for fewer than 1 server, or two servers with one name or one address;
 * InvalidServerOptionError for a value that cannot go into a config.
 */
export function clusterServerConfigs(
  authority: BusAuthority,
  request: ClusterConfigRequest,
): ClusterServerConfig[] {
  const { servers } = request;
  if (servers.length === 0) throw new ClusterSpecError("", "no server: give --server once per server");
  if (!NAME.test(request.cluster))
    throw new ClusterSpecError(request.cluster, "is not a cluster name (letters, digits, - and _)");
  const seen = new Set<string>();
  for (const s of servers) {
    for (const key of [
      `name ${s.name}`,
      `client ${s.host}:${s.clientPort}`,
      `route ${s.host}:${s.clusterPort}`,
    ]) {
      if (seen.has(key))
        throw new ClusterSpecError(s.name, `repeats ${key.replace(/^\w+ /, "")}: each server needs its own`);
      seen.add(key);
    }
    if (s.clientPort === s.clusterPort)
      throw new ClusterSpecError(s.name, "uses one port for clients and routes");
  }
  return servers.map((server) => {
    const dir = join(request.dataDir, server.name);
    const routes = servers
      .filter((other) => other !== server)
      // TLS on a route is negotiated from the cluster's tls block; the scheme stays nats-route.
      .map((other) => `nats-route://${other.host}:${other.clusterPort}`);
    const text = authority.serverConfig({
      serverName: server.name,
      host: unbracket(server.host),
      port: server.clientPort,
      storeDir: join(dir, "jetstream"),
      resolverDir: join(dir, "jwt"),
      cluster: { name: request.cluster, host: unbracket(server.host), port: server.clusterPort, routes },
      ...(request.tls === true ? { tls: clusterTlsFiles(dir) } : {}),
    });
    const seedFiles = Object.fromEntries(
      Object.entries(authority.accountJwtFiles()).map(([name, jwt]) => [join("jwt", name), jwt]),
    );
    return { server, dir, text, seedFiles };
  });
}

function unbracket(host: string): string {
  return host.startsWith("[") ? host.slice(1, -1) : host;
}
