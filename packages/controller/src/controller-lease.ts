// Which controller leads: one lease key in KV, renewed by its holder with compare-and-set on the
// key's revision. This is the lease's logic alone, on an injected monotonic clock, so that each
// step is tested without waiting; `LeaseDriver` keeps it in step with the bucket.
//
// No clock is compared across machines: a standby measures how long the revision it sees has not
// changed on its own clock, and a leader how long its renewals have gone unacknowledged on its own.

/** The lease's value in its bucket. */
export interface LeaseRecord {
  /** The controller holding it (`controllerId`). */
  readonly holder: string;
  /** Counts the leaders: each one that takes the lease over takes the next term. */
  readonly term: number;
  /**
   * Given up by its holder on a clean stop: another controller takes it over at once, in the next
   * term, instead of waiting for it to run out.
   */
  readonly released?: true;
}

/** How often the lease is renewed and how long silence lasts before someone acts on it. */
export interface LeaseTimings {
  /** The leader renews its lease this often (2 s). */
  readonly renewEveryMs: number;
  /** A standby takes over a lease whose revision has not changed for this long (10 s). */
  readonly takeOverAfterMs: number;
  /** A leader whose renewal has gone unacknowledged for this long stops leading (6 s). */
  readonly stepDownAfterMs: number;
}

/** The lease's timings: renewed every 2 s, taken over after 10 s, given up after 6 s unacknowledged. */
export const DEFAULT_LEASE_TIMINGS: LeaseTimings = {
  renewEveryMs: 2_000,
  takeOverAfterMs: 10_000,
  stepDownAfterMs: 6_000,
};

/** A lease key as read: its revision and value, or none. */
export interface LeaseSeen {
  readonly revision: number;
  readonly record: LeaseRecord | undefined;
}

/** What the lease's holder-to-be should write now. */
export type LeaseStep =
  /** Nothing: another controller holds a live lease. */
  | { readonly kind: "wait" }
  /** Create the key (it is not there): `record` if nobody created it meanwhile. */
  | { readonly kind: "create"; readonly record: LeaseRecord }
  /** Write `record` if the key's revision is still `revision` (a renewal, or a take-over). */
  | { readonly kind: "update"; readonly revision: number; readonly record: LeaseRecord };

/** One controller's view of the lease, and whether it leads. */
export class ControllerLease {
  readonly #self: string;
  readonly #timings: LeaseTimings;
  readonly #now: () => number;
  readonly #patient: boolean;
  #seen: LeaseSeen | undefined;
  // When the revision seen last changed (or was first seen), on this controller's clock.
  #changedAt: number;
  // When this controller's last write of the lease was acknowledged; undefined when it does not hold it.
  #ackedAt: number | undefined;
  #held: LeaseRecord | undefined;

  /**
   * @param self this controller's id, kept across its restarts (a restarted holder takes its lease back at once)
   * @param patient a standby: it waits out `takeOverAfterMs` even for a lease that is not there,
   * or one held by its own id
   */
  constructor(self: string, timings: LeaseTimings, now: () => number, patient = false) {
    this.#self = self;
    this.#timings = timings;
    this.#now = now;
    this.#patient = patient;
    this.#changedAt = now();
  }

  /** This controller's id. */
  get self(): string {
    return this.#self;
  }

  /** Whether this controller leads now: it holds the lease and its last renewal was acknowledged in time. */
  leading(): boolean {
    return this.#ackedAt !== undefined && this.#now() - this.#ackedAt < this.#timings.stepDownAfterMs;
  }

  /** The term this controller leads in, or undefined when it does not lead. */
  term(): number | undefined {
    return this.leading() ? this.#held?.term : undefined;
  }

  /** The lease as last seen (or written) by this controller: who holds it and in which term. */
  seen(): LeaseRecord | undefined {
    return this.#seen?.record;
  }

  /** Takes a reading of the key (`undefined`: no key). A revision other than the last seen starts the wait again. */
  observe(seen: LeaseSeen | undefined): void {
    if (seen?.revision !== this.#seen?.revision) this.#changedAt = this.#now();
    this.#seen = seen;
    // Someone else wrote the lease: whatever this controller thought, it no longer holds it.
    if (seen?.record?.holder !== this.#self || seen.record.term !== this.#held?.term) this.#drop();
  }

  /** What to write now, given the last reading. */
  step(): LeaseStep {
    const seen = this.#seen;
    const held = this.#held;
    if (held !== undefined && seen !== undefined) {
      return { kind: "update", revision: seen.revision, record: held };
    }
    const waited = this.#now() - this.#changedAt >= this.#timings.takeOverAfterMs;
    const record = { holder: this.#self, term: (seen?.record?.term ?? 0) + 1 };
    if (seen === undefined) return this.#patient && !waited ? { kind: "wait" } : { kind: "create", record };
    // A lease of this controller's own id was left by its previous run (given up or not): nobody
    // led since (the write is on its revision), so it takes it back in the same term.
    if (seen.record?.holder === this.#self && seen.record.term > 0 && !this.#patient) {
      return {
        kind: "update",
        revision: seen.revision,
        record: { holder: seen.record.holder, term: seen.record.term },
      };
    }
    // Its holder stopped cleanly and gave it up: nobody leads, so nothing is to be waited out.
    if (seen.record?.released === true) return { kind: "update", revision: seen.revision, record };
    return waited ? { kind: "update", revision: seen.revision, record } : { kind: "wait" };
  }

  /**
   * The write of `step()`, sent at `sentAt` (this clock), was acknowledged at `revision`: this
   * controller holds the lease. It leads until `stepDownAfterMs` after the write was sent (not
   * acknowledged): a standby's wait starts when it sees the revision, never before it was written.
   */
  written(revision: number, record: LeaseRecord, sentAt: number = this.#now()): void {
    this.#seen = { revision, record };
    this.#changedAt = this.#now();
    this.#held = record;
    this.#ackedAt = sentAt;
  }

  /** The write was refused because the key had changed: someone else holds the lease now. */
  refused(): void {
    this.#drop();
  }

  /**
   * Gives the lease up (this controller stops): it leads no more, from now. Returns what to write
   * so that another controller takes over at once (the released record, on the revision this one
   * wrote last), or undefined when it did not hold the lease.
   */
  release(): { readonly revision: number; readonly record: LeaseRecord } | undefined {
    const held = this.#held;
    const seen = this.#seen;
    this.#drop();
    if (held === undefined || seen === undefined || seen.record?.holder !== this.#self) return undefined;
    return { revision: seen.revision, record: { holder: held.holder, term: held.term, released: true } };
  }

  #drop(): void {
    this.#held = undefined;
    this.#ackedAt = undefined;
  }
}
