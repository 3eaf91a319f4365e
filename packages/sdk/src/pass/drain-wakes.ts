// A rotation's old password goes at its grace bound: a pass is set off then, not at the next tick.

import type { Clock } from "../collaborators.ts";
import type { ConsumerBook } from "../consumer-book.ts";

/** Sets off a pass when the earliest grace bound of the rotations under way passes. */
export class DrainWakes {
  #timer: unknown;
  #at = Number.POSITIVE_INFINITY;

  /**
   * @param wake runs a pass (resolving when it is done)
   * @param isStopped whether the provisioner stopped: then nothing is set off
   */
  constructor(
    private readonly clock: Clock,
    private readonly book: ConsumerBook,
    private readonly wake: () => Promise<void>,
    private readonly isStopped: () => boolean,
  ) {}

  /** A pass when `until` passes, so the old password goes on time (unless one is due earlier). */
  wakeFor(until: number): void {
    if (this.isStopped() || until >= this.#at) return;
    this.clock.clearTimeout(this.#timer);
    this.#at = until;
    this.#timer = this.clock.setTimeout(
      () => {
        this.#at = Number.POSITIVE_INFINITY;
        void this.wake().then(() => this.wakeForDrains());
      },
      Math.max(0, until - this.clock.now()) + 5,
    );
  }

  /** A wake for the earliest grace bound of the rotations under way. */
  wakeForDrains(): void {
    for (const login of this.book.rotating()) {
      const rotation = this.book.get(login)?.rotation;
      if (rotation !== undefined) this.wakeFor(rotation.until);
    }
  }

  stop(): void {
    this.clock.clearTimeout(this.#timer);
  }
}
