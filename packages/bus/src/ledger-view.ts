// How a module's ledger is read back for a person: which entries are the mesh's own records and
// which are the module's claims, and which claims to flag.
//
// - A `tool` entry (the agent that ran the call wrote it, or the controller when no agent did) and a
//   `rotate` entry (the controller) are records: who asked, through what, and what came of it.
// - An `action` entry is a line of the module's own action journal: a file the module writes as it
//   likes, so whatever it says (who, when, what) is that module's claim. Entries written before the
//   claim was marked as one (`by: {module, claim: true}`) were journal lines too, and read the same.
// - A claim of an operator's action (an approval or a deletion, or any action it says a person
//   asked for) stands only with the request the mesh relayed for it: a `tool` entry of the same
//   module, for the same tool and login, asked by the same person, around the time the claim gives.
//   Without one it is flagged, and shown as what it is: the module's word alone.
//
// Here, with the ledger's kinds, so the controller that answers `mesh ledger` and the dashboard, and
// the CLI reading an older controller's answer, read it by one set of rules, with nothing loaded.
import type { LedgerRecord } from "./ledger.ts";
import { TOOL_SURFACES } from "./tool-codes.ts";

/** What a module says it did, read from its claim (a new entry's `claim`, an old entry's fields). */
export interface ActionClaim {
  /** The module that says it: the ledger's own, whatever the line says. */
  readonly module: string;
  readonly action: string;
  readonly login: string;
  readonly interface: string;
  /** Who the module says asked (`provisioner`: its own loop). Only its word. */
  readonly who: string;
  /** When the module says it did it. Only its word: the record's own `at` is when the bus stored it. */
  readonly at: string;
  readonly why: string;
  readonly freedBytes?: number;
}

/** Who asked for what the mesh itself recorded, and through which surface. */
export interface RecordedBy {
  readonly who: string;
  /** `mesh tool`, `dashboard`, `mesh rotate`, or `the mesh` for a tool entry older than the surface. */
  readonly via: string;
}

/**
 * One ledger entry as `mesh ledger` and the dashboard show it: the record as stored, and what the
 * mesh makes of it. A record of the mesh has `recorded`; a module's claim has `claim`, and, when it
 * claims an operator's action, either `matches` (the seq of the request the mesh relayed for it) or
 * `flagged` (why it stands on the module's word alone). An entry of a kind this reader does not know
 * has neither.
 */
export type LedgerView = LedgerRecord & {
  readonly recorded?: RecordedBy;
  readonly claim?: ActionClaim;
  readonly matches?: number;
  readonly flagged?: string;
};

/**
 * How much earlier than the call was asked a matching claim may say it acted: none should, but the
 * module's clock is read apart from the agent's.
 */
export const CLAIM_EARLIEST_MS = 60_000;

/**
 * How much later than the call was asked a matching claim may say it acted: a call waits for the
 * pass under way, and dropping a large database takes minutes.
 */
export const CLAIM_LATEST_MS = 10 * 60_000;

/**
 * What the provider's own loop does, unasked: only these, said of `provisioner`, need no request. A
 * rotation's phases and the sessions a `--now` rotation ends follow a new password in the loop's
 * input (the operator's `mesh rotate` is recorded by the mesh itself, as a `rotate` entry).
 */
const LOOP_ACTIONS: ReadonlySet<string> = new Set([
  "created",
  "re-applied",
  "retired",
  "rotation-add",
  "rotation-deliver",
  "rotation-drain",
  "rotation-remove",
  "sessions-ended",
]);

/** The loop's own name in a claim: its actions need no request. */
const LOOP_WHO = "provisioner";

/** Which tool carries which action a person asks for. */
const TOOL_OF: Readonly<Record<string, "cleanup delete" | "retire approve">> = {
  deleted: "cleanup delete",
  approved: "retire approve",
  retired: "retire approve",
};

