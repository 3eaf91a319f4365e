import type { Clock } from "./collaborators.ts";

interface Timer {
  readonly at: number;
  readonly seq: number;
  readonly fn: () => void;
}

/**
 * A clock that moves only when told, for testing the loop's rules without waiting. Timers fire in
 * order of their due time as `advance` passes them.
 */
export class FakeClock implements Clock {
  #now: number;
  #seq = 0;
  #timers = new Map<number, Timer>();

  constructor(start = Date.parse("2026-01-01T00:00:00Z")) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  setTimeout(fn: () => void, ms: number): unknown {
    const seq = ++this.#seq;
    this.#timers.set(seq, { at: this.#now + Math.max(0, ms), seq, fn });
    return seq;
  }

  clearTimeout(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  /** Moves time forward by `ms`, firing each timer that falls due, in order. */
  advance(ms: number): void {
    const until = this.#now + ms;
    for (;;) {
      const next = [...this.#timers.values()]
        .filter((t) => t.at <= until)
        .sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!next) break;
      this.#timers.delete(next.seq);
      this.#now = next.at;
      next.fn();
    }
    this.#now = until;
  }

  /** How many timers are waiting. */
  get pending(): number {
    return this.#timers.size;
  }
}
