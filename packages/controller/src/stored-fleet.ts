// The last fleet the controller served, kept in its desired-state bucket, so a controller that
// restarts while the fleet file is broken keeps serving what it served (nothing retired by a typo).
import { createHash, randomBytes } from "node:crypto";
import { StateValueError } from "@mesh/bus";
import type { FleetPlan } from "./fleet-plan.ts";

/** The key of the last good fleet in the desired-state bucket. */
export const STORED_FLEET_KEY = "fleet";

/** Reads a stored fleet, or undefined when the value is not one. */
export function parseStoredFleet(value: unknown): FleetPlan | undefined {
  const v = value as Partial<FleetPlan> | null | undefined;
  if (
    typeof v?.fleetFile !== "string" ||
    typeof v.readAt !== "string" ||
    !Array.isArray(v.nodes) ||
    !Array.isArray(v.modules) ||
    !Array.isArray(v.plan?.instances)
  ) {
    return undefined;
  }
  return v as FleetPlan;
}

/**
 * How large one stored part of the fleet may be. The fleet grows with its consumers; a NATS
 * message does not (1 MiB by default): the fleet is kept in parts, each well under it.
 */
export const STORED_FLEET_PART_BYTES = 256 * 1024;

/** The head of a stored fleet: which parts hold it, and the digest of their text. */
interface StoredHead {
  readonly v: 2;
  /** Names this writing's parts (`fleet.<generation>.<i>`), so a half-written newer one is never read. */
  readonly generation: string;
  readonly parts: number;
  readonly sha256: string;
  /** The term of the controller lease in which it was stored. */
  readonly term?: number;
  /** The fleet's revision: 1 for the first applied, one more for each apply that changed it. */
  readonly revision?: number;
}

/** Who stored the fleet, and from what: the head of the stored fleet without its parts. */
export interface StoredFleetHead {
  /** The sha256 of the stored fleet's JSON text. */
  readonly sha256: string;
  /** The lease term of the controller that stored it (0: stored before terms). */
  readonly term: number;
  /** The fleet's revision (0: stored before revisions). */
  readonly revision: number;
}

/**
 * The head of the stored fleet, or undefined when none is stored (or one of before parts).
 * @throws nothing: a bus that does not answer is no stored fleet.
 */
export async function loadStoredFleetHead(state: FleetStateBucket): Promise<StoredFleetHead | undefined> {
  try {
    const head = (await state.get(STORED_FLEET_KEY)) as Partial<StoredHead> | undefined;
    if (head?.v !== 2 || typeof head.sha256 !== "string") return undefined;
    return {
      sha256: head.sha256,
      term: typeof head.term === "number" ? head.term : 0,
      revision: typeof head.revision === "number" ? head.revision : 0,
    };
  } catch {
    return undefined;
  }
}

/** The part of a stored fleet's JSON text at `i` (a key of the desired-state bucket). */
const partKey = (generation: string, i: number): string => `${STORED_FLEET_KEY}.${generation}.${i}`;

/** The slice of the desired-state bucket the stored fleet needs. */
export interface FleetStateBucket {
  get(key: string): Promise<unknown>;
  put(key: string, value: unknown): Promise<number>;
  delete(key: string): Promise<void>;
}

/**
 * Names the parts being written, and the writing they replace, before the head names them: the
 * parts of a writing cut short (its controller killed, or the bus failing between a part and the
 * head) and those of the writing it was replacing are so removed by the next one, by name.
 */
const WRITING_KEY = `${STORED_FLEET_KEY}-writing`;

/** Which parts of the bucket one writing holds. */
interface Parts {
  readonly generation: string;
  readonly parts: number;
}

/** What the writing key holds. */
interface Writing extends Parts {
  /** The writing that was stored when this one began. */
  readonly replaces?: Parts;
}

function partsOf(value: unknown): Parts | undefined {
  const v = value as Partial<Parts> | null | undefined;
  return typeof v?.generation === "string" && typeof v.parts === "number" && Number.isInteger(v.parts)
    ? { generation: v.generation, parts: v.parts }
    : undefined;
}

// The value at `key`, or undefined when it cannot be read now: then what it names stays in the
// bucket (a few bytes), and the fleet is stored all the same.
async function readOrNothing(state: FleetStateBucket, key: string): Promise<unknown> {
  try {
    return await state.get(key);
  } catch {
    return undefined;
  }
}

