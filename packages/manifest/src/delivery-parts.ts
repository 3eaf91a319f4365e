// A node's delivery as its bucket holds it: a small head under `DELIVERY_KEY` and one key per
// part (each module it runs, each consumer entry with its sealed password), so no value grows with
// the node's share of the fleet (NATS refuses a message over `max_payload`, 1 MiB by default). The
// head names every part with a fingerprint: a reader assembles a delivery only when every part it
// names is there as named, so it never applies half of one change and half of the last.
import { createHash } from "node:crypto";
import type { DeliveredModule, Delivery, ModuleCredential } from "./delivery.ts";
import type { PlanEntry, PlanInstance } from "./plan.ts";

/** An instance of the plan as the head lists it: its consumers are parts. */
export type HeadInstance = Omit<PlanInstance, "consumers">;

/** What the controller writes under `DELIVERY_KEY`: the delivery without its parts, and their names. */
export interface DeliveryHead {
  readonly node: string;
  readonly generation: number;
  readonly term?: number;
  readonly fleetFile: string;
  readonly instances: readonly HeadInstance[];
  /**
   * Part key (`partKey…`) -> `partFingerprint` of the part, in the delivery's order, when the
   * delivery has at most `INDEX_CHUNK` parts; absent when `index` names them instead.
   */
  readonly parts?: Readonly<Record<string, string>>;
  /**
   * Index key (`indexPartKey(n)`) -> `indexFingerprint` of its list, in order, for a delivery of
   * more than `INDEX_CHUNK` parts: each index lists up to `INDEX_CHUNK` of them, so the head stays
   * small however many consumers the node has.
   */
  readonly index?: Readonly<Record<string, string>>;
  /** Whether the controller issues module credentials (`Delivery.credentials` is then present). */
  readonly issuesCredentials: boolean;
  /**
   * The protocol of the controller that wrote it (`PROTOCOL_VERSION`); absent from a controller of
   * 0.1.0 (protocol 1). An agent applies only a delivery of a protocol it works with.
   */
  readonly protocol?: number;
  /** The release of the controller that wrote it (`MESH_RELEASE`); absent from 0.1.0. */
  readonly release?: string;
}

/** One module the node runs, with the credentials issued for it. */
export interface ModulePart {
  readonly kind: "module";
  readonly module: DeliveredModule;
  readonly credential?: ModuleCredential;
  readonly replaceKey?: string;
}

/** One consumer entry of the node's plan, with its password sealed to the node's key. */
export interface EntryPart {
  readonly kind: "entry";
  readonly entry: PlanEntry;
  /** The password's version (random, a new one at each rotation). */
  readonly version: string;
  /** Minted by `mesh rotate --now`: taken without an overlap, the old sessions ended. */
  readonly cut?: true;
  /** ISO 8601: when the password was minted (absent from a controller of before mint times). */
  readonly minted?: string;
  /** The node key it is sealed to. */
  readonly sealPublicKey: string;
  /** The password sealed (bus `seal`) to `sealPublicKey`; not part of the fingerprint. */
  readonly box: string;
}

/** One list of a large delivery's parts (part key -> fingerprint, in order), under its own key. */
export interface IndexPart {
  readonly kind: "index";
  readonly parts: Readonly<Record<string, string>>;
}

/** How many parts a head names itself, and how many one index lists. */
export const INDEX_CHUNK = 1024;

/** The key of a large delivery's `n`th index. */
export const indexPartKey = (n: number): string => `i.${n}`;

/** The fingerprint a head names an index by. */
export function indexFingerprint(parts: Readonly<Record<string, string>>): string {
  return createHash("sha256").update(JSON.stringify(parts)).digest("hex").slice(0, 20);
}

/**
 * How a head names `parts` (key and fingerprint, in order): itself when there are at most
 * `INDEX_CHUNK`, else through indexes of `INDEX_CHUNK` each, which are returned to be stored.
 */
export function nameParts(parts: readonly (readonly [string, string])[]): {
  readonly named: Pick<DeliveryHead, "parts" | "index">;
  readonly indexes: readonly {
    readonly key: string;
    readonly fingerprint: string;
    readonly part: IndexPart;
  }[];
} {
  if (parts.length <= INDEX_CHUNK) return { named: { parts: Object.fromEntries(parts) }, indexes: [] };
  const indexes = [];
  for (let at = 0; at < parts.length; at += INDEX_CHUNK) {
    const list = Object.fromEntries(parts.slice(at, at + INDEX_CHUNK));
    indexes.push({
      key: indexPartKey(at / INDEX_CHUNK),
      fingerprint: indexFingerprint(list),
      part: { kind: "index" as const, parts: list },
    });
  }
  return { named: { index: Object.fromEntries(indexes.map((i) => [i.key, i.fingerprint])) }, indexes };
}

