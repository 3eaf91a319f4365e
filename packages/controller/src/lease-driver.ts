// Keeps a `ControllerLease` in step with its key in KV: every `renewEveryMs` it reads the key,
// and writes what the lease says (a renewal, a take-over) with compare-and-set on the revision it
// read. It tells its owner each time this controller starts or stops leading.
import { StaleRevisionError, type BusLogger, type BusState } from "@mesh/bus";
import type { ControllerLease, LeaseRecord, LeaseTimings } from "./controller-lease.ts";

/** The bucket the controller lease is kept in, apart from every other state. */
export const CONTROLLER_LEASE_BUCKET = "mesh-controller-lease";

/** The lease's key in `CONTROLLER_LEASE_BUCKET`. */
export const CONTROLLER_LEASE_KEY = "leader";

/** How long a clean stop waits for the bus to store the released lease. */
const RELEASE_WAIT_MS = 3_000;

/** Reads a lease record, or undefined when the value is not one. */
export function parseLeaseRecord(value: unknown): LeaseRecord | undefined {
  const v = value as Partial<LeaseRecord> | null | undefined;
  return typeof v?.holder === "string" && typeof v.term === "number" && Number.isInteger(v.term)
    ? { holder: v.holder, term: v.term, ...(v.released === true ? { released: true } : {}) }
    : undefined;
}

/** Drives a lease against its bucket until stopped. */
export class LeaseDriver {
  readonly #bucket: BusState<unknown>;
  readonly #lease: ControllerLease;
  readonly #timings: LeaseTimings;
  readonly #now: () => number;
  readonly #log: BusLogger;
  readonly #changed: (leading: boolean) => Promise<void>;
  readonly #idle: (() => Promise<void>) | undefined;
  readonly #standbys: (() => Promise<readonly string[]>) | undefined;
  #leading = false;
  #paused = false;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #idling: Promise<void> | undefined;
  #stopped = false;

  /**
   * @param changed called (and awaited, before the next tick) when this controller starts or
   * stops leading; `idle` after each tick while it does not lead, not awaited (one at a time);
   * `standbys` names the other controllers that answer now, asked on a clean stop so that a
   * take-over is said only when there is a standby to take over (never throws)
   */
  constructor(options: {
    readonly bucket: BusState<unknown>;
    readonly lease: ControllerLease;
    readonly timings: LeaseTimings;
    readonly now: () => number;
    readonly logger: BusLogger;
    readonly changed: (leading: boolean) => Promise<void>;
    readonly idle?: () => Promise<void>;
    readonly standbys?: () => Promise<readonly string[]>;
  }) {
    this.#bucket = options.bucket;
    this.#lease = options.lease;
    this.#timings = options.timings;
    this.#now = options.now;
    this.#log = options.logger;
    this.#changed = options.changed;
    this.#idle = options.idle;
    this.#standbys = options.standbys;
  }

  /** One read and, when the lease says so, one write; then tells of a change of leader. Never throws. */
  async tick(): Promise<void> {
    if (this.#paused) return this.#settle();
    await this.#keep();
    await this.#settle();
    // What a standby does meanwhile (following the leader's fleet) never holds the next reading
    // of the lease: with a server of the bus cut off, one of its reads waits out its timeout, and
    // a take-over due then would wait with it. One at a time.
    if (!this.#leading && this.#idle !== undefined && this.#idling === undefined) {
      this.#idling = this.#idle()
        .catch(() => undefined)
        .finally(() => {
          this.#idling = undefined;
        });
    }
  }

  // One read of the lease and, when it says so, one write. Never throws.
  async #keep(): Promise<void> {
    try {
      const entry = await this.#bucket.entry(CONTROLLER_LEASE_KEY);
      this.#lease.observe(
        entry === undefined ? undefined : { revision: entry.revision, record: parseLeaseRecord(entry.value) },
      );
      const step = this.#lease.step();
      if (step.kind !== "wait") {
        const sentAt = this.#now();
        const revision = step.kind === "create" ? 0 : step.revision;
        try {
          const written = await this.#bucket.update(CONTROLLER_LEASE_KEY, step.record, revision);
          this.#lease.written(written, step.record, sentAt);
        } catch (err) {
          if (!(err instanceof StaleRevisionError)) throw err;
          this.#lease.refused();
        }
      }
    } catch (err) {
      // Unacknowledged: the lease runs out on its own clock if this goes on.
      this.#log.warn(`the controller lease could not be read or renewed: ${(err as Error).message}`);
    }
  }

  /**
   * Holds every read and write of the lease, as a paused process would (tests): the lease runs out
   * on its own clock. The returned function resumes.
   */
  pause(): () => void {
    this.#paused = true;
    return () => {
      this.#paused = false;
    };
  }

  /** Ticks every `renewEveryMs` (the first at once) until `stop`. */
  start(): void {
    const loop = async (): Promise<void> => {
      if (this.#stopped) return;
      await this.tick();
      if (!this.#stopped) {
        this.#timer = setTimeout(() => {
          this.#running = loop();
        }, this.#timings.renewEveryMs);
        this.#timer.unref?.();
      }
    };
    this.#running = loop();
  }

  /** Whether the owner was last told that this controller leads (and it still does). */
  async settle(): Promise<boolean> {
    await this.#settle();
    return this.#leading;
  }

  /**
   * Stops ticking and gives the lease up: this controller leads no more from now, and, when it held
   * the lease, writes it released (compare-and-set on the revision it wrote last), so a standby
   * takes over at its next reading instead of waiting the lease out. When that write is refused or
   * not answered within `RELEASE_WAIT_MS`, the lease is left to run out.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#running;
    await this.#idling;
    const release = this.#lease.release();
    if (release === undefined || this.#paused) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error("no answer from the bus")), RELEASE_WAIT_MS);
    });
    try {
      await Promise.race([this.#bucket.update(CONTROLLER_LEASE_KEY, release.record, release.revision), late]);
    } catch (err) {
      const standbys = await this.#askStandbys();
      // With no standby there is no one to hand over to: the lease running out harms nothing.
      if (standbys.length > 0) {
        this.#log.warn(
          `the controller lease could not be given up (${(err as Error).message}); ` +
            `${standbys.join(", ")} take(s) over when it runs out`,
        );
      }
      return;
    } finally {
      clearTimeout(timer);
    }
    const standbys = await this.#askStandbys();
    this.#log.info(
      `controller ${release.record.holder} gave up its lease (term ${release.record.term})` +
        (standbys.length > 0 ? `: ${standbys.join(", ")} may take over at once` : ""),
    );
  }

  async #askStandbys(): Promise<readonly string[]> {
    try {
      return (await this.#standbys?.()) ?? [];
    } catch {
      return [];
    }
  }

  // Tells the owner when leading changed, including a lease that ran out between ticks. Taking up
  // the lead (serving a large fleet: a first delivery of 10,000 consumers takes seconds) may last
  // longer than the lease itself, so the lease is kept meanwhile; a lease lost meanwhile stops
  // every write of it, since each asks whether it still leads.
  async #settle(): Promise<void> {
    const leading = this.#lease.leading();
    if (leading === this.#leading) return;
    this.#leading = leading;
    if (!leading) {
      await this.#changed(false);
      return;
    }
    let keeping: Promise<void> = Promise.resolve();
    const timer = setInterval(() => {
      keeping = keeping.then(() => (this.#paused || this.#stopped ? undefined : this.#keep()));
    }, this.#timings.renewEveryMs);
    try {
      await this.#changed(true);
    } finally {
      clearInterval(timer);
      await keeping;
    }
  }
}
