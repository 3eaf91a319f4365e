// What the controller has accepted and the bus could not store yet: a fleet change, a node's
// delivery. Nothing accepted is dropped: each is tried again, with a backoff that grows to a bound,
// until the bus stores it, and `mesh status` lists what waits and since when.
import type { BusLogger } from "@mesh/bus";
import { systemClock, type Clock } from "@mesh/sdk";

/** One write that waits, as `mesh status` shows it. */
export interface WaitingWrite {
  /** What waits, in an operator's words ("the fleet read at …"). */
  readonly what: string;
  /** ISO 8601: when it was first refused. */
  readonly since: string;
  /** How many times it was tried. */
  readonly attempts: number;
  /** Why the last try failed (the bus's words, for the one who reads the log). */
  readonly error: string;
  /** ISO 8601: when it is tried next. */
  readonly nextAt: string;
}

/** A write the bus refused; it is retried until stored. */
export class WriteWaitsError extends Error {
  override name = "WriteWaitsError";
  constructor(
    readonly what: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the bus cannot store ${what} now; it is kept and tried again until stored (mesh status lists it)`,
      options,
    );
  }
}

/** How `PendingWrites` waits between tries. */
export interface PendingWritesOptions {
  readonly logger: BusLogger;
  readonly clock?: Clock;
  /** The first wait after a refusal (default 500 ms); doubled each time, up to `maxDelayMs`. */
  readonly firstDelayMs?: number;
  /** The longest wait between tries (default 2 s: a bus that can store again is used within it). */
  readonly maxDelayMs?: number;
  /** Runs each retry (the controller's one-change-at-a-time queue); default: at once. */
  readonly run?: <T>(fn: () => Promise<T>) => Promise<T>;
}

interface Entry {
  what: string;
  attempt: () => Promise<unknown>;
  since: number;
  attempts: number;
  error: string;
  delayMs: number;
  nextAt: number;
  timer: unknown;
}

/** The writes that wait, by key (a newer write of the same key replaces the one that waits). */
export class PendingWrites {
  readonly #log: BusLogger;
  readonly #clock: Clock;
  readonly #first: number;
  readonly #max: number;
  readonly #run: <T>(fn: () => Promise<T>) => Promise<T>;
  readonly #entries = new Map<string, Entry>();
  #closed = false;

  constructor(options: PendingWritesOptions) {
    this.#log = options.logger;
    this.#clock = options.clock ?? systemClock;
    this.#first = options.firstDelayMs ?? 500;
    this.#max = options.maxDelayMs ?? 2_000;
    this.#run = options.run ?? ((fn) => fn());
  }

  /**
   * Runs `attempt` now. When it fails, it is kept under `key` (replacing what waited there, whose
   * `since` it keeps) and tried again after a backoff until it succeeds. `since` (ms on the clock)
   * is when it was first refused, when that was before this try (a write resumed after a restart).
   * @throws WriteWaitsError when this try failed: the write waits, it is not dropped.
   */
  async attempt<T>(key: string, what: string, attempt: () => Promise<T>, since?: number): Promise<T> {
    const before = this.#entries.get(key);
    if (before !== undefined) this.#clock.clearTimeout(before.timer);
    try {
      const result = await attempt();
      if (before !== undefined) this.#stored(key, what, before);
      return result;
    } catch (err) {
      const now = this.#clock.now();
      const entry: Entry = {
        what,
        attempt,
        since: before?.since ?? since ?? now,
        attempts: (before?.attempts ?? 0) + 1,
        error: (err as Error).message,
        delayMs: before?.delayMs ?? this.#first,
        nextAt: now,
        timer: undefined,
      };
      this.#entries.set(key, entry);
      this.#schedule(key, entry);
      throw new WriteWaitsError(what, { cause: err });
    }
  }

  /** What waits now, oldest first. */
  waiting(): WaitingWrite[] {
    return [...this.#entries.values()]
      .sort((a, b) => a.since - b.since)
      .map((e) => ({
        what: e.what,
        since: new Date(e.since).toISOString(),
        attempts: e.attempts,
        error: e.error,
        nextAt: new Date(e.nextAt).toISOString(),
      }));
  }

  /** Stops retrying; what waits is not tried again. Idempotent. */
  close(): void {
    this.#closed = true;
    for (const entry of this.#entries.values()) this.#clock.clearTimeout(entry.timer);
  }

  #schedule(key: string, entry: Entry): void {
    if (this.#closed) return;
    entry.nextAt = this.#clock.now() + entry.delayMs;
    entry.timer = this.#clock.setTimeout(() => {
      void this.#retry(key, entry);
    }, entry.delayMs);
  }

  async #retry(key: string, entry: Entry): Promise<void> {
    if (this.#closed || this.#entries.get(key) !== entry) return;
    try {
      await this.#run(() => entry.attempt());
    } catch (err) {
      if (this.#entries.get(key) !== entry) return;
      entry.attempts += 1;
      entry.error = (err as Error).message;
      entry.delayMs = Math.min(this.#max, entry.delayMs * 2);
      this.#schedule(key, entry);
      return;
    }
    if (this.#entries.get(key) === entry) this.#stored(key, entry.what, entry);
  }

  #stored(key: string, what: string, entry: Entry): void {
    this.#entries.delete(key);
    const waited = Math.round((this.#clock.now() - entry.since) / 1000);
    this.#log.info(
      `stored ${what} after ${entry.attempts} refused tr${entry.attempts === 1 ? "y" : "ies"} (${waited} s)`,
    );
  }
}