/**
 * The codes of a relayed call whose outcome nobody saw (the provider or the agent did not answer in
 * time): it may have run, so a claim may stand on it. A call refused any other way did not run.
 */
const OUTCOME_UNKNOWN: ReadonlySet<string> = new Set(["provider-unreachable", "agent-timeout"]);

/** A relayed call, as a claim is matched against it. */
interface Request {
  readonly seq: number;
  readonly tool: string;
  readonly args: readonly string[];
  readonly who: string;
  /** When it was asked (ms), or NaN when its entry does not say. */
  readonly askedAt: number;
  readonly asked: string;
  readonly ran: boolean;
  readonly refusal: string;
  /** The logins its answer says it retired (`retire approve`), when it says. */
  readonly retired: ReadonlySet<string> | undefined;
}

/**
 * `module`'s records (oldest first) as they are shown: each classified, each claim of an operator's
 * action matched to a request the mesh relayed for it or flagged. A request matches one claim of
 * each action and login at most, the nearest in time first come.
 */
export function viewLedger(module: string, records: readonly LedgerRecord[]): LedgerView[] {
  const requests = records.flatMap((r) => requestOf(r) ?? []);
  const used = new Set<string>();
  return records.map((record): LedgerView => {
    const recorded = recordedOf(record.entry);
    if (recorded !== undefined) return { ...record, recorded };
    const claim = claimOf(module, record.entry);
    if (claim === undefined) return { ...record };
    if (!isOperatorClaim(claim)) return { ...record, claim };
    const found = matchClaim(claim, record, requests, used);
    return typeof found === "number"
      ? { ...record, claim, matches: found }
      : { ...record, claim, flagged: found };
  });
}

/**
 * Whether `claim` says an operator acted: an approval or a deletion, an action the loop does not
 * do, or any action it says someone other than the loop asked for.
 */
export function isOperatorClaim(claim: ActionClaim): boolean {
  return !LOOP_ACTIONS.has(claim.action) || (claim.who !== "" && claim.who !== LOOP_WHO);
}

/** Who asked and through what, for an entry the mesh itself recorded; undefined for any other. */
export function recordedOf(entry: Readonly<Record<string, unknown>>): RecordedBy | undefined {
  const who = text(entry["who"]) || "unknown";
  const via = text(entry["via"]);
  if (entry["kind"] === "tool") return { who, via: TOOL_SURFACES.has(via) ? via : "the mesh" };
  if (entry["kind"] === "rotate") return { who, via: via || "mesh rotate" };
  return undefined;
}

/**
 * What an `action` entry claims: a marked claim's `claim`, or an older entry's own fields (every
 * action entry was a journal line). Undefined for an entry of another kind.
 */
export function claimOf(module: string, entry: Readonly<Record<string, unknown>>): ActionClaim | undefined {
  if (entry["kind"] !== "action") return undefined;
  const by = entry["by"];
  const marked = by !== null && typeof by === "object" && (by as { claim?: unknown }).claim === true;
  const inner = entry["claim"];
  const said =
    marked && inner !== null && typeof inner === "object" && !Array.isArray(inner)
      ? (inner as Readonly<Record<string, unknown>>)
      : entry;
  const freed = said["freedBytes"];
  // As long as a journal line may give them now: an older entry was kept unbounded.
  return {
    module,
    action: text(said["action"]).slice(0, 256),
    login: text(said["login"]).slice(0, 256),
    interface: text(said["interface"]).slice(0, 256),
    who: text(said["who"]).slice(0, 256),
    at: text(said["at"]).slice(0, 64),
    why: text(said["why"]).slice(0, 2_000),
    ...(typeof freed === "number" && Number.isFinite(freed) ? { freedBytes: freed } : {}),
  };
}

