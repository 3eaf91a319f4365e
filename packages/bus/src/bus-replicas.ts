// How many servers keep a copy of each stream and KV bucket the mesh makes. On a cluster of three
// or more, three: losing any one server then loses nothing and stops no KV write or ledger append.
// Made R1 (nats.js's default), every stream sits on one server, and losing it halts them all.
import { JetStreamApiError, jetstreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";

// The replicas asked for a connection (`connectBus`'s `replicas`), kept with the connection itself.
const asked = new WeakMap<NatsConnection, number>();
// The most servers a connection has seen in its cluster: one server down does not make the cluster smaller.
const largest = new WeakMap<NatsConnection, number>();

/** A replica count that JetStream cannot keep (it keeps 1 to 5 copies). */
export class InvalidReplicasError extends Error {
  override name = "InvalidReplicasError";
  constructor(readonly replicas: number) {
    super(
      `--replicas ${replicas} is not a number of copies JetStream keeps: give 1 to 5 (3 on a cluster of 3 or more)`,
    );
  }
}

/**
 * Makes `replicas` the number of copies of every stream and bucket made on `nc` (and the target of
 * `raiseReplicas`), instead of the default from the cluster's size.
 * @throws InvalidReplicasError for a number outside 1–5.
 */
export function setBusReplicas(nc: NatsConnection, replicas: number): void {
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5) throw new InvalidReplicasError(replicas);
  asked.set(nc, replicas);
}

/**
 * How many servers of the cluster `nc` is connected to are up now, as the server says it (its own
 * and its peers' client URLs: a server drops a peer it lost from them); 1 for a server alone.
 */
export function clusterSize(nc: NatsConnection): number {
  const urls = nc.info?.connect_urls ?? [];
  const now = Math.max(1, new Set(urls).size);
  if (now > (largest.get(nc) ?? 0)) largest.set(nc, now);
  return now;
}

/**
 * The replicas of a stream or bucket made on `nc`: the one set with `setBusReplicas` (or
 * `connectBus`'s `replicas`), else 3 on a cluster that has had 3 or more servers up (one of them
 * down now does not lower it), else 1.
 */
export function replicasFor(nc: NatsConnection): number {
  const up = clusterSize(nc);
  return asked.get(nc) ?? (Math.max(up, largest.get(nc) ?? 0) >= 3 ? 3 : 1);
}

/**
 * The copies a stream or bucket made on `nc` now is placed on: `replicasFor(nc)`, but no more than
 * the servers up now, so JetStream never waits for a peer that is down to place it. One made with
 * fewer is raised by `raiseReplicas` once the servers are back.
 */
export function placeableReplicas(nc: NatsConnection): number {
  return Math.max(1, Math.min(replicasFor(nc), clusterSize(nc)));
}

/**
 * Whether `err` says JetStream cannot place that many copies now (too few servers up, or a create
 * that timed out waiting for them): the caller
 * makes it with one copy, and `raiseReplicas` raises it later.
 */
export function isTooFewPeers(err: unknown): boolean {
  const message = err instanceof Error ? err.message : String(err);
  return (
    (err instanceof JetStreamApiError || err instanceof Error) &&
    // A create that times out is the same want of peers seen from the client: with a server down
    // the meta leader may sit on the request past the client's wait (measured on 2.9.10).
    /insufficient resources|no suitable peers|peers? .*(unavailable|offline)|timeout/i.test(message)
  );
}

/** A stream raised by `raiseReplicas`. */
export interface RaisedStream {
  readonly stream: string;
  readonly from: number;
  readonly to: number;
}

/**
 * Raises every stream of the account that has fewer copies than `replicasFor(nc)` (never lowers
 * one) to as many as the servers up now can keep (`placeableReplicas`), and says each to `log`.
 * A stream that cannot be raised now (too few servers up) is said and left as it is; `belowReplicas`
 * tells what is left to raise.
 * @throws the bus's error when the streams cannot be listed.
 */
export async function raiseReplicas(
  nc: NatsConnection,
  log?: { info(message: string): void; warn(message: string): void },
): Promise<RaisedStream[]> {
  const target = placeableReplicas(nc);
  const jsm = await jetstreamManager(nc);
  const raised: RaisedStream[] = [];
  for (const info of await listStreams(nc)) {
    const from = info.config.num_replicas ?? 1;
    if (from >= target) continue;
    try {
      await jsm.streams.update(info.config.name, { ...info.config, num_replicas: target });
      raised.push({ stream: info.config.name, from, to: target });
    } catch (err) {
      log?.warn(
        `stream ${info.config.name} could not be raised from ${from} to ${target} copies now ` +
          `(${(err as Error).message}); it is tried again`,
      );
    }
  }
  if (raised.length > 0) {
    log?.info(
      `raised ${raised.length} stream(s) to ${target} copies, so losing one bus server loses none of them: ` +
        raised.map((r) => `${r.stream} (was ${r.from})`).join(", "),
    );
  }
  return raised;
}

/**
 * The streams of the account with fewer copies than `replicasFor(nc)` (made while servers were
 * down, or before the cluster grew).
 * @throws the bus's error when the streams cannot be listed.
 */
export async function belowReplicas(nc: NatsConnection): Promise<string[]> {
  const target = replicasFor(nc);
  return (await listStreams(nc))
    .filter((info) => (info.config.num_replicas ?? 1) < target)
    .map((info) => info.config.name);
}

async function listStreams(nc: NatsConnection): Promise<StreamInfo[]> {
  const jsm = await jetstreamManager(nc);
  const infos: StreamInfo[] = [];
  for await (const info of jsm.streams.list()) infos.push(info);
  return infos;
}
