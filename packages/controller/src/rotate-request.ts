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
  /** Why it failed (never a password). */
  readonly error?: string;
};

/**
 * What the controller answers; `busCannotStore` when the bus could not keep the new password
 * (nothing changed); `ledger` when the rotation happened but its record is missing, and why.
 */
export type RotateReply =
  | { readonly ok: true; readonly ledger?: string }
  | { readonly ok: false; readonly error: string; readonly busCannotStore?: true };

// As the control socket takes who: a printable name, bounded.
const WHO = /^[^\p{Cc}]{1,128}$/u;

/**
 * Answers one rotation request (the raw message data) with `rotate`, whose error is the answer's.
 * Never throws.
 */
export async function answerRotateRequest(
  data: Uint8Array,
  rotate: (consumer: string, iface: string, who: string) => Promise<{ readonly ledger?: string } | void>,
): Promise<RotateReply> {
  let body: { consumer?: unknown; interface?: unknown; who?: unknown };
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
  try {
    const done = await rotate(body.consumer, body.interface, body.who ?? "unknown");
    return done?.ledger === undefined ? { ok: true } : { ok: true, ledger: done.ledger };
  } catch (err) {
    if (err instanceof BusCannotStoreError) return { ok: false, error: err.message, busCannotStore: true };
    return { ok: false, error: (err as Error).message };
  }
}
