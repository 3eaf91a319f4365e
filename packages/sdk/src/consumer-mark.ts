// What every provider writes into its backend about a consumer it made (its "mark"): active or
// retired, what was derived for it, and when and why it retired. Each backend keeps the mark in a
// place of its own (a role comment, an ACL user, a client's description, a user's display name);
// what the mark says, how it is read back, and the inventory entry it becomes are the same for all.

import type { InventoryEntry } from "./adapter.ts";

/** What a mark says about one consumer this instance made. */
export interface ConsumerMark {
  readonly state: "active" | "retired";
  readonly derived: Readonly<Record<string, unknown>>;
  /** ISO 8601; only on a retired one. */
  readonly retiredAt?: string | undefined;
  readonly why?: string | undefined;
}

/**
 * The mark in `body` (a mark's JSON, parsed): undefined when it is not an object with a state of
 * "active" or "retired". A `derived` that is not an object reads as `{}`; a `retiredAt` or `why`
 * that is not a string reads as absent.
 */
export function readMark(body: unknown): ConsumerMark | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const { state, derived, retiredAt, why } = body as Record<string, unknown>;
  if (state !== "active" && state !== "retired") return undefined;
  return {
    state,
    derived: typeof derived === "object" && derived !== null ? (derived as Record<string, unknown>) : {},
    retiredAt: typeof retiredAt === "string" ? retiredAt : undefined,
    why: typeof why === "string" ? why : undefined,
  };
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
  };
}
