// The failures every provider's backend has, beside refusals: it cannot be reached (or does not
// answer in time), or it refuses the admin's own login. A provider's classes for them extend these,
// naming its backend, and the guard classes them without asking the adapter.

import type { FailureClass } from "./adapter.ts";
import { findInChain } from "./refusals.ts";
import { isNetworkError } from "./scrub.ts";

/**
 * The backend cannot be reached, or did not answer in time. A provider's own class for it extends
 * this one (naming its backend); the guard classes it `unreachable` wherever it sits in a cause chain.
 */
export class BackendUnreachableError extends Error {
  override name = "BackendUnreachableError";
  constructor(
    /** The backend as a person names it ("Glewlwyd", "the RADOS Gateway"). */
    readonly backend: string,
    /** `host:port` or the URL without credentials: never the password. */
    readonly endpoint: string,
    options: { cause: unknown },
  ) {
    super(
      `${backend} at ${endpoint} cannot be reached (${causeText(options.cause)}); calls fail until it ` +
        "answers again",
      options,
    );
  }
}

/**
 * The backend refused the admin's own login (the user, key or password in the admin URL). A
 * provider's own class for it extends this one; the guard classes it `credentials-rejected`.
 */
export class AdminLoginRefusedError extends Error {
  override name = "AdminLoginRefusedError";
  constructor(
    /** The backend as a person names it. */
    readonly backend: string,
    readonly endpoint: string,
    /** Who was refused ("the admin \"root\"", "the admin's key"). */
    who: string,
    /** What the backend answered. */
    why: string,
    /** What to check, as a sentence's end. */
    fix: string,
  ) {
    super(`${backend} at ${endpoint} refused ${who} (${why}); ${fix}`);
  }
}

/**
 * The class of the failures every backend has, wherever they sit in `err`'s cause chain: an
 * `AdminLoginRefusedError` is `credentials-rejected`; a `BackendUnreachableError` or the network
 * failing (the operating system's codes) is `unreachable`; anything else undefined. The guard
 * applies it after the adapter's own word; an adapter's exported classifier may end with it.
 */
export function classifyBackendFailure(err: unknown): FailureClass | undefined {
  if (findInChain(err, (e) => e instanceof AdminLoginRefusedError) !== undefined) {
    return "credentials-rejected";
  }
  const down = isNetworkError(err) || findInChain(err, (e) => e instanceof BackendUnreachableError);
  return down ? "unreachable" : undefined;
}

function causeText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = (err as { cause?: unknown }).cause;
  return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
}