async function removeParts(state: FleetStateBucket, parts: Parts): Promise<void> {
  for (let i = 0; i < parts.parts; i++)
    await state.delete(partKey(parts.generation, i)).catch(() => undefined);
}

/**
 * Keeps `fleet` in the desired-state bucket in parts of at most `STORED_FLEET_PART_BYTES`, the
 * head last, so a reader finds either the fleet stored before or this one whole; then removes the
 * parts of earlier writings, by name. (Listing the bucket's keys would make a JetStream consumer,
 * which JetStream may place on a server that has just gone down: a fleet change would wait for
 * that.) `from` says in which lease term.
 * @returns the head now stored.
 * @throws the bus's error when a part or the head cannot be stored (the fleet stored before stays).
 */
export async function storeFleet(
  state: FleetStateBucket,
  fleet: FleetPlan,
  from: { readonly term?: number; readonly revision?: number } = {},
): Promise<StoredFleetHead> {
  const text = JSON.stringify(fleet);
  const generation = `${Date.now().toString(36)}${randomBytes(4).toString("hex")}`;
  const parts: string[] = [];
  // By characters, a little under the byte limit (JSON text of a fleet is nearly all ASCII; a
  // character is at most 3 bytes in UTF-8, and a part is stored as a JSON string of it).
  const chars = Math.floor(STORED_FLEET_PART_BYTES / 3);
  for (let at = 0; at < text.length; at += chars) parts.push(text.slice(at, at + chars));

  const stored = partsOf(await readOrNothing(state, STORED_FLEET_KEY));
  const last = (await readOrNothing(state, WRITING_KEY)) as Partial<Writing> | undefined;
  const lastParts = partsOf(last);
  if (lastParts !== undefined && lastParts.generation !== stored?.generation) {
    // Cut short before its head: nothing reads its parts.
    await removeParts(state, lastParts);
  } else if (lastParts !== undefined) {
    // Whole, and cut short before it removed what it replaced.
    const replaced = partsOf(last?.replaces);
    if (replaced !== undefined && replaced.generation !== stored?.generation)
      await removeParts(state, replaced);
  }
  const writing: Writing = { generation, parts: parts.length, ...(stored ? { replaces: stored } : {}) };
  await state.put(WRITING_KEY, writing);
  for (const [i, part] of parts.entries()) await state.put(partKey(generation, i), part);
  const head: StoredHead = {
    v: 2,
    generation,
    parts: parts.length,
    sha256: createHash("sha256").update(text).digest("hex"),
    ...(from.term !== undefined ? { term: from.term } : {}),
    ...(from.revision !== undefined ? { revision: from.revision } : {}),
  };
  await state.put(STORED_FLEET_KEY, head);
  if (stored !== undefined) await removeParts(state, stored);
  return { sha256: head.sha256, term: head.term ?? 0, revision: head.revision ?? 0 };
}

/**
 * The fleet kept by `storeFleet` (or, from before, in one value), or undefined when none is kept
 * or what is kept is not whole.
 * @throws nothing: a bus that does not answer is no stored fleet.
 */
export async function loadStoredFleet(state: FleetStateBucket): Promise<FleetPlan | undefined> {
  try {
    return await readStoredFleet(state);
  } catch {
    return undefined;
  }
}

/**
 * As `loadStoredFleet`, but a bus that does not answer is said, not taken for no stored fleet:
 * a controller that takes up the lead must not serve its own file for want of one read.
 * @throws the bus's error when the stored fleet cannot be read now.
 */
export async function readStoredFleet(state: FleetStateBucket): Promise<FleetPlan | undefined> {
  try {
    const head = (await state.get(STORED_FLEET_KEY)) as Partial<StoredHead> | undefined;
    if (head?.v !== 2) return parseStoredFleet(head);
    const { generation, parts, sha256 } = head;
    if (typeof generation !== "string" || typeof parts !== "number") return undefined;
    let text = "";
    for (let i = 0; i < parts; i++) {
      const part = await state.get(partKey(generation, i));
      if (typeof part !== "string") return undefined;
      text += part;
    }
    if (createHash("sha256").update(text).digest("hex") !== sha256) return undefined;
    return parseStoredFleet(JSON.parse(text));
  } catch (err) {
    // A value that is not JSON is no fleet; anything else is the bus not answering.
    if (err instanceof StateValueError || err instanceof SyntaxError) return undefined;
    throw err;
  }
}
