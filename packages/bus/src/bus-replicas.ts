// How many servers keep a copy of each stream and KV bucket the mesh makes. On a cluster of three
// or more, three: losing any one server then loses nothing and stops no KV write or ledger append.
// Made R1 (nats.js's default), every stream sits on one server, and losing it halts them all.
import { JetStreamApiError, jetstreamManager, type StreamInfo } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { placeableReplicas, replicasFor } from "./replica-count.ts";

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
