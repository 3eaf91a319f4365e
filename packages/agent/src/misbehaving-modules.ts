// Which modules of this node answered what they must not: a malformed answer, a huge one, one that
// never came whole, or half of one. Such a module is `misbehaving` until its next good answer to the
// same question; the node's report carries what was wrong and since when, so `mesh status` and the
// dashboard show it, and the agent's log says it once when it starts and once when it ends.
import type { BusLogger } from "@mesh/bus";
import type { AnswerFault, ReportedMisbehaviour } from "@mesh/manifest";
import {
  AnswerTooLargeError,
  ControlAnswerError,
  ControlHungUpError,
  ControlTimeoutError,
  MalformedAnswerError,
} from "@mesh/sdk/provider";

/** One way a module misbehaves, kept until its next good answer to the same question. */
export type Misbehaviour = ReportedMisbehaviour;

/**
 * The faults an honest module may show once (a provider being restarted hangs up; one that is busy
 * for a moment is slow): counted only when the next ask meets the same. A malformed or oversized
 * answer is never honest and counts at once.
 */
const COUNTED_ON_REPEAT: ReadonlySet<AnswerFault> = new Set(["slow", "hung-up"]);

/** What the book is told with, and what it tells. */
export interface MisbehavingModulesOptions {
  readonly logger: BusLogger;
  /** Called when a module starts or stops misbehaving (the node reports it then, not at the next tick). */
  readonly onChange?: () => void;
  readonly now?: () => number;
}

interface Streak {
  readonly fault: AnswerFault;
  readonly what: string;
  readonly since: number;
  /** Whether it counts yet (at once, or from its second ask). */
  counted: boolean;
}

/**
 * The book of misbehaving modules: each boundary that reads a module's answer tells it `bad` or
 * `good`, keyed by what was asked (`status`, `retire list`, …), so a good answer to one question
 * never clears a bad answer to another and the two do not take turns in the log.
 */
export class MisbehavingModules {
  readonly #o: MisbehavingModulesOptions;
  readonly #now: () => number;
  /** Module -> what was asked -> its streak of bad answers. */
  readonly #streaks = new Map<string, Map<string, Streak>>();

  constructor(options: MisbehavingModulesOptions) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Counts `err`, what asking `module` for `answer` threw, when it is a bad answer
   * (`ControlAnswerError`); anything else (nothing listens, permission denied) is not the module's
   * doing and is not counted. Returns whether it was a bad answer.
   */
  failed(module: string, answer: string, err: unknown): err is ControlAnswerError {
    if (!(err instanceof ControlAnswerError)) return false;
    this.bad(module, answer, err.fault, whatOf(err));
    return true;
  }

  /** Counts one bad answer of `module` to `answer`: `what` says what was wrong, quoting nothing of it. */
  bad(module: string, answer: string, fault: AnswerFault, what: string): void {
    const mine = this.#streaks.get(module) ?? new Map<string, Streak>();
    this.#streaks.set(module, mine);
    const before = mine.get(answer);
    const wasCounted = this.#counts(module);
    const counted = !COUNTED_ON_REPEAT.has(fault) || before !== undefined;
    mine.set(answer, { fault, what, since: before?.since ?? this.#now(), counted });
    if (!wasCounted && counted) {
      this.#o.logger.warn(
        `module ${module} misbehaves: its answer to ${answer} ${phrase(fault)}: ${what}; ` +
          `what it answers is not used until it answers well again`,
      );
    }
    if (counted && before?.counted !== true) this.#o.onChange?.();
  }

  /** Counts a good answer of `module` to `answer`: what it did wrong there is over. */
  good(module: string, answer: string): void {
    const mine = this.#streaks.get(module);
    const before = mine?.get(answer);
    if (mine === undefined || before === undefined) return;
    const wasCounted = this.#counts(module);
    mine.delete(answer);
    if (mine.size === 0) this.#streaks.delete(module);
    if (wasCounted && !this.#counts(module)) {
      this.#o.logger.info(
        `module ${module} answers well again (it misbehaved since ${new Date(before.since).toISOString()})`,
      );
      this.#o.onChange?.();
    } else if (before.counted) this.#o.onChange?.();
  }

  /** Forgets the modules not in `modules` (no longer on this node). */
  keepOnly(modules: readonly string[]): void {
    for (const m of [...this.#streaks.keys()]) if (!modules.includes(m)) this.#streaks.delete(m);
  }

  /** Whether `module` misbehaves now. */
  isMisbehaving(module: string): boolean {
    return this.#counts(module);
  }

  /** What each misbehaving module did wrong and since when, by module then question; never empty lists. */
  list(): Misbehaviour[] {
    const out: Misbehaviour[] = [];
    for (const [module, mine] of [...this.#streaks].sort(([a], [b]) => compare(a, b))) {
      for (const [answer, s] of [...mine].sort(([a], [b]) => compare(a, b))) {
        if (!s.counted) continue;
        out.push({ module, answer, fault: s.fault, what: s.what, since: new Date(s.since).toISOString() });
      }
    }
    return out;
  }

  #counts(module: string): boolean {
    for (const s of this.#streaks.get(module)?.values() ?? []) if (s.counted) return true;
    return false;
  }
}

/** What was wrong with an answer, in a few words and without the socket's path. */
export function whatOf(err: ControlAnswerError): string {
  if (err instanceof MalformedAnswerError) return err.problem;
  if (err instanceof AnswerTooLargeError) return `it is larger than the ${err.maxBytes} bytes read of it`;
  if (err instanceof ControlTimeoutError) return `no whole answer came within ${err.timeoutMs} ms`;
  if (err instanceof ControlHungUpError) {
    return err.received === 0 ? "it hung up before answering" : `it hung up ${err.received} bytes into it`;
  }
  return err.message;
}

function phrase(fault: AnswerFault): string {
  switch (fault) {
    case "malformed":
      return "is malformed";
    case "too-large":
      return "is too large";
    case "slow":
      return "did not come in time";
    case "hung-up":
      return "was cut off";
  }
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
