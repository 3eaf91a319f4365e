// A restore of a backup taken before a rotation gives the mesh back an older password than the one
// its backend holds. A provider never puts such a password back (the newer one may have replaced a
// leaked one): it fails the consumer with this class and words, and the controller, reading them
// in its node's report, rotates that consumer to a password minted after the one held.

/** The failure class of a consumer whose asked password is older than the one its backend holds. */
export const OLDER_THAN_BACKEND = "older-than-backend";

/**
 * Why a password minted at `asked` is not applied over one minted at `held` (both ISO 8601), or
 * undefined when it may be: when either is unknown (a mesh or a mark of before mint times) or the
 * asked one is not older. The words name the held mint time, which `heldMintOf` reads back.
 */
export function olderThanHeld(asked: string | undefined, held: string | undefined): string | undefined {
  if (asked === undefined || held === undefined) return undefined;
  const a = Date.parse(asked);
  const h = Date.parse(held);
  if (Number.isNaN(a) || Number.isNaN(h) || a >= h) return undefined;
  return (
    `the backend holds a password minted at ${new Date(h).toISOString()}, newer than the asked one ` +
    `(${new Date(a).toISOString()}): the mesh's state is older than the backend, as after a restore ` +
    "of an older backup; the older password is not put back, and the mesh rotates it"
  );
}

/** The held mint time (ISO 8601) that `olderThanHeld`'s words name, or undefined. */
export function heldMintOf(text: string): string | undefined {
  const m = /holds a password minted at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)/.exec(text);
  return m?.[1];
}
