// How many copies of each stream and bucket a connection makes: what it was asked, and the size of
// its cluster. Apart from bus-replicas.ts (which raises streams through JetStream) so that opening a
// connection (connect-bus.ts) does not load the JetStream client.
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
