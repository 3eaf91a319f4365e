// What a pass says: a consumer's failures and successes (its standing), a secret that cannot be
// read, a contributions file that cannot be used, the action log, and every error's text scrubbed
// of the passwords it must never carry. Every stage says what happened through here.

import type { FailureClass } from "../adapter.ts";
import type { GuardedAdapter } from "../adapter-guard.ts";
import type { ActionEntry, ActionLog, Clock, Logger } from "../collaborators.ts";
import { TimeoutError } from "../concurrency.ts";
import type { ConsumerBook } from "../consumer-book.ts";
import type { Contribution } from "../contributions-file.ts";
import { InvalidLoginError } from "../login.ts";
import type { ProvisionerObserver } from "../metrics.ts";
import { isRefusal } from "../refusals.ts";
import { classOf, describeError } from "../scrub.ts";
import { SecretUnreadableError } from "../secret-file.ts";
import type { Standings } from "../standing.ts";

/** What the report stage is given. */
export interface ReportDeps {
  readonly iface: string;
  readonly receives: string;
  readonly adapter: Pick<GuardedAdapter, "classify">;
  readonly clock: Clock;
  readonly log: Logger;
  readonly metrics: ProvisionerObserver;
  readonly actions: ActionLog;
  readonly book: ConsumerBook;
  readonly standings: Standings;
  /** The provider's own secrets, scrubbed from every error text like a consumer's password. */
  readonly secrets: readonly string[];
}

/** Says what a pass found: standings, log lines, action log entries, scrubbed error texts. */
export class ReportStage {
  #problem: string | null = null;

  constructor(private readonly deps: ReportDeps) {}

  /** Why the contributions file cannot be used, as last said; null when it can. */
  get problem(): string | null {
    return this.#problem;
  }

  /** It failed this way: its standing says so (and, past `failingAfter`, announces it). */
  fail(login: string, node: string | undefined, cls: FailureClass, text: string): void {
    this.deps.standings.failed(login, node, cls, text);
    this.deps.book.touch(login);
  }

  succeed(login: string): void {
    const was = this.deps.standings.get(login);
    this.deps.standings.succeeded(login);
    if (was) this.deps.book.touch(login);
  }

  /** Which kind of failure `err` is: a refusal, what the adapter says, a timeout, or by its text. */
  classify(err: unknown, text: string): FailureClass {
    if (isRefusal(err)) return "refused";
    let said: FailureClass | undefined;
    try {
      said = this.deps.adapter.classify?.(err);
    } catch {
      said = undefined;
    }
    if (said) return said;
    if (err instanceof TimeoutError) return "unreachable";
    if (err instanceof InvalidLoginError) return "refused";
    return classOf(err, text);
  }

  /** `g`'s secret could not be read at `now`: said plainly, then loudly, and it fails. */
  secretMissing(g: Contribution, err: unknown, now: number): void {
    const { book, log } = this.deps;
    const text = this.describe(err, []);
    const breaksRule = err instanceof SecretUnreadableError && err.breaksRule;
    const saying = book.secretMissing(g.as, now, breaksRule);
    if (saying === "refused") {
      // No race: the file is there and breaks the rule, so it is said loudly at once (and rarely after).
      log.error(
        `${g.as}: its secret is REFUSED (${text}); nothing is provisioned for it until that is fixed`,
      );
    } else if (saying === "waiting") {
      log.info(`${g.as}: secret not readable yet (${text}); waiting for it`);
    } else if (saying === "loud") {
      const since = book.get(g.as)?.secretMiss?.since ?? now;
      log.error(
        `${g.as}: CANNOT READ its secret for ${Math.round((now - since) / 1000)}s (${text}). This is not a ` +
          "race any more: nothing is provisioned for this consumer until somebody looks. Check that the file " +
          "exists, who owns it, and which user this provider runs as",
      );
    }
    this.deps.metrics.failed("read-secret", "secret-unreadable");
    this.fail(g.as, g.node, "secret-unreadable", text);
  }

  /** Says when the contributions file becomes unusable (`problem`) or usable again (null). */
  sayProblem(problem: string | null): void {
    if (problem === this.#problem) return;
    if (problem) this.deps.log.warn(`${problem}: nothing is applied or retired until it is fixed`);
    else this.deps.log.info(`contributions file ${this.deps.receives} readable again`);
    this.#problem = problem;
  }

  /** A consumer neither asked for nor held has no standing left to say. */
  forgetUnasked(): void {
    const { book, standings } = this.deps;
    for (const login of standings.logins()) {
      const r = book.get(login);
      if (r?.asked === undefined && r?.made !== "active") {
        standings.clear(login, "no longer asked for");
        book.touch(login);
      }
    }
  }

  /** Appends to the action log; a log that cannot be written is said, never thrown. */
  record(entry: Omit<ActionEntry, "at" | "interface">): void {
    try {
      this.deps.actions.append({
        ...entry,
        interface: this.deps.iface,
        at: new Date(this.deps.clock.now()).toISOString(),
      });
    } catch (err) {
      this.deps.log.warn(
        `could not record ${entry.action} of ${entry.login} in the action log: ${this.describe(err, [])}`,
      );
    }
  }

  /** An error's text, scrubbed of `passwords` and of the provider's own secrets. */
  describe(err: unknown, passwords: readonly string[]): string {
    const { secrets } = this.deps;
    return describeError(err, secrets.length === 0 ? passwords : [...passwords, ...secrets]);
  }

  /** Every password read for a consumer still asked for: what no message may carry. */
  passwords(): string[] {
    const passwords: string[] = [];
    for (const r of this.deps.book.records()) {
      if (r.password !== undefined) passwords.push(r.password);
      if (r.provision?.retiring !== undefined) passwords.push(r.provision.retiring);
    }
    return passwords;
  }
}
