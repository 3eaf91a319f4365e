// Every fleet applied, kept in the desired-state bucket with who applied it, when, and what it
// changed, so that any controller (and `mesh fleet history`) can say how the fleet came to be, and
// `mesh fleet rollback` can apply an earlier one again. Only the leader writes it, one apply at a
// time; its entries are few and small, each revision's source is kept apart in parts.
import { createHash } from "node:crypto";
import type { FleetSource } from "./fleet-plan.ts";
import type { FleetStateBucket } from "./stored-fleet.ts";

/** The key of the history's index in the desired-state bucket. */
export const FLEET_HISTORY_KEY = "fleet-history";

/** How many applied revisions are kept, by default (`mesh controller --fleet-history N`). */
export const DEFAULT_FLEET_HISTORY = 100;

/** One applied revision, as `mesh fleet history` lists it. */
export interface FleetRevision {
  readonly revision: number;
  /** Who applied it: the Unix user of `mesh apply` or `mesh up`, or the dashboard's operator. */
  readonly who: string;
  /** Through what: `mesh apply`, `fleet file` (a save on the machine of `mesh up FILE`), `rollback`, … */
  readonly via: string;
  /** ISO 8601: when it was applied. */
  readonly at: string;
  /** What it changed, in one line (consumers, modules, nodes). */
  readonly summary: string;
  /** Where the fleet file was read. */
  readonly fleetFile: string;
  /** The sha256 of its source's JSON text. */
  readonly sha256: string;
  /** How many parts its source is kept in. */
  readonly parts: number;
}

interface HistoryIndex {
  readonly v: 1;
  /** Oldest first. */
  readonly entries: readonly FleetRevision[];
}

/** A part of one revision's source is at most this many characters (well under a NATS message). */
const PART_CHARS = Math.floor((256 * 1024) / 3);

const partKey = (revision: number, i: number): string => `fleet-rev.${revision}.${i}`;

function parseIndex(value: unknown): HistoryIndex {
  const v = value as Partial<HistoryIndex> | null | undefined;
  if (v?.v !== 1 || !Array.isArray(v.entries)) return { v: 1, entries: [] };
  return {
    v: 1,
    entries: v.entries.filter(
      (e): e is FleetRevision =>
        typeof e === "object" &&
        e !== null &&
        typeof (e as FleetRevision).revision === "number" &&
        typeof (e as FleetRevision).who === "string" &&
        typeof (e as FleetRevision).at === "string" &&
        typeof (e as FleetRevision).parts === "number",
    ),
  };
}

/**
 * The applied revisions kept, oldest first.
 * @throws the bus's error when the history cannot be read now.
 */
export async function readFleetHistory(state: FleetStateBucket): Promise<readonly FleetRevision[]> {
  return parseIndex(await state.get(FLEET_HISTORY_KEY)).entries;
}

/**
 * Keeps `source` as `entry.revision`, then names it in the history, and drops the oldest past `keep`.
 * @throws the bus's error when it cannot be stored (the history before stays).
 */
export async function recordFleetRevision(
  state: FleetStateBucket,
  entry: Omit<FleetRevision, "parts" | "sha256">,
  source: FleetSource,
  keep: number = DEFAULT_FLEET_HISTORY,
): Promise<FleetRevision> {
  const text = JSON.stringify(source);
  const parts: string[] = [];
  for (let at = 0; at < text.length; at += PART_CHARS) parts.push(text.slice(at, at + PART_CHARS));
  for (const [i, part] of parts.entries()) await state.put(partKey(entry.revision, i), part);
  const recorded: FleetRevision = {
    ...entry,
    sha256: createHash("sha256").update(text).digest("hex"),
    parts: parts.length,
  };
  const before = parseIndex(await state.get(FLEET_HISTORY_KEY)).entries.filter(
    (e) => e.revision !== entry.revision,
  );
  const all = [...before, recorded];
  const dropped = all.slice(0, Math.max(0, all.length - Math.max(1, keep)));
  await state.put(FLEET_HISTORY_KEY, { v: 1, entries: all.slice(dropped.length) } satisfies HistoryIndex);
  for (const old of dropped)
    for (let i = 0; i < old.parts; i++) await state.delete(partKey(old.revision, i)).catch(() => undefined);
  return recorded;
}

/**
 * One kept revision and its source, or undefined when it is not kept (past the history's length,
 * or never applied).
 * @throws the bus's error when it cannot be read now.
 */
export async function readFleetRevision(
  state: FleetStateBucket,
  revision: number,
): Promise<{ readonly entry: FleetRevision; readonly source: FleetSource } | undefined> {
  const entry = (await readFleetHistory(state)).find((e) => e.revision === revision);
  if (entry === undefined) return undefined;
  let text = "";
  for (let i = 0; i < entry.parts; i++) {
    const part = await state.get(partKey(revision, i));
    if (typeof part !== "string") return undefined;
    text += part;
  }
  if (createHash("sha256").update(text).digest("hex") !== entry.sha256) return undefined;
  const source = JSON.parse(text) as FleetSource;
  return { entry, source };
}
