// Writing each node's delivery into the node's own bucket, only when something the node would see
// changed: the plan it takes part in, its modules, its sealing key, a password's version, or its
// modules' credentials (JWTs, never a seed). A fingerprint of those (never of a password) decides,
// so a controller restart republishes nothing and a node's generation only moves when its delivery
// does.
import { createHash } from "node:crypto";
import {
  assertNodeName,
  nodeDeliveriesBucket,
  openState,
  seal,
  StateValueError,
  type BusState,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";
import { DELIVERY_KEY, nodePlan, planEntries, secretKey, type Delivery } from "@mesh/manifest";
import type { EnrolledNode } from "./enrollment.ts";
import type { FleetPlan } from "./fleet-plan.ts";
import type { NodeCredentials } from "./module-credentials.ts";
import type { PasswordStore } from "./password-store.ts";

/** What was last published to a node, kept in the desired-state bucket. */
interface DeliveredRecord {
  readonly v: 1;
  readonly generation: number;
  readonly fingerprint: string;
}

/** The key of a node's delivered record in the desired-state bucket. */
export const deliveredKey = (node: string): string => `delivered.${assertNodeName(node)}`;

const EMPTY_PLAN = { instances: [] };

/** What publishing one node's delivery did. */
export interface Published {
  readonly node: string;
  /** The generation the node's bucket holds now; undefined for a node not enrolled yet. */
  readonly generation: number | undefined;
  /** Whether a new delivery was written. */
  readonly changed: boolean;
}

/** Each node's deliveries bucket, and what was last published there. */
export class NodeDeliveries {
  readonly #nc: NatsConnection;
  readonly #desired: BusState<unknown>;
  readonly #passwords: PasswordStore;
  readonly #buckets = new Map<string, BusState<Delivery>>();
  readonly #delivered = new Map<string, DeliveredRecord>();
  // The boxes last sealed for each node, by secret key: a password whose version and node key are
  // unchanged keeps its box, so a change reseals only what changed (sealing is most of the cost).
  readonly #boxes = new Map<string, Map<string, { version: string; sealPublicKey: string; box: string }>>();

  constructor(nc: NatsConnection, desired: BusState<unknown>, passwords: PasswordStore) {
    this.#nc = nc;
    this.#desired = desired;
    this.#passwords = passwords;
  }

  /**
   * `node`'s deliveries bucket, created when it does not exist (a node cannot create it: its
   * credentials only read it).
   * @throws InvalidNodeNameError; StateOpenError when it cannot be opened.
   */
  async bucket(node: string): Promise<BusState<Delivery>> {
    let bucket = this.#buckets.get(node);
    if (bucket === undefined) {
      bucket = await openState<Delivery>(this.#nc, nodeDeliveriesBucket(node));
      this.#buckets.set(node, bucket);
    }
    return bucket;
  }

  /**
   * Publishes `node`'s delivery from `fleet` (an empty one for a node the fleet no longer names,
   * so its agent stops its modules) with its modules' `credentials`, when it differs from what the
   * node has. A node not enrolled gets its bucket only; its delivery follows when it enrolls. `term`
   * is the publishing leader's (0: none); `mustLead`, called right before the write, throws when
   * it no longer leads (a leader paused mid-publish past its lease writes nothing when it resumes).
   * @throws the bus's error when a bucket cannot be read or written; what `mustLead` throws.
   */
  async publish(
    node: string,
    fleet: FleetPlan,
    enrolled: EnrolledNode | undefined,
    credentials: NodeCredentials = { credentials: {}, replaceKeys: {} },
    term = 0,
    mustLead: () => void = () => undefined,
  ): Promise<Published> {
    const bucket = await this.bucket(node);
    if (enrolled === undefined) return { node, generation: undefined, changed: false };
    const inFleet = fleet.nodes.includes(node);
    const plan = inFleet ? nodePlan(fleet.plan, node) : EMPTY_PLAN;
    const modules = inFleet
      ? fleet.modules
          .filter((m) => m.node === node)
          .map((m) => ({
            name: m.name,
            manifest: m.manifest,
            ...(m.metrics === undefined ? {} : { metrics: m.metrics }),
            ...(m.env === undefined ? {} : { env: m.env }),
            ...(m.admin === undefined ? {} : { admin: m.admin }),
          }))
      : [];
    const passwords = [];
    for (const entry of planEntries(plan)) {
      passwords.push({
        key: secretKey(entry.consumer, entry.interface),
        ...(await this.#passwords.ensure(entry.consumer, entry.interface)),
      });
    }
    const fingerprint = createHash("sha256")
      .update(
        JSON.stringify({
          fleetFile: fleet.fleetFile,
          modules,
          plan,
          sealPublicKey: enrolled.sealPublicKey,
          versions: passwords.map((p) => [p.key, p.version]),
          credentials: credentials.credentials,
          replaceKeys: credentials.replaceKeys,
          // A new leader writes every delivery again in its term, so none of an older one stands.
          ...(term > 0 ? { term } : {}),
        }),
      )
      .digest("hex");
    const last = await this.#last(node, bucket);
    if (last.record?.fingerprint === fingerprint && last.inBucket === last.record.generation) {
      return { node, generation: last.record.generation, changed: false };
    }
    const generation = Math.max(last.record?.generation ?? 0, last.inBucket ?? 0) + 1;
    const before = this.#boxes.get(node);
    const boxes = new Map<string, { version: string; sealPublicKey: string; box: string }>();
    const secrets: Record<string, string> = {};
    for (const p of passwords) {
      const old = before?.get(p.key);
      const box =
        old !== undefined && old.version === p.version && old.sealPublicKey === enrolled.sealPublicKey
          ? old.box
          : await seal(p.password, enrolled.sealPublicKey);
      boxes.set(p.key, { version: p.version, sealPublicKey: enrolled.sealPublicKey, box });
      secrets[p.key] = box;
    }
    mustLead();
    await bucket.put(DELIVERY_KEY, {
      node,
      generation,
      ...(term > 0 ? { term } : {}),
      fleetFile: fleet.fleetFile,
      modules,
      plan,
      secrets,
      credentials: credentials.credentials,
      replaceKeys: credentials.replaceKeys,
    });
    const record: DeliveredRecord = { v: 1, generation, fingerprint };
    await this.#desired.put(deliveredKey(node), record);
    this.#delivered.set(node, record);
    this.#boxes.set(node, boxes);
    return { node, generation, changed: true };
  }

  // What was last published, and the generation the bucket holds: read from the bus once per
  // process (then remembered), so a restart compares with what the nodes really have.
  async #last(
    node: string,
    bucket: BusState<Delivery>,
  ): Promise<{ record: DeliveredRecord | undefined; inBucket: number | undefined }> {
    const remembered = this.#delivered.get(node);
    if (remembered !== undefined) return { record: remembered, inBucket: remembered.generation };
    let record: DeliveredRecord | undefined;
    try {
      const value = (await this.#desired.get(deliveredKey(node))) as Partial<DeliveredRecord> | undefined;
      if (value?.v === 1 && typeof value.generation === "number" && typeof value.fingerprint === "string") {
        record = { v: 1, generation: value.generation, fingerprint: value.fingerprint };
      }
    } catch (err) {
      if (!(err instanceof StateValueError)) throw err;
    }
    let inBucket: number | undefined;
    try {
      const delivery = await bucket.get(DELIVERY_KEY);
      if (typeof delivery?.generation === "number") inBucket = delivery.generation;
    } catch (err) {
      if (!(err instanceof StateValueError)) throw err;
    }
    return { record, inBucket };
  }
}
