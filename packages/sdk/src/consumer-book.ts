// What the harness knows of each consumer, one record per login: what the mesh asks for, what this
// provider made, what was last applied, and its troubles. Every change goes through a transition
// method, which keeps the record's lifecycle state (`ConsumerState`) and since when it has held.

import type { InventoryEntry, Provision } from "./adapter.ts";
import type { Contribution } from "./contributions-file.ts";
import type { Trouble } from "./standing.ts";
import type { ConsumerState, ConsumerStatus } from "./tools.ts";

/** How long a missing secret is a race before it is said loudly, and how often after. */
export const SECRET_PATIENCE = 60_000;
export const SECRET_SAY_AGAIN = 20 * 60_000;

/** One consumer, as this process knows it. Read it freely; change it only through the book. */
export interface ConsumerRecord {
  readonly login: string;
  /** The contributions entry asking for it; undefined when it is no longer asked for. */
  readonly asked: Contribution | undefined;
  /** What the backend holds that this provider made: undefined when nothing (or not known yet). */
  readonly made: "active" | "retired" | undefined;
  /** The derived values it was made with (what `retire` and `delete` are given). */
  readonly derived: Readonly<Record<string, unknown>>;
  readonly retiredAt: number | undefined;
  readonly retiredWhy: string | undefined;
  /** Digest of what was last applied (or found held) in this process. */
  readonly applied: string | undefined;
  /** `passwordTag` of the password last applied in this process: what `status` names. */
  readonly appliedTag: string | undefined;
  /** When `appliedTag` was first applied in this process (ms since the epoch). */
  readonly taggedAt: number | undefined;
  /**
   * Whether the backend has shown the consumer's login connected since `appliedTag` was applied:
   * true, false, or undefined when the adapter cannot tell (or has not looked yet).
   */
  readonly seen: boolean | undefined;
  /** The password last read for it: what no message may carry. */
  readonly password: string | undefined;
  /** What was last applied (or found held), kept so a check of it makes nothing new. */
  readonly provision: Provision | undefined;
  /** The re-apply brake: how many times in a row it was found not held, and when it is checked next. */
  readonly brake: { readonly times: number; readonly nextAt: number } | undefined;
  /** Its run of create failures that failed the same way. */
  readonly failure: { readonly text: string; readonly times: number } | undefined;
  /** Since when its secret could not be read, and when that was last said loudly. */
  readonly secretMiss: { readonly since: number; readonly loudAt: number | undefined } | undefined;
  /** A create that timed out but has not finished: nothing starts another until it does. */
  readonly inFlight: boolean;
  /** In the set that waits for a person to approve its retirement. */
  readonly awaiting: boolean;
  /** The rotation of its password under way, if any. */
  readonly rotation: Rotation | undefined;
  /**
   * ISO 8601: when the password the backend holds was minted, as its mark said at start or as this
   * process last applied it; undefined when not known (a mark of before mint times).
   */
  readonly heldMinted: string | undefined;
  /** Its lifecycle state; undefined when nothing is said of it (the record then goes). */
  readonly state: ConsumerState | undefined;
  /** When it entered that state. */
  readonly since: number;
  /**
   * Counts every change of what the backend holds or should hold for it (applied, failed, retired,
   * deleted, asked differently): a check started before a change is discarded when it returns.
   */
  readonly generation: number;
}

/**
 * A rotation of a consumer's password on a backend that holds two at once: `add` until the new one
 * is valid beside the old, then `drain` until `until`, when the old one goes (`remove`).
 */
export interface Rotation {
  readonly phase: "add" | "drain";
  /** When it began (ms). */
  readonly since: number;
  /** When the old password goes: the grace bound (ms). */
  readonly until: number;
  /** The new password it is for; undefined when read back from a mark after a restart. */
  readonly password: string | undefined;
}

/** What saying a secret miss calls for: nothing new, a plain line, or a loud one. */
export type MissSaying = "none" | "waiting" | "loud" | "refused";

interface Row {
  login: string;
  asked: Contribution | undefined;
  made: "active" | "retired" | undefined;
  derived: Readonly<Record<string, unknown>>;
  retiredAt: number | undefined;
  retiredWhy: string | undefined;
  applied: string | undefined;
  appliedTag: string | undefined;
  taggedAt: number | undefined;
  seen: boolean | undefined;
  password: string | undefined;
  provision: Provision | undefined;
  brake: { times: number; nextAt: number } | undefined;
  failure: { text: string; times: number } | undefined;
  secretMiss: { since: number; loudAt: number | undefined } | undefined;
  inFlight: boolean;
  awaiting: boolean;
  rotation: Rotation | undefined;
  heldMinted: string | undefined;
  state: ConsumerState | undefined;
  since: number;
  generation: number;
  /** The status entry, kept until the record changes. */
  view: ConsumerStatus | undefined;
}

