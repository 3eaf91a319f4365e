// The bus as the controller's own connection sees it, for its metrics and the alerts on them: which
// servers answer, and how many copies of each stream (and KV bucket) are current. A server that is
// down is found two ways: it drops out of the cluster's client URLs, and it does not answer a probe;
// a stream whose copies fall behind or go offline says so in its own info.
import { connect as tcpConnect } from "node:net";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { replicasFor } from "@mesh/bus";

/** One stream (or KV bucket) of the mesh's account, as JetStream reports its copies. */
export interface StreamCopies {
  readonly stream: string;
  /** The copies it is configured to keep. */
  readonly replicas: number;
  /** The copies up to date now: its leader and every replica current and online (0 with no leader). */
  readonly current: number;
}

/** What `readBusHealth` found. */
export interface BusHealth {
  /** The servers' client addresses (`host:port`) the cluster names now (`connect_urls`), with the one connected to. */
  readonly servers: readonly string[];
  /** Whether JetStream answered the listing of streams within the bound. */
  readonly jetstream: boolean;
  /** The copies the mesh makes each stream with (`replicasFor`). */
  readonly replicasTarget: number;
  /** Every stream of the account; empty when JetStream did not answer. */
  readonly streams: readonly StreamCopies[];
}

/** How long a listing of streams may take before JetStream counts as not answering. */
export const BUS_HEALTH_TIMEOUT_MS = 3_000;

/**
 * Reads the bus's health through `nc`: the servers the cluster names, and every stream's copies.
 * Never throws: a JetStream that does not answer within `timeoutMs` is `jetstream: false`.
 */
export async function readBusHealth(
  nc: NatsConnection,
  timeoutMs = BUS_HEALTH_TIMEOUT_MS,
): Promise<BusHealth> {
  const servers = new Set<string>(nc.info?.connect_urls ?? []);
  const connected = hostPortOf(nc.getServer());
  if (connected !== undefined && !nc.isClosed()) servers.add(connected);
  let streams: StreamCopies[] = [];
  let jetstream = false;
  if (!nc.isClosed()) {
    let timer: NodeJS.Timeout | undefined;
    try {
      const list = (async (): Promise<StreamCopies[]> => {
        const jsm = await jetstreamManager(nc, { timeout: timeoutMs });
        const found: StreamCopies[] = [];
        for await (const info of jsm.streams.list()) {
          const cluster = info.cluster;
          const peers = (cluster?.replicas ?? []).filter((p) => p.current && !p.offline).length;
          // A server without clustering names no cluster, or only its leader: its one copy is current.
          const current = cluster === undefined ? 1 : cluster.leader ? 1 + peers : 0;
          found.push({ stream: info.config.name, replicas: info.config.num_replicas ?? 1, current });
        }
        return found;
      })();
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("the listing of streams timed out")), timeoutMs);
      });
      // A listing that times out may still fail later: that is no unhandled rejection.
      list.catch(() => undefined);
      streams = await Promise.race([list, timeout]);
      jetstream = true;
    } catch {
      streams = [];
    } finally {
      clearTimeout(timer);
    }
  }
  return { servers: [...servers].sort(), jetstream, replicasTarget: replicasFor(nc), streams };
}

/** `host:port` of a bus URL (`nats://h:p`, `tls://h:p`, `h:p`), or undefined when it is none. */
export function hostPortOf(url: string): string | undefined {
  try {
    const u = new URL(/^[a-z]+:\/\//i.test(url) ? url : `nats://${url}`);
    if (u.hostname === "" || u.port === "") return undefined;
    return `${u.hostname}:${u.port}`;
  } catch {
    return undefined;
  }
}

/**
 * Whether a NATS server answers at `hostPort`: it greets every connection with an `INFO` line
 * before any credential is asked, so a probe needs none. False after `timeoutMs` or on any error.
 */
export function probeBusServer(hostPort: string, timeoutMs = 2_000): Promise<boolean> {
  const at = hostPort.lastIndexOf(":");
  const host = hostPort.slice(0, at).replace(/^\[|\]$/g, "");
  const port = Number(hostPort.slice(at + 1));
  return new Promise((resolve) => {
    if (at < 0 || !Number.isInteger(port) || port <= 0) return resolve(false);
    const socket = tcpConnect({ host, port });
    let greeting = "";
    const done = (answer: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.on("data", (d: Buffer) => {
      greeting += d.toString("latin1");
      if (greeting.length >= 5) done(greeting.startsWith("INFO "));
    });
    socket.on("error", () => done(false));
    socket.on("close", () => done(greeting.startsWith("INFO ")));
  });
}