/** One part of a delivery, stored under its own key. */
export type DeliveryPart = ModulePart | EntryPart;

/** The key of a module's part in the node's bucket. */
export const modulePartKey = (module: string): string => `m.${module}`;

/** The key of a consumer entry's part in the node's bucket. */
export const entryPartKey = (consumer: string, iface: string): string => `e.${consumer}.${iface}`;

/**
 * The fingerprint a head names a part by: of everything in it but the sealed box, whose bytes
 * change at every sealing of the same password (so a part is rewritten only when what it says
 * changes: its module, entry, password version or node key).
 */
export function partFingerprint(part: DeliveryPart | Omit<EntryPart, "box">): string {
  const { box: _box, ...said } = part as EntryPart;
  return createHash("sha256").update(JSON.stringify(said)).digest("hex").slice(0, 20);
}

/** Whether `value` is a head (a delivery split into parts) rather than a whole delivery of before. */
export function isDeliveryHead(value: unknown): value is DeliveryHead {
  return (
    typeof value === "object" &&
    value !== null &&
    ("parts" in value || "index" in value) &&
    !("secrets" in value)
  );
}

/** A head or part that cannot be assembled into a delivery. */
export class DeliveryPartsError extends Error {
  override name = "DeliveryPartsError";
  constructor(
    readonly field: string,
    readonly why: string,
  ) {
    super(`${field} ${why}`);
  }
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * The delivery that `head` and its `parts` (part key -> the part read) make, in the head's order.
 * Checks only how they fit together; the delivery's own fields are checked by whoever applies it.
 * @throws DeliveryPartsError when the head is not shaped like one, or a part is missing, does not
 * match its fingerprint, or names an instance the head does not list.
 */
export function joinDelivery(head: unknown, parts: ReadonlyMap<string, unknown>): Delivery {
  if (!isObject(head)) throw new DeliveryPartsError("the head", "is not an object");
  const instances = head["instances"];
  if (!Array.isArray(instances)) throw new DeliveryPartsError("instances", "is not a list");
  const named = head["parts"];
  if (!isObject(named)) throw new DeliveryPartsError("parts", "is not an object");
  const consumers = new Map<string, PlanEntry[]>();
  const instanceId = (provider: unknown, iface: unknown) => `${String(provider)} ${String(iface)}`;
  for (const i of instances) {
    if (!isObject(i)) throw new DeliveryPartsError("instances", "holds something that is not an object");
    consumers.set(instanceId(i["provider"], i["interface"]), []);
  }
  const modules: DeliveredModule[] = [];
  const credentials: Record<string, ModuleCredential> = {};
  const replaceKeys: Record<string, string> = {};
  const secrets: Record<string, string> = {};
  const cuts: string[] = [];
  const minted: Record<string, string> = {};
  for (const [key, fingerprint] of Object.entries(named)) {
    const part = parts.get(key);
    if (!isObject(part)) throw new DeliveryPartsError(`part ${key}`, "is not there");
    if (partFingerprint(part as unknown as DeliveryPart) !== fingerprint)
      throw new DeliveryPartsError(`part ${key}`, "does not match the head's fingerprint");
    if (part["kind"] === "module") {
      const p = part as unknown as ModulePart;
      if (!isObject(p.module)) throw new DeliveryPartsError(`part ${key}`, "holds no module");
      modules.push(p.module);
      if (p.credential !== undefined) credentials[p.module.name] = p.credential;
      if (p.replaceKey !== undefined) replaceKeys[p.module.name] = p.replaceKey;
    } else if (part["kind"] === "entry") {
      const p = part as unknown as EntryPart;
      if (!isObject(p.entry)) throw new DeliveryPartsError(`part ${key}`, "holds no entry");
      const list = consumers.get(instanceId(p.entry.provider, p.entry.interface));
      if (list === undefined)
        throw new DeliveryPartsError(`part ${key}`, "is for an instance the head does not list");
      list.push(p.entry);
      secrets[`${p.entry.consumer}/${p.entry.interface}`] = p.box;
      if (p.cut === true) cuts.push(`${p.entry.consumer}/${p.entry.interface}`);
      if (typeof p.minted === "string") minted[`${p.entry.consumer}/${p.entry.interface}`] = p.minted;
    } else {
      throw new DeliveryPartsError(`part ${key}`, "is neither a module nor an entry");
    }
  }
  const plan = {
    instances: (instances as Record<string, unknown>[]).map((i) => ({
      ...(i as unknown as HeadInstance),
      consumers: consumers.get(instanceId(i["provider"], i["interface"])) ?? [],
    })),
  };
  return {
    node: head["node"] as string,
    generation: head["generation"] as number,
    ...(head["term"] !== undefined ? { term: head["term"] as number } : {}),
    fleetFile: head["fleetFile"] as string,
    modules,
    plan,
    secrets,
    ...(cuts.length > 0 ? { cuts } : {}),
    ...(Object.keys(minted).length > 0 ? { minted } : {}),
    ...(head["issuesCredentials"] === true ? { credentials, replaceKeys } : {}),
  };
}

/** What `readDelivery` found: a whole delivery, or the parts its head names that are not there yet. */
export type DeliveryRead =
  | { readonly delivery: Delivery; readonly waiting?: undefined }
  | { readonly delivery?: undefined; readonly waiting: readonly string[] };

/** Parts read before, by key, with the fingerprint they were read at: a reader's cache. */
export type PartCache = Map<string, { readonly fingerprint: string; readonly part: unknown }>;

// A node's first delivery names hundreds of parts: read a few at a time, never all at once.
const READ_CONCURRENCY = 32;

/**
 * Assembles the delivery that `value` (what `DELIVERY_KEY` holds) names, reading each part with
 * `get` unless `cache` holds it at the fingerprint the head names (the cache is brought up to date).
 * A part that is missing, or not yet the one named (the controller writes the parts, then the head),
 * is answered as waiting, and nothing is assembled. A whole delivery of before is answered as it is.
 * @throws DeliveryPartsError for a head that is not shaped like one; what `get` throws.
 */
export async function readDelivery(
  value: unknown,
  get: (key: string) => Promise<unknown>,
  cache: PartCache = new Map(),
): Promise<DeliveryRead> {
  if (!isDeliveryHead(value)) return { delivery: value as Delivery };
  let listed: Record<string, string> = isObject(value.parts) ? (value.parts as Record<string, string>) : {};
  const indexes = isObject(value.index) ? Object.entries(value.index as Record<string, string>) : [];
  if (indexes.length > 0) {
    // A large delivery: its indexes first (cached as parts are), then the parts they list.
    const missing: string[] = [];
    listed = {};
    for (const [key, fingerprint] of indexes) {
      let index = cache.get(key)?.fingerprint === fingerprint ? cache.get(key)?.part : undefined;
      if (index === undefined) {
        const read = await get(key);
        if (
          isObject(read) &&
          isObject(read["parts"]) &&
          indexFingerprint(read["parts"] as Record<string, string>) === fingerprint
        ) {
          cache.set(key, { fingerprint, part: read });
          index = read;
        }
      }
      if (index === undefined) missing.push(key);
      else Object.assign(listed, (index as unknown as IndexPart).parts);
    }
    if (missing.length > 0) return { waiting: missing.sort() };
  }
  const named = Object.entries(listed);
  const waiting: string[] = [];
  const queue = named.filter(([key, fingerprint]) => cache.get(key)?.fingerprint !== fingerprint);
  const worker = async (): Promise<void> => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      const [key, fingerprint] = next;
      const part = await get(key);
      if (isObject(part) && partFingerprint(part as unknown as DeliveryPart) === fingerprint)
        cache.set(key, { fingerprint, part });
      else waiting.push(key);
    }
  };
  await Promise.all(Array.from({ length: Math.min(READ_CONCURRENCY, queue.length) }, worker));
  const keep = new Set([...named.map(([key]) => key), ...indexes.map(([key]) => key)]);
  for (const key of cache.keys()) if (!keep.has(key)) cache.delete(key);
  if (waiting.length > 0) return { waiting: waiting.sort() };
  const parts = new Map([...cache].map(([key, { part }]) => [key, part]));
  return { delivery: joinDelivery({ ...value, parts: listed }, parts) };
}
