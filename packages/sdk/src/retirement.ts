import { createHash } from "node:crypto";

/** The bound on what is retired without a person (DESIGN §3 rule 7). */
export interface RetirementBound {
  /** Consecutive periodic passes that must see the same unasked set. */
  readonly stablePasses: number;
  /** More than this many at once waits for a person. */
  readonly retireAtOnce: number;
  /** Where more than one is held, a larger share than this waits for a person. */
  readonly retireFraction: number;
  /** Periodic passes closer together than this do not count twice. */
  readonly every: number;
}

/** The bound a provider keeps when it is not told otherwise: 5 passes, more than 3 or more than half waits. */
export const DEFAULT_RETIREMENT_LIMITS = {
  stablePasses: 5,
  retireAtOnce: 3,
  retireFraction: 0.5,
} as const satisfies Omit<RetirementBound, "every">;

/** A set that has been stable long enough but is past the bound, waiting for `retire approve`. */
export interface WaitingSet {
  readonly id: string;
  readonly logins: readonly string[];
  readonly held: number;
  readonly reason: string;
}

/** What one pass should do about the consumers no longer asked for. */
export type RetirementStep =
  | { readonly kind: "nothing" }
  | { readonly kind: "counting"; readonly logins: readonly string[]; readonly count: number }
  | { readonly kind: "retire"; readonly logins: readonly string[]; readonly held: number }
  | { readonly kind: "wait"; readonly waiting: WaitingSet; readonly isNew: boolean };

/** The id `retire approve` takes for a set: short, stable, and different for every other set. */
export function setId(logins: readonly string[]): string {
  return createHash("sha256").update(logins.join("\n")).digest("hex").slice(0, 12);
}

/**
 * Whether retiring `count` of `held` at once needs a person. Strictly larger than the bound waits:
 * 1 of 2 retires on its own, 2 of 3 waits, any 4 wait.
 */
export function needsApproval(
  count: number,
  held: number,
  bound: Pick<RetirementBound, "retireAtOnce" | "retireFraction">,
): boolean {
  return count > bound.retireAtOnce || (held > 1 && count > held * bound.retireFraction);
}

/** Why retiring `count` of `held` at once waits for a person, or undefined when it does not. */
export function approvalReason(
  count: number,
  held: number,
  bound: Pick<RetirementBound, "retireAtOnce" | "retireFraction">,
): string | undefined {
  if (!needsApproval(count, held, bound)) return undefined;
  return count > bound.retireAtOnce
    ? `${count} at once is more than ${bound.retireAtOnce}`
    : `${count} of ${held} held is more than ${Math.round(bound.retireFraction * 100)}% of them`;
}

/**
 * Counts how long the same set of consumers has gone unasked. Only periodic passes at least `every`
 * apart advance the count, so a burst of file changes can never hurry a retirement along.
 */
export class RetirementCounter {
  #key = "";
  #count = 0;
  #countedAt = Number.NEGATIVE_INFINITY;
  #waiting: WaitingSet | undefined;

  constructor(private readonly bound: RetirementBound) {}

  /** Starts the count again: a read that failed is not evidence that anyone stopped asking. */
  reset(): void {
    this.#key = "";
    this.#count = 0;
    this.#countedAt = Number.NEGATIVE_INFINITY;
    this.#waiting = undefined;
  }

  /** The set waiting for a person, if any. */
  get waiting(): WaitingSet | undefined {
    return this.#waiting;
  }

  /** How many counted passes the current unasked set has been seen in. */
  get count(): number {
    return this.#count;
  }

  /**
   * Takes one pass's unasked set (made by this provider, active, no longer asked for) and how many
   * it holds, and says what to do.
   */
  observe(unasked: readonly string[], held: number, periodic: boolean, now: number): RetirementStep {
    const logins = [...unasked].sort();
    const key = logins.join("\n");
    if (logins.length === 0) {
      this.reset();
      return { kind: "nothing" };
    }
    if (key !== this.#key) {
      this.reset();
      this.#key = key;
    }
    if (periodic && now - this.#countedAt >= this.bound.every) {
      this.#count++;
      this.#countedAt = now;
    }
    if (this.#count < this.bound.stablePasses) return { kind: "counting", logins, count: this.#count };
    if (!needsApproval(logins.length, held, this.bound)) return { kind: "retire", logins, held };
    const isNew = this.#waiting === undefined;
    this.#waiting ??= {
      id: setId(logins),
      logins,
      held,
      reason: approvalReason(logins.length, held, this.bound) ?? "",
    };
    return { kind: "wait", waiting: this.#waiting, isNew };
  }
}