// The matching request's seq, or why there is none.
function matchClaim(
  claim: ActionClaim,
  record: LedgerRecord,
  requests: readonly Request[],
  used: Set<string>,
): number | string {
  const tool = TOOL_OF[claim.action];
  const who = JSON.stringify(claim.who);
  if (tool === undefined) {
    return LOOP_ACTIONS.has(claim.action)
      ? `it says ${who} asked for it, but the mesh relays no request that makes a consumer ${claim.action}: ` +
          `only the provider's own loop does that`
      : `the mesh relays no request that makes a consumer ${JSON.stringify(claim.action)}`;
  }
  const what = `${tool} ${claim.login}`;
  const claimedAt = Date.parse(claim.at);
  if (!Number.isFinite(claimedAt)) {
    return `it gives no time (${JSON.stringify(claim.at)}) to find the ${what} the mesh relayed for it`;
  }
  const storedAt = Date.parse(record.at);
  const around = requests.filter((q) => q.tool === tool && concerns(q, claim.login));
  const inWindow = around.filter(
    (q) =>
      claimedAt >= q.askedAt - CLAIM_EARLIEST_MS &&
      claimedAt <= q.askedAt + CLAIM_LATEST_MS &&
      // Not stored before the call was asked: a claim cannot be about a call still to come.
      !(storedAt < q.askedAt - CLAIM_EARLIEST_MS),
  );
  const key = (q: Request): string => `${q.seq} ${claim.action} ${claim.login}`;
  const byWho = inWindow.filter((q) => q.who === claim.who);
  const nearest = (qs: readonly Request[]): Request | undefined =>
    [...qs].sort((a, b) => Math.abs(a.askedAt - claimedAt) - Math.abs(b.askedAt - claimedAt))[0];
  const match = nearest(byWho.filter((q) => q.ran && !used.has(key(q))));
  if (match !== undefined) {
    used.add(key(match));
    return match.seq;
  }
  const taken = nearest(byWho.filter((q) => q.ran));
  if (taken !== undefined) {
    return `the ${what} ${who} asked at ${taken.asked} (#${taken.seq}) is already borne out by an earlier claim`;
  }
  const refused = nearest(byWho);
  if (refused !== undefined) {
    return `the ${what} ${who} asked at ${refused.asked} (#${refused.seq}) did not run: ${refused.refusal}`;
  }
  const other = nearest(inWindow);
  if (other !== undefined) {
    return `it says ${who} asked, but the ${what} relayed at ${other.asked} (#${other.seq}) was asked by ${JSON.stringify(other.who)}`;
  }
  const window = `from ${CLAIM_EARLIEST_MS / 60_000} min before to ${CLAIM_LATEST_MS / 60_000} min after ${claim.at}`;
  const elsewhere = nearest(around);
  return (
    `no ${what} was asked through the mesh around the time it gives (${window})` +
    (elsewhere === undefined ? "" : `; the nearest was asked at ${elsewhere.asked} (#${elsewhere.seq})`)
  );
}

function concerns(request: Request, login: string): boolean {
  if (request.tool === "cleanup delete") return request.args[0] === login;
  return request.retired === undefined || request.retired.has(login);
}

function requestOf(record: LedgerRecord): Request | undefined {
  const e = record.entry;
  if (e["kind"] !== "tool") return undefined;
  const asked = text(e["at"]) || record.at;
  const code = text(e["code"]);
  const ran = e["ok"] === true || OUTCOME_UNKNOWN.has(code);
  const answer = e["answer"];
  const list =
    answer !== null && typeof answer === "object" ? (answer as { retired?: unknown }).retired : undefined;
  return {
    seq: record.seq,
    tool: text(e["tool"]),
    args: Array.isArray(e["args"]) ? e["args"].map(text) : [],
    who: text(e["who"]),
    askedAt: Date.parse(asked),
    asked,
    ran,
    refusal: code ? `refused (${code})` : "refused",
    retired: Array.isArray(list) ? new Set(list.map(text)) : undefined,
  };
}

function text(value: unknown): string {
  return typeof value === "string" ? value : "";
}