const NOTHING: Readonly<Record<string, unknown>> = Object.freeze({});

/**
 * Every consumer this provider is asked for or made, one record each. It also keeps which ones a
 * pass must look at (`unsettled`: asked for and not applied as asked, or in trouble), so a pass over
 * consumers that have not changed does nothing per consumer.
 */
export class ConsumerBook {
  readonly #rows = new Map<string, Row>();
  readonly #unsettled = new Set<string>();
  readonly #rotating = new Set<string>();
  #sorted: string[] | undefined;
  #version = 0;

  /**
   * @param now the clock
   * @param troubleOf the consumer's run of failures (the standings), which makes it failing
   */
  constructor(
    private readonly now: () => number,
    private readonly troubleOf: (login: string) => Trouble | undefined,
  ) {}

  /** Counts every change to any record: what the status snapshot is made from changed. */
  get version(): number {
    return this.#version;
  }

  get size(): number {
    return this.#rows.size;
  }

  get(login: string): ConsumerRecord | undefined {
    return this.#rows.get(login);
  }

  /** Every record, in no order. */
  records(): IterableIterator<ConsumerRecord> {
    return this.#rows.values();
  }

  /** Every login, sorted; the same array until a login comes or goes. */
  sortedLogins(): readonly string[] {
    return (this.#sorted ??= [...this.#rows.keys()].sort());
  }

  /**
   * Logins asked for that are not applied as asked, cannot be served as asked, or are in trouble:
   * what every pass looks at, changed or not.
   */
  unsettled(): readonly string[] {
    return [...this.#unsettled];
  }

  /** Logins whose password is being rotated. */
  rotating(): readonly string[] {
    return [...this.#rotating];
  }

  /** The status entry made for a record, kept until it changes. */
  view(login: string): ConsumerStatus | undefined {
    return this.#rows.get(login)?.view;
  }

  remember(login: string, view: ConsumerStatus): void {
    const row = this.#rows.get(login);
    if (row) row.view = view;
  }

  // ---- transitions ---------------------------------------------------------------------------

  /** Found in the backend's inventory, marked as made by this provider. A record already kept wins. */
  seeded(entry: InventoryEntry): void {
    if (this.#rows.has(entry.as)) return;
    const row = this.#row(entry.as);
    row.made = entry.state;
    row.derived = entry.derived;
    row.retiredAt = entry.retiredAt?.getTime();
    row.retiredWhy = entry.why;
    row.heldMinted = entry.state === "active" ? entry.minted : undefined;
    const r = entry.state === "active" ? entry.rotation : undefined;
    if (r !== undefined) {
      row.rotation = {
        phase: r.phase,
        since: Date.parse(r.since),
        until: Date.parse(r.until),
        password: undefined,
      };
      this.#rotating.add(row.login);
    }
    this.#settle(row);
  }

  /** Its password's rotation began, or moved to another phase. */
  rotationIs(login: string, rotation: Rotation): void {
    const row = this.#rows.get(login);
    if (!row) return;
    row.rotation = rotation;
    this.#rotating.add(login);
    this.#settle(row);
  }

  /** Its password's rotation is over: the old password is gone (or the rotation was given up). */
  rotationOver(login: string): void {
    const row = this.#rows.get(login);
    if (!row || row.rotation === undefined) return;
    row.rotation = undefined;
    this.#rotating.delete(login);
    this.#settle(row);
  }

  /**
   * Asked for by this contributions entry. Returns true when that is new or differs from the entry
   * it was asked by before (what a pass must then read and apply).
   */
  asked(entry: Contribution): boolean {
    const row = this.#rows.get(entry.as) ?? this.#row(entry.as);
    if (row.asked !== undefined && sameEntry(row.asked, entry)) return false;
    row.asked = entry;
    row.generation++;
    this.#settle(row);
    return true;
  }

  /** No longer asked for. */
  unasked(login: string): void {
    const row = this.#rows.get(login);
    if (!row || row.asked === undefined) return;
    row.asked = undefined;
    row.password = undefined;
    row.failure = undefined;
    row.secretMiss = undefined;
    row.generation++;
    this.#settle(row);
  }

  /** Its secret was read. */
  secretRead(login: string, password: string): void {
    const row = this.#rows.get(login);
    if (row) row.password = password;
  }

  /**
   * Its secret could not be read at `now`: returns what to say. A file that breaks the rule is said
   * loudly at once and rarely after; a missing one is a race, said plainly, then loudly after a
   * minute, then rarely.
   */
  secretMissing(login: string, now: number, breaksRule: boolean): MissSaying {
    const row = this.#rows.get(login);
    if (!row) return "none";
    const miss = row.secretMiss;
    let saying: MissSaying = "none";
    if (breaksRule) {
      if (!miss || miss.loudAt === undefined || now - miss.loudAt >= SECRET_SAY_AGAIN) {
        row.secretMiss = { since: miss?.since ?? now, loudAt: now };
        saying = "refused";
      }
    } else if (!miss) {
      row.secretMiss = { since: now, loudAt: undefined };
      saying = "waiting";
    } else if (now - miss.since >= SECRET_PATIENCE) {
      if (miss.loudAt === undefined || now - miss.loudAt >= SECRET_SAY_AGAIN) {
        row.secretMiss = { since: miss.since, loudAt: now };
        saying = "loud";
      }
    }
    this.#settle(row);
    return saying;
  }

  /** Its secret is readable: returns whether its miss had been said loudly. */
  secretFound(login: string): boolean {
    const row = this.#rows.get(login);
    if (!row?.secretMiss) return false;
    const loud = row.secretMiss.loudAt !== undefined;
    row.secretMiss = undefined;
    this.#settle(row);
    return loud;
  }

  /** A create began; it stays in flight (`landed` ends it) even past its timeout. */
  flying(login: string): void {
    const row = this.#rows.get(login);
    if (row) row.inFlight = true;
  }

  landed(login: string): void {
    const row = this.#rows.get(login);
    if (!row) return;
    row.inFlight = false;
    this.#settle(row);
  }

  /**
   * Applied as asked (created, re-applied, or re-asserted): active, with this digest and password
   * tag. Returns the run of failures it ended, if any.
   */
  created(
    p: Provision,
    digest: string,
    tag: string,
  ): { readonly text: string; readonly times: number } | undefined {
    const row = this.#rows.get(p.as) ?? this.#row(p.as);
    const failed = row.failure;
    // What the backend was first made with stays what retire and delete are given.
    if (row.made === undefined) row.derived = p.derived;
    row.provision = p;
    row.heldMinted = p.minted;
    row.made = "active";
    row.retiredAt = undefined;
    row.retiredWhy = undefined;
    row.applied = digest;
    if (row.appliedTag !== tag) {
      // A new password (made or rotated): its app has not been seen using it yet.
      row.taggedAt = this.now();
      row.seen = row.seen === undefined ? undefined : false;
    }
    row.appliedTag = tag;
    row.failure = undefined;
    row.generation++;
    this.#settle(row);
    return failed;
  }

  /**
   * What the backend showed of these logins' sessions at one look: each in `connected` is seen
   * (until its password changes); each other one not seen yet stays unseen. Only active consumers
   * with an applied password are marked.
   */
  sawSessions(logins: readonly string[], connected: ReadonlySet<string>): void {
    for (const login of logins) {
      const row = this.#rows.get(login);
      if (!row || row.appliedTag === undefined || row.made !== "active") continue;
      const seen = row.seen === true || connected.has(login);
      if (row.seen === seen) continue;
      row.seen = seen;
      this.#version++;
      row.view = undefined;
    }
  }

  /** A create failed with this (scrubbed) text: returns the run of failures the same way. */
  createFailed(login: string, text: string): { readonly text: string; readonly times: number } {
    const row = this.#rows.get(login) ?? this.#row(login);
    const was = row.failure;
    row.failure = was && was.text === text ? { text, times: was.times + 1 } : { text, times: 1 };
    forgetApplied(row);
    this.#settle(row);
    return row.failure;
  }

  /**
   * What was applied may not last (the backend did not finish the pass's changes, see the adapter's
   * `afterChanges`): it is applied again on the next pass. Its state and troubles stay as they are.
   */
  notApplied(login: string): void {
    const row = this.#rows.get(login);
    if (!row || row.applied === undefined) return;
    forgetApplied(row);
    this.#settle(row);
  }

  /** A check found it held: the brake is let go. */
  held(login: string): void {
    const row = this.#rows.get(login);
    if (!row || row.brake === undefined) return;
    row.brake = undefined;
    this.#settle(row);
  }

  /** A check found it not held: returns how many times in a row that is, counting this one. */
  notHeld(login: string): number {
    const row = this.#rows.get(login);
    return (row?.brake?.times ?? 0) + 1;
  }

  /** Applied again after being found not held `times` in a row: next checked at `nextAt`. */
  braked(login: string, times: number, nextAt: number): void {
    const row = this.#rows.get(login);
    if (!row) return;
    row.brake = { times, nextAt };
    this.#settle(row);
  }

  /** Whether its brake keeps it from being checked at `now`. */
  isBraked(login: string, now: number): boolean {
    const brake = this.#rows.get(login)?.brake;
    return brake !== undefined && now < brake.nextAt;
  }

  /** Retired in the backend at `at`, for `why`. */
  retired(login: string, at: number, why: string): void {
    const row = this.#rows.get(login);
    if (!row) return;
    row.made = "retired";
    row.retiredAt = at;
    row.retiredWhy = why;
    row.heldMinted = undefined;
    row.brake = undefined;
    row.awaiting = false;
    row.rotation = undefined;
    this.#rotating.delete(login);
    forgetApplied(row);
    this.#settle(row);
  }

  /** Deleted from the backend, login and data: nothing of it is kept unless it is asked for. */
  deleted(login: string): void {
    const row = this.#rows.get(login);
    if (!row) return;
    row.made = undefined;
    row.retiredAt = undefined;
    row.retiredWhy = undefined;
    row.generation++;
    this.#settle(row);
  }

  /** Exactly these logins wait for a person to approve their retirement. */
  awaiting(logins: readonly string[]): void {
    const set = new Set(logins);
    for (const row of this.#rows.values()) {
      const now = set.has(row.login);
      if (row.awaiting === now) continue;
      row.awaiting = now;
      this.#settle(row);
    }
  }

  /** Something it is said by changed outside the book (its standing, the retirement count). */
  touch(login: string): void {
    const row = this.#rows.get(login);
    if (row) this.#settle(row);
  }

  // ---- the state -----------------------------------------------------------------------------

  #row(login: string): Row {
    const row: Row = {
      login,
      asked: undefined,
      made: undefined,
      derived: NOTHING,
      retiredAt: undefined,
      retiredWhy: undefined,
      applied: undefined,
      appliedTag: undefined,
      taggedAt: undefined,
      seen: undefined,
      password: undefined,
      provision: undefined,
      brake: undefined,
      failure: undefined,
      secretMiss: undefined,
      inFlight: false,
      awaiting: false,
      rotation: undefined,
      heldMinted: undefined,
      state: undefined,
      since: this.now(),
      generation: 0,
      view: undefined,
    };
    this.#rows.set(login, row);
    this.#sorted = undefined;
    return row;
  }

  /** Works out the record's state after a transition, and forgets a record nothing is said of. */
  #settle(row: Row): void {
    this.#version++;
    row.view = undefined;
    const inTrouble = this.troubleOf(row.login) !== undefined;
    const state = stateOf(row, inTrouble);
    if (state !== row.state) {
      row.state = state;
      row.since = this.now();
    }
    const asked = row.asked;
    if (
      asked !== undefined &&
      (row.applied === undefined ||
        row.failure !== undefined ||
        row.secretMiss !== undefined ||
        asked.refused !== undefined ||
        inTrouble)
    ) {
      this.#unsettled.add(row.login);
    } else {
      this.#unsettled.delete(row.login);
    }
    if (state === undefined && !row.inFlight) {
      this.#rotating.delete(row.login);
      this.#rows.delete(row.login);
      this.#sorted = undefined;
    }
  }
}

/** A consumer's lifecycle state, from what the book holds of it and whether it is in trouble. */
export function stateOf(
  r: Pick<ConsumerRecord, "asked" | "made" | "awaiting">,
  inTrouble: boolean,
): ConsumerState | undefined {
  if (r.asked !== undefined) return inTrouble ? "failing" : "active";
  if (r.made === "retired") return "retired";
  if (r.made === "active") return r.awaiting ? "awaiting-approval" : "unasked";
  return undefined;
}

/** Whether two entries ask for the same thing (values compared deeply). */
function sameEntry(a: Contribution, b: Contribution): boolean {
  return (
    a.as === b.as &&
    a.secret === b.secret &&
    a.node === b.node &&
    a.at === b.at &&
    a.refused === b.refused &&
    a.retiring === b.retiring &&
    a.login === b.login &&
    sameJson(a.values, b.values) &&
    sameJson(a.derived, b.derived)
  );
}

function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a)) {
    if (!Array.isArray(b) || a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameJson(a[i], b[i])) return false;
    return true;
  }
  if (Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) {
    if (!Object.prototype.hasOwnProperty.call(b, k)) return false;
    if (!sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  }
  return true;
}

// What was applied is forgotten, so the next pass applies it again; a check begun before is dropped.
function forgetApplied(row: Row): void {
  row.applied = undefined;
  row.appliedTag = undefined;
  row.provision = undefined;
  row.generation++;
}
