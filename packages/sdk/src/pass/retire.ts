// Retiring: consumers no longer asked for are counted pass after pass (the `RetirementCounter`),
// retired once the count is stable and small enough, or held for a person's approval.

import { forEachLimited } from "../concurrency.ts";
import type { PassContext, PassKind } from "./context.ts";

/** Retires what is no longer asked for, and marks in the book the set that waits for a person. */
export class RetireStage {
  /** The retirement count the unasked records were last touched for (what status names). */
  #counted = 0;
  /** The id of the set waiting for a person, as last marked in the book. */
  #waitingId: string | undefined;

  constructor(private readonly ctx: PassContext) {}

  async run(kind: PassKind, now: number): Promise<void> {
    const { book, log, retirement, receives, settings } = this.ctx;
    const unasked: string[] = [];
    let held = 0;
    for (const r of book.records()) {
      if (r.made !== "active") continue;
      held++;
      if (r.asked === undefined) unasked.push(r.login);
    }
    const step = retirement.observe(unasked, held, kind === "periodic", now);
    if (step.kind === "retire") {
      const why = `no longer asked for in ${receives} for ${settings.stablePasses} consecutive passes`;
      await this.retire(step.logins, why, "provisioner");
    } else if (step.kind === "wait" && step.isNew) {
      const w = step.waiting;
      log.warn(
        `${w.logins.length} consumer(s) no longer asked for (${w.logins.join(", ")}); ${w.reason}, so the ` +
          `retirement waits for a person: \`mesh tool retire approve ${w.id}\` retires them, asking for them again cancels it`,
      );
    }
    // What status says of the unasked names the count.
    if (retirement.count !== this.#counted) {
      this.#counted = retirement.count;
      for (const login of unasked) book.touch(login);
    }
    this.#follow();
  }

  /** Nothing read is not nobody asking: the count starts again, and nothing waits for a person. */
  restart(): void {
    this.ctx.retirement.reset();
    this.#follow();
  }

  /** Retires these active consumers for `why`, as `who`; returns those retired, sorted. */
  async retire(logins: readonly string[], why: string, who: string): Promise<string[]> {
    const { adapter, book, clock, log, metrics, report, settings, standings } = this.ctx;
    const done: string[] = [];
    await forEachLimited(logins, settings.concurrency, async (login) => {
      const r = book.get(login);
      if (!r || r.made !== "active") return;
      const at = clock.now();
      try {
        await adapter.retire(login, r.derived, why, new Date(at));
      } catch (err) {
        log.error(`${login}: could not retire, will try again: ${report.describe(err, report.passwords())}`);
        return;
      }
      standings.clear(login, "retired");
      book.retired(login, at, why);
      this.ctx.changes.changed();
      log.info(`${login}: retired (access disabled, data kept, marked to delete): ${why}`);
      report.record({ action: "retired", login, who, why });
      metrics.retired(who === "provisioner" ? "provisioner" : "approval");
      done.push(login);
    });
    this.ctx.retirement.reset();
    this.#follow();
    return done.sort();
  }

  /** Marks the set waiting for a person (if any) in the book, when it changed. */
  #follow(): void {
    const waiting = this.ctx.retirement.waiting;
    if (waiting?.id === this.#waitingId) return;
    this.#waitingId = waiting?.id;
    this.ctx.book.awaiting(waiting?.logins ?? []);
  }
}
