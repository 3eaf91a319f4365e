// What every provider writes into its backend about a consumer it made (its "mark"): active or
// retired, what was derived for it, and when and why it retired. Each backend keeps the mark in a
// place of its own (a role comment, an ACL user, a client's description, a user's display name);
// what the mark says, how it is read back, and the inventory entry it becomes are the same for all.

import type { InventoryEntry, RotationMark } from "./adapter.ts";

/** What a mark says about one consumer this instance made. */
export interface ConsumerMark {
  readonly state: "active" | "retired";
  readonly derived: Readonly<Record<string, unknown>>;
  /** ISO 8601; only on a retired one. */
  readonly retiredAt?: string | undefined;
  readonly why?: string | undefined;
  /** The rotation under way (active only): its phase, when it began, when the old password goes. */
  readonly rotation?: RotationMark | undefined;
  /** ISO 8601 (active only): when the password applied was minted (`Provision.minted`). */
  readonly minted?: string | undefined;
}

/**
 * The mark in `body` (a mark's JSON, parsed): undefined when it is not an object with a state of
 * "active" or "retired". A `derived` that is not an object reads as `{}`; a `retiredAt` or `why`
 * that is not a string reads as absent.
 */
export function readMark(body: unknown): ConsumerMark | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const { state, derived, retiredAt, why, rotation, minted } = body as Record<string, unknown>;
  if (state !== "active" && state !== "retired") return undefined;
  const rotating = state === "active" ? readRotation(rotation) : undefined;
  const mintedAt = state === "active" ? readMinted(minted) : undefined;
  return {
    state,
    derived: typeof derived === "object" && derived !== null ? (derived as Record<string, unknown>) : {},
    retiredAt: typeof retiredAt === "string" ? retiredAt : undefined,
    why: typeof why === "string" ? why : undefined,
    ...(rotating === undefined ? {} : { rotation: rotating }),
    ...(mintedAt === undefined ? {} : { minted: mintedAt }),
  };
}

/** A mint time as a mark or an entry gives it: an ISO 8601 date, else undefined. */
export function readMinted(value: unknown): string | undefined {
  return typeof value === "string" && !Number.isNaN(Date.parse(value)) ? value : undefined;
}

/**
 * A rotation as a mark records it: undefined unless it has a phase of "add" or "drain" and both
 * times are ISO 8601 dates.
 */
export function readRotation(body: unknown): RotationMark | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const { phase, since, until } = body as Record<string, unknown>;
  if (phase !== "add" && phase !== "drain") return undefined;
  const isDate = (t: unknown): t is string => typeof t === "string" && !Number.isNaN(Date.parse(t));
  if (!isDate(since) || !isDate(until)) return undefined;
  return { phase, since, until };
}

/** `text` parsed as JSON, or undefined when it is not JSON. */
export function parseJsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * The mark `retire` writes: retired `at` for `why`, keeping what was derived (the `derived` it is
 * handed, or else what the mark already there recorded).
 */
export function retiredMark(
  derived: Readonly<Record<string, unknown>>,
  recorded: ConsumerMark | undefined,
  why: string,
  at: Date,
): ConsumerMark {
  return {
    state: "retired",
    derived: Object.keys(derived).length > 0 ? derived : (recorded?.derived ?? {}),
    retiredAt: at.toISOString(),
    why,
  };
}

/** The inventory entry of consumer `as` from its mark. */
export function markEntry(as: string, mark: ConsumerMark): InventoryEntry {
  return {
    as,
    state: mark.state,
    derived: mark.derived,
    retiredAt: mark.retiredAt === undefined ? undefined : new Date(mark.retiredAt),
    why: mark.why,
    ...(mark.rotation === undefined ? {} : { rotation: mark.rotation }),
    ...(mark.state === "active" && mark.minted !== undefined ? { minted: mark.minted } : {}),
  };
}
