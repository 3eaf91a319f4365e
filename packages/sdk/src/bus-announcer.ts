// Announcing a provider's standings on its module's bus, best effort: a bus that is not there
// never stops the provisioning.

import type { Announcer, Logger, StandingEvent } from "./collaborators.ts";
import { formatDuration } from "./duration.ts";

/** The slice of a module bus (`ModuleBus`) the announcer uses. */
export interface StandingsBus {
  emit(localName: string, body: unknown): void;
  close(): Promise<void>;
}

/** How a `BusAnnouncer` reaches its bus. */
export interface BusAnnouncerOptions {
  /** Opens the bus (`connectModuleBus`); called again after a failure, until it succeeds. */
  readonly connect: () => Promise<StandingsBus>;
  /** Where it says that the bus cannot be reached (once) and that it can again. */
  readonly logger: Logger;
  /** The first wait before trying again (30 s); it doubles up to `maxRetryEvery` (5 min). */
  readonly retryEvery?: number;
  readonly maxRetryEvery?: number;
  /** How many consumers' standings it keeps while the bus is not there (10,000). */
  readonly maxPending?: number;
  /** The clock, ms since the epoch, for the `at` it stamps (Date.now). */
  readonly now?: () => number;
}

/**
 * Announces the harness's standings on the module's bus (`emit`), best effort: each one is
 * stamped with when it was said (`at`), so the controller keeps the newest whatever order they
 * arrive in. While the bus is not there, it keeps the newest standing of each consumer and sends
 * them once it is; a failure to connect is said once (and the recovery once), and never reaches
 * the harness.
 */
export class BusAnnouncer implements Announcer {
  readonly #o: Required<Omit<BusAnnouncerOptions, "connect" | "logger">> & BusAnnouncerOptions;
  readonly #pending = new Map<string, { event: string; body: Record<string, unknown> }>();
  #bus: StandingsBus | undefined;
  #attempt: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #wait: number;
  #closed = false;
  #down: string | undefined;
  #said = new Set<string>();
  #unnamed = 0;
  #dropped = 0;
  #sent = 0;

  constructor(options: BusAnnouncerOptions) {
    this.#o = {
      retryEvery: 30_000,
      maxRetryEvery: 5 * 60_000,
      maxPending: 10_000,
      now: Date.now,
      ...options,
    };
    this.#wait = this.#o.retryEvery;
    this.#connect();
  }

  announce(event: StandingEvent, body: Readonly<Record<string, unknown>>): void {
    this.#send(event, typeof body["consumer"] === "string" ? `c:${body["consumer"]}` : undefined, body);
  }

  /**
   * Announces one of the module's own events (declared in its manifest's `emits`), stamped like a
   * standing and kept, each one, while the bus is not there. Never throws.
   */
  emit(localName: string, body: Readonly<Record<string, unknown>>): void {
    this.#send(localName, undefined, body);
  }

  #send(event: string, consumerKey: string | undefined, body: Readonly<Record<string, unknown>>): void {
    if (this.#closed) return;
    const stamped = {
      ...body,
      at: typeof body["at"] === "string" ? body["at"] : new Date(this.#o.now()).toISOString(),
    };
    if (this.#bus !== undefined) {
      this.#emit(this.#bus, event, stamped);
      return;
    }
    // Only the newest word on each consumer matters to the controller.
    const key = consumerKey ?? `n:${this.#unnamed++}`;
    this.#pending.delete(key);
    this.#pending.set(key, { event, body: stamped });
    while (this.#pending.size > this.#o.maxPending) {
      const [oldest] = this.#pending.keys();
      if (oldest === undefined) break;
      this.#pending.delete(oldest);
      if (this.#dropped++ === 0) {
        this.#o.logger.warn(
          `standings: more than ${this.#o.maxPending} consumers' standings wait for the bus; the oldest are dropped (counted, not said again)`,
        );
      }
    }
  }

  /** What it has done: standings sent, waiting for the bus, dropped while waiting. */
  stats(): { readonly sent: number; readonly pending: number; readonly dropped: number } {
    return { sent: this.#sent, pending: this.#pending.size, dropped: this.#dropped };
  }

  /** Stops trying, sends what the open bus holds, and closes it. Safe to call twice. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#attempt;
    const bus = this.#bus;
    this.#bus = undefined;
    await bus?.close().catch(() => undefined);
  }

  #connect(): void {
    this.#attempt = this.#o.connect().then(
      (bus) => {
        if (this.#closed) {
          this.#bus = bus;
          return;
        }
        this.#bus = bus;
        this.#wait = this.#o.retryEvery;
        if (this.#down !== undefined)
          this.#o.logger.info("standings: the bus is reachable again; announcing");
        this.#down = undefined;
        const waiting = [...this.#pending.values()];
        this.#pending.clear();
        for (const { event, body } of waiting) this.#emit(bus, event, body);
      },
      (err: unknown) => {
        const why = err instanceof Error ? err.message : String(err);
        if (this.#down === undefined) {
          this.#o.logger.warn(
            `standings: cannot announce on the bus (${why}); the provider goes on provisioning, keeps each ` +
              `consumer's newest standing and tries the bus again, first in ${formatDuration(this.#wait)}`,
          );
        }
        this.#down = why;
        if (this.#closed) return;
        this.#timer = setTimeout(() => this.#connect(), this.#wait);
        this.#timer.unref();
        this.#wait = Math.min(this.#wait * 2, this.#o.maxRetryEvery);
      },
    );
  }

  #emit(bus: StandingsBus, event: string, body: Record<string, unknown>): void {
    try {
      bus.emit(event, body);
      this.#sent += 1;
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      // Once per kind of failure: the same cause would fill the log at every announcement.
      if (!this.#said.has(e.name)) {
        this.#said.add(e.name);
        this.#o.logger.warn(`standings: ${event} was not announced: ${e.message}`);
      }
    }
  }
}
