// `mesh rotate CONSUMER INTERFACE`: the operator's CLI asks the controller for a new password on a
// subject only the operator's credentials may publish to; the answer says whether it was stored.
// The controller that carries it records it (who asked, which consumer, when; never the password)
// in the consumer's ledger and its provider's, as a `rotate` entry.
import { BusCannotStoreError } from "./password-store.ts";

/** What the CLI sends on `ROTATE_SUBJECT`. */
export interface RotateRequest {
  readonly consumer: string;
  readonly interface: string;
  /** Who asks: the CLI's Unix user. An older CLI says nothing, recorded as `unknown`. */
  readonly who?: string;
  /**
   * `mesh rotate --now`, for a leaked password: no overlap (the old password is refused as soon as
   * the provider takes the new one, and the login's sessions are ended), and not refused while
   * another rotation of the consumer is under way.
   */
  readonly now?: boolean;
}

/** How a rotation is asked beyond who and what. */
export interface RotateOptions {
  /** See `RotateRequest.now`. */
  readonly now?: boolean;
}

/** Through which surface a rotation is asked, as the ledger says it. */
export const ROTATE_SURFACE = "mesh rotate";

/** What a module's ledger keeps of a rotation the controller carried (a `rotate` entry). */
export type RotationRecord = {
  readonly consumer: string;
  readonly interface: string;
  /** The provider module and the login it rotates, when the fleet served names them. */
  readonly provider?: string;
  readonly login?: string;
  readonly who: string;
  readonly via: typeof ROTATE_SURFACE;
  /** When it was asked (ISO 8601, the controller's clock). */
  readonly at: string;
  readonly ok: boolean;
  /** Set for `mesh rotate --now`: no overlap, the old sessions ended. */
  readonly now?: true;
  /** Why it failed (never a password). */
  readonly error?: string;
  /** Why the mesh rotated it on its own (`who` is then the mesh), in words. */
  readonly why?: string;
};

/**
 * What the controller answers; `busCannotStore` when the bus could not keep the new password
 * (nothing changed); `ledger` when the rotation happened but its record is missing, and why.
 */
export type RotateReply =
  | ({ readonly ok: true; readonly ledger?: string } & Partial<RotatedPassword>)
  | { readonly ok: false; readonly error: string; readonly busCannotStore?: true };

/**
 * Which provider applies a rotated password and how to know it did: its `status` lists `login`
 * with `applied` equal to `tag` (a one-way tag of the password, never the password).
 */
export interface RotatedPassword {
  readonly provider: string;
  readonly login: string;
  readonly tag: string;
}

// As the control socket takes who: a printable name, bounded.
const WHO = /^[^\p{Cc}]{1,128}$/u;

/**
 * Answers one rotation request (the raw message data) with `rotate`, whose error is the answer's.
 * Never throws.
 */
export async function answerRotateRequest(
  data: Uint8Array,
  rotate: (
    consumer: string,
    iface: string,
    who: string,
    options: RotateOptions,
  ) => Promise<({ readonly ledger?: string } & Partial<RotatedPassword>) | void>,
): Promise<RotateReply> {
  let body: { consumer?: unknown; interface?: unknown; who?: unknown; now?: unknown };
  try {
    body = JSON.parse(new TextDecoder().decode(data)) as typeof body;
  } catch {
    return { ok: false, error: "the rotation request is not JSON: send {consumer, interface, who}" };
  }
  if (typeof body?.consumer !== "string" || typeof body.interface !== "string") {
    return {
      ok: false,
      error: "the rotation request names no consumer and interface: send {consumer, interface, who}",
    };
  }
  if (body.who !== undefined && (typeof body.who !== "string" || !WHO.test(body.who))) {
    return { ok: false, error: `"who" must be a name of 1 to 128 printable characters: nothing was rotated` };
  }
  if (body.now !== undefined && typeof body.now !== "boolean") {
    return { ok: false, error: `"now" must be true or false: nothing was rotated` };
  }
  try {
    const done = await rotate(body.consumer, body.interface, body.who ?? "unknown", {
      ...(body.now === true ? { now: true } : {}),
    });
    return { ok: true, ...(done ?? {}) };
  } catch (err) {
    if (err instanceof BusCannotStoreError) return { ok: false, error: err.message, busCannotStore: true };
    return { ok: false, error: (err as Error).message };
  }
}
