// `mesh ledger <module>`: the controller reads a module's history for an operator. Only the
// controller's connection may read every ledger; the operator asks it on LEDGER_READ_SUBJECT. Each
// entry is answered with what the mesh makes of it (`viewLedger`): a record of the mesh, or the
// module's claim, flagged when it claims an operator's action no request the mesh relayed bears out.
import { readLedger, viewLedger, type LedgerRecord, type LedgerView } from "@mesh/bus";
import { isModuleName, MODULE_NAME_RULE } from "@mesh/manifest";
import type { NatsConnection } from "@nats-io/transport-node";

/** How many entries a read gives when it does not say. */
export const DEFAULT_LEDGER_LIMIT = 50;
/** The most entries one read gives; a larger limit is read as this. */
export const MAX_LEDGER_LIMIT = 1_000;

/**
 * How many entries older than those answered are read as well, to find the requests the oldest
 * claims answered may stand on (a claim and its request are seconds apart, a few entries at most).
 */
export const CLAIM_LOOKBACK = 200;

/** What the operator asks: `{module, limit?}`. */
export interface LedgerReadRequest {
  readonly module: string;
  readonly limit?: number;
}

/** The controller's answer: the newest entries oldest first, or why it cannot give them. */
export type LedgerReadReply =
  | {
      readonly ok: true;
      readonly module: string;
      /** The limit applied (the one asked, bounded by `MAX_LEDGER_LIMIT`). */
      readonly limit: number;
      readonly entries: readonly LedgerView[];
    }
  | { readonly ok: false; readonly error: string };

/**
 * Answers one ledger read: checks the request, then reads the module's newest entries on `nc`
 * (the controller's own connection). A module the fleet does not name is refused unless it left a
 * history behind (a module removed from the fleet keeps its ledger).
 * @throws nothing: every failure is an `{ok: false, error}` that says what to do.
 */
export async function answerLedgerRead(
  nc: NatsConnection,
  data: Uint8Array,
  isFleetModule: (module: string) => boolean,
): Promise<LedgerReadReply> {
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(data));
  } catch {
    return { ok: false, error: "the ledger read is not JSON: send {module, limit}" };
  }
  return readLedgerFor(nc, (body ?? {}) as Record<string, unknown>, isFleetModule);
}

/**
 * Answers one ledger read already decoded (`answerLedgerRead` without the JSON), as the dashboard
 * asks in-process; checks `request` the same way.
 * @throws nothing: every failure is an `{ok: false, error}` that says what to do.
 */
export async function readLedgerFor(
  nc: NatsConnection,
  request: LedgerReadRequest | Readonly<Record<string, unknown>>,
  isFleetModule: (module: string) => boolean,
): Promise<LedgerReadReply> {
  const { module, limit: asked } = request as { module?: unknown; limit?: unknown };
  if (typeof module !== "string" || module === "") {
    return { ok: false, error: "the ledger read names no module: send {module, limit}" };
  }
  if (!isModuleName(module)) {
    return {
      ok: false,
      error: `${JSON.stringify(module)} is not a module name: a module name is ${MODULE_NAME_RULE}`,
    };
  }
  if (asked !== undefined && (typeof asked !== "number" || !Number.isInteger(asked) || asked < 1)) {
    return { ok: false, error: `limit ${JSON.stringify(asked)} is not a whole number of entries, 1 or more` };
  }
  const limit = Math.min(asked ?? DEFAULT_LEDGER_LIMIT, MAX_LEDGER_LIMIT);
  let entries: LedgerView[];
  try {
    const read: LedgerRecord[] = await readLedger(nc, module, { limit: limit + CLAIM_LOOKBACK });
    entries = viewLedger(module, read).slice(-limit);
  } catch (err) {
    return {
      ok: false,
      error: `${module}'s ledger could not be read (${(err as Error).message}): check that the bus is up and ask again`,
    };
  }
  if (entries.length === 0 && !isFleetModule(module)) {
    return {
      ok: false,
      error: `${module} is not a module of the fleet being served and has no ledger: mesh status lists the modules`,
    };
  }
  return { ok: true, module, limit, entries };
}
