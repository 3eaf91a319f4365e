// `mesh rotate CONSUMER INTERFACE`: the operator's CLI asks the controller for a new password on a
// subject only the operator's credentials may publish to; the answer says whether it was stored.
import { BusCannotStoreError } from "./password-store.ts";

/** What the CLI sends on `ROTATE_SUBJECT`. */
export interface RotateRequest {
  readonly consumer: string;
  readonly interface: string;
}

/** What the controller answers; `busCannotStore` when the bus could not keep the new password (nothing changed). */
export type RotateReply =
  { readonly ok: true } | { readonly ok: false; readonly error: string; readonly busCannotStore?: true };

/**
 * Answers one rotation request (the raw message data) with `rotate`, whose error is the answer's.
 * Never throws.
 */
export async function answerRotateRequest(
  data: Uint8Array,
  rotate: (consumer: string, iface: string) => Promise<void>,
): Promise<RotateReply> {
  let body: { consumer?: unknown; interface?: unknown };
  try {
    body = JSON.parse(new TextDecoder().decode(data)) as typeof body;
  } catch {
    return { ok: false, error: "the rotation request is not JSON: send {consumer, interface}" };
  }
  if (typeof body?.consumer !== "string" || typeof body.interface !== "string") {
    return {
      ok: false,
      error: "the rotation request names no consumer and interface: send {consumer, interface}",
    };
  }
  try {
    await rotate(body.consumer, body.interface);
    return { ok: true };
  } catch (err) {
    if (err instanceof BusCannotStoreError) return { ok: false, error: err.message, busCannotStore: true };
    return { ok: false, error: (err as Error).message };
  }
}
