// Writing each node's delivery into the node's own bucket, only when something the node would see
// changed: the plan it takes part in, its modules, its sealing key, a password's version, or its
// modules' credentials (JWTs, never a seed). A fingerprint of those (never of a password) decides,
// so a controller restart republishes nothing and a node's generation only moves when its delivery
// does. A delivery is a small head and one key per part (see delivery-parts in @mesh/manifest):
// a change writes the parts it changed, the head, then deletes the parts no longer named.
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
import {
  DELIVERY_KEY,
  entryPartKey,
  indexFingerprint,
  isDeliveryHead,
  MESH_RELEASE,
  modulePartKey,
  nameParts,
  nodePlan,
  partFingerprint,
  planEntries,
  PROTOCOL_VERSION,
  secretKey,
  type DeliveryHead,
  type DeliveryPart,
  type IndexPart,
  type ModulePart,
} from "@mesh/manifest";
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
  readonly #buckets = new Map<string, BusState<unknown>>();
  readonly #delivered = new Map<string, { record: DeliveredRecord; parts: Map<string, string> }>();
  // The boxes last sealed for each node, by secret key: a password whose version and node key are
  // unchanged keeps its box, so a change reseals only what changed (sealing is most of the cost).
  readonly #boxes = new Map<string, Map<string, { version: string; sealPublicKey: string; box: string }>>();
  // Parts written by a publish that failed before its head: deleted by the next one unless it names them.
  readonly #strays = new Map<string, Set<string>>();

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
  async bucket(node: string): Promise<BusState<unknown>> {
    let bucket = this.#buckets.get(node);
    if (bucket === undefined) {
      bucket = await openState<unknown>(this.#nc, nodeDeliveriesBucket(node));
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
    return this.#publish(node, fleet, enrolled, credentials, term, mustLead, 1);
  }

  // `attempt`: how many times this delivery was worked out, counting this one (again when a password
  // it carries could not be opened and was replaced).
  async #publish(
    node: string,
    fleet: FleetPlan,
    enrolled: EnrolledNode | undefined,
    credentials: NodeCredentials,
    term: number,
    mustLead: () => void,
    attempt: number,
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
            ...manifestTextOf(fleet, m.manifest),
            ...(m.metrics === undefined ? {} : { metrics: m.metrics }),
            ...(m.env === undefined ? {} : { env: m.env }),
            ...(m.admin === undefined ? {} : { admin: m.admin }),
            ...(m.limits === undefined ? {} : { limits: m.limits }),
          }))
      : [];
    // Their versions only: a password is opened when a part that carries it is written.
    const passwords = [];
    for (const entry of planEntries(plan)) {
      passwords.push({
        key: secretKey(entry.consumer, entry.interface),
        consumer: entry.consumer,
        interface: entry.interface,
        // From memory when held (as after `ensureAll`), else read or minted now.
        ...(this.#passwords.heldVersion(entry.consumer, entry.interface) ??
          (await this.#passwords.ensureVersion(entry.consumer, entry.interface))),
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
          // A controller of another protocol (an upgrade) writes every head again, saying its own.
          protocol: PROTOCOL_VERSION,
        }),
      )
      .digest("hex");
    const last = await this.#last(node, bucket);
    if (last.record?.fingerprint === fingerprint && last.inBucket === last.record.generation) {
      return { node, generation: last.record.generation, changed: false };
    }
    const generation = Math.max(last.record?.generation ?? 0, last.inBucket ?? 0) + 1;
    // One part per module and per consumer entry, each written only when what it says changed;
    // then the head that names them; then the parts it no longer names are deleted. A reader never
    // sees a head naming a part not written yet, nor one whose part was deleted while it stood.
    const parts: {
      key: string;
      fingerprint: string;
      password?: { key: string; consumer: string; interface: string; version: string };
      write: () => Promise<DeliveryPart>;
    }[] = [];
    for (const m of modules) {
      const part: ModulePart = {
        kind: "module",
        module: m,
        ...(credentials.credentials[m.name] === undefined
          ? {}
          : { credential: credentials.credentials[m.name] }),
        ...(credentials.replaceKeys[m.name] === undefined
          ? {}
          : { replaceKey: credentials.replaceKeys[m.name] }),
      };
      parts.push({ key: modulePartKey(m.name), fingerprint: partFingerprint(part), write: async () => part });
    }
    const before = this.#boxes.get(node);
    const boxes = new Map<string, { version: string; sealPublicKey: string; box: string }>();
    const byKey = new Map(passwords.map((p) => [p.key, p]));
    for (const entry of planEntries(plan)) {
      const key = secretKey(entry.consumer, entry.interface);
      const p = byKey.get(key);
      if (p === undefined) continue;
      const said = {
        kind: "entry" as const,
        // Where logins alternate, the login the delivered password is for.
        entry: entry.alternates === true && p.slot === 1 ? { ...entry, slot: 1 as const } : entry,
        version: p.version,
        ...(p.cut === true ? { cut: true as const } : {}),
        ...(p.mintedAt === undefined ? {} : { minted: p.mintedAt }),
        sealPublicKey: enrolled.sealPublicKey,
      };
      const old = before?.get(key);
      if (old !== undefined && old.version === p.version && old.sealPublicKey === enrolled.sealPublicKey)
        boxes.set(key, old);
      parts.push({
        key: entryPartKey(entry.consumer, entry.interface),
        fingerprint: partFingerprint(said),
        password: p,
        write: async () => {
          const kept = boxes.get(key);
          const password = opened.get(key);
          if (kept === undefined && password === undefined) throw new Error(`${key} was not opened`);
          const box = kept?.box ?? (await seal(password as string, enrolled.sealPublicKey));
          boxes.set(key, { version: p.version, sealPublicKey: enrolled.sealPublicKey, box });
          return { ...said, box };
        },
      });
    }
    const held = last.parts ?? new Map<string, string>();
    const changed = parts.filter((p) => held.get(p.key) !== p.fingerprint);
    // The passwords to seal again, opened first: one that cannot be opened (the controller's key
    // was replaced) is replaced by a new version, and the delivery is worked out again with it.
    const opened = new Map<string, string>();
    let replaced = false;
    await inBatches(
      changed.flatMap((c) => (c.password === undefined || boxes.has(c.password.key) ? [] : [c.password])),
      async (p) => {
        const kept = await this.#passwords.ensure(p.consumer, p.interface);
        if (kept.version === p.version) opened.set(p.key, kept.password);
        else replaced = true;
      },
    );
    if (replaced) {
      if (attempt >= 3) throw new Error(`${node}'s passwords kept changing while its delivery was written`);
      return this.#publish(node, fleet, enrolled, credentials, term, mustLead, attempt + 1);
    }
    const strays = this.#strays.get(node) ?? new Set<string>();
    this.#strays.set(node, strays);
    for (const p of changed) if (!held.has(p.key)) strays.add(p.key);
    await inBatches(changed, async (p) => {
      const part = await p.write();
      mustLead();
      await bucket.put(p.key, part);
    });
    // A node with many parts gets them listed in indexes, written (when changed) before the head.
    const { named: listed, indexes } = nameParts(parts.map((p) => [p.key, p.fingerprint] as const));
    const changedIndexes = indexes.filter((i) => held.get(i.key) !== i.fingerprint);
    for (const i of changedIndexes) if (!held.has(i.key)) strays.add(i.key);
    await inBatches(changedIndexes, async (i) => {
      mustLead();
      await bucket.put(i.key, i.part);
    });
    const head: DeliveryHead = {
      node,
      generation,
      ...(term > 0 ? { term } : {}),
      fleetFile: fleet.fleetFile,
      instances: plan.instances.map(({ consumers: _consumers, ...instance }) => instance),
      ...listed,
      issuesCredentials: true,
      protocol: PROTOCOL_VERSION,
      release: MESH_RELEASE,
    };
    mustLead();
    await bucket.put(DELIVERY_KEY, head);
    const written = [...parts, ...indexes];
    const named = new Set(written.map((p) => p.key));
    await inBatches(
      [...new Set([...held.keys(), ...strays])].filter((key) => !named.has(key)),
      (key) => bucket.delete(key),
    );
    this.#strays.delete(node);
    const record: DeliveredRecord = { v: 1, generation, fingerprint };
    await this.#desired.put(deliveredKey(node), record);
    this.#delivered.set(node, { record, parts: new Map(written.map((p) => [p.key, p.fingerprint])) });
    for (const key of [...boxes.keys()]) if (!byKey.has(key)) boxes.delete(key);
    this.#boxes.set(node, boxes);
    return { node, generation, changed: true };
  }

  // What was last published, and the generation the bucket holds: read from the bus once per
  // process (then remembered), so a restart compares with what the nodes really have.
  async #last(
    node: string,
    bucket: BusState<unknown>,
  ): Promise<{
    record: DeliveredRecord | undefined;
    inBucket: number | undefined;
    parts: Map<string, string> | undefined;
  }> {
    const remembered = this.#delivered.get(node);
    if (remembered !== undefined)
      return { record: remembered.record, inBucket: remembered.record.generation, parts: remembered.parts };
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
    let parts: Map<string, string> | undefined;
    try {
      const delivery = (await bucket.get(DELIVERY_KEY)) as Partial<DeliveryHead> | undefined;
      if (typeof delivery?.generation === "number") inBucket = delivery.generation;
      // The parts the bucket holds now, as its head (and its indexes) name them: only those that
      // differ are written.
      if (isDeliveryHead(delivery)) parts = await heldParts(delivery, bucket);
    } catch (err) {
      if (!(err instanceof StateValueError)) throw err;
    }
    return { record, inBucket, parts };
  }
}

