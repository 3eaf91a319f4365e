// What a node reports of what its modules use and may use: each one's cgroup, limits, the last limit
// it reached and the size of its home, and the users of its mesh whose module is gone. Read from a
// node's report field by field, bounded and clipped, as everything a node sends.
import { isModuleLimits, LIMIT_NAMES, type EffectiveLimits } from "@mesh/manifest";

/** A limit a module reached (out of memory, pids, home), as its node reports it. */
export interface ReportedLimitEvent {
  readonly kind: "out-of-memory" | "pids" | "home";
  /** In words: `killed: out of memory (limit 64M)`. */
  readonly text: string;
  /** ISO 8601. */
  readonly at: string;
}

/** The resources of one module as its node reports them; each field absent when not said. */
export interface ReportedResources {
  /** Its cgroup's name (`mesh-<id>-<module>`), while it runs in one. */
  readonly cgroup?: string;
  /** The limits it runs under (null: no bound). */
  readonly limits?: EffectiveLimits;
  /** The last limit it reached. */
  readonly limitEvent?: ReportedLimitEvent;
  /** Its home's size on disk, as last measured. */
  readonly home?: { readonly bytes: number; readonly at: string };
}

const KINDS = new Set(["out-of-memory", "pids", "home"]);
const CGROUP = /^mesh-[a-z0-9-]{1,60}$/;
const USER = /^mesh-[a-z0-9-]{1,60}$/;
const TEXT_MAX = 300;
const MOST_USERS = 100;

const isIso = (v: unknown): v is string =>
  typeof v === "string" && v.length <= 40 && !Number.isNaN(Date.parse(v));

/** The resource fields of one module entry of a report, those well formed. */
export function resourcesOf(entry: Readonly<Record<string, unknown>>): ReportedResources {
  const out: {
    cgroup?: string;
    limits?: EffectiveLimits;
    limitEvent?: ReportedLimitEvent;
    home?: { bytes: number; at: string };
  } = {};
  const { cgroup, limits, limitEvent, home } = entry;
  if (typeof cgroup === "string" && CGROUP.test(cgroup)) out.cgroup = cgroup;
  if (isModuleLimits(limits) && LIMIT_NAMES.every((k) => k in limits)) out.limits = limits as EffectiveLimits;
  const e = limitEvent as Record<string, unknown> | null | undefined;
  if (
    typeof e?.["kind"] === "string" &&
    KINDS.has(e["kind"]) &&
    typeof e["text"] === "string" &&
    isIso(e["at"])
  ) {
    out.limitEvent = {
      kind: e["kind"] as ReportedLimitEvent["kind"],
      text: e["text"].slice(0, TEXT_MAX),
      at: e["at"],
    };
  }
  const h = home as Record<string, unknown> | null | undefined;
  if (
    typeof h?.["bytes"] === "number" &&
    Number.isSafeInteger(h["bytes"]) &&
    h["bytes"] >= 0 &&
    isIso(h["at"])
  ) {
    out.home = { bytes: h["bytes"], at: h["at"] };
  }
  return out;
}

/** The users of a node's mesh whose module is gone, as its report lists them (at most 100). */
export function goneModuleUsersOf(value: unknown): string[] | undefined {
  if (!Array.isArray(value)) return undefined;
  return value.filter((u): u is string => typeof u === "string" && USER.test(u)).slice(0, MOST_USERS);
}
