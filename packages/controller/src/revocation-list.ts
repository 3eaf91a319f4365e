// The revoked user keys, kept in the desired-state bucket as well as in the authority file, so
// that every controller (the leader of each term) pushes an account JWT built from the whole list:
// a paused old leader that wakes up can never push a list older than the one stored.
import { StaleRevisionError, type BusAuthority, type BusState } from "@mesh/bus";

/** The key of the revocation list in the desired-state bucket. */
export const REVOCATIONS_KEY = "revocations";

/** How many times a write of the list is tried again when another controller wrote it meanwhile. */
const WRITE_TRIES = 5;

/**
 * Takes the stored revocation list into `authority`, then stores the union (compare-and-set on
 * its revision), so the authority's account JWT holds at least every revocation stored.
 * @throws StaleRevisionError when the list kept changing under it; the bus's error when it cannot be read or stored.
 */
export async function syncRevocations(desired: BusState<unknown>, authority: BusAuthority): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    const stored = await desired.entry(REVOCATIONS_KEY);
    const value = stored?.value;
    if (value !== null && typeof value === "object") {
      await authority.adoptRevocations(value as Record<string, number>);
    }
    const union = authority.revocations;
    if (stored !== undefined && sameKeys(union, value as Record<string, number>)) return;
    try {
      await desired.update(REVOCATIONS_KEY, union, stored?.revision ?? 0);
      return;
    } catch (err) {
      if (!(err instanceof StaleRevisionError) || attempt >= WRITE_TRIES) throw err;
    }
  }
}

function sameKeys(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>> | null): boolean {
  if (b === null || typeof b !== "object") return false;
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => b[k] === a[k]);
}