// The keys and fingerprints a stored head names: its parts, or its indexes and what they list (an
// index that cannot be read counts as not held, so it and its parts are written again).
async function heldParts(head: DeliveryHead, bucket: BusState<unknown>): Promise<Map<string, string>> {
  const strings = (o: unknown): [string, string][] =>
    typeof o === "object" && o !== null
      ? Object.entries(o as Record<string, unknown>).filter(
          (e): e is [string, string] => typeof e[1] === "string",
        )
      : [];
  const held = new Map(strings(head.parts));
  for (const [key] of strings(head.index)) {
    const index = (await bucket.get(key).catch(() => undefined)) as Partial<IndexPart> | undefined;
    if (index?.kind !== "index" || typeof index.parts !== "object") continue;
    // What the bucket holds, which a publish that failed before its head may have changed.
    held.set(key, indexFingerprint(index.parts));
    for (const [part, f] of strings(index.parts)) held.set(part, f);
  }
  return held;
}

// Writes to the bus a few at a time: a node's first delivery has hundreds of parts.
const WRITE_CONCURRENCY = 128;

async function inBatches<T>(items: readonly T[], write: (item: T) => Promise<unknown>): Promise<void> {
  const queue = [...items];
  const worker = async (): Promise<void> => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) await write(next);
  };
  await Promise.all(Array.from({ length: Math.min(WRITE_CONCURRENCY, queue.length) }, worker));
}

/** The largest manifest a delivery carries (as JSON text); a larger one is read from its node. */
export const DELIVERED_MANIFEST_MAX_BYTES = 768 * 1024;

// The text of the manifest at `path` as the fleet was applied with it, to travel in the delivery;
// nothing for a fleet stored before manifests were kept (the agent then reads the file).
function manifestTextOf(fleet: FleetPlan, path: string): { manifestText?: string } {
  const manifests = fleet.source?.manifests;
  if (manifests === undefined || !Object.hasOwn(manifests, path)) return {};
  const text = manifests[path] as string;
  // A module's part is one message: a manifest too large for one stays on its node, read there.
  if (Buffer.byteLength(JSON.stringify(text)) > DELIVERED_MANIFEST_MAX_BYTES) return {};
  return { manifestText: text };
}
