// Verifying (DESIGN §3 rule 4): every consumer applied as asked is checked with the backend a batch
// at a time, outside the lock; what the answers call for (a re-apply, a failure, the brake let go)
// is done under it.

import type { Provision } from "../adapter.ts";
import { forEachLimited, TimeoutError, withTimeout, type Mutex } from "../concurrency.ts";
import type { Contribution } from "../contributions-file.ts";
import { isValidLogin } from "../login.ts";
import type { PassContext } from "./context.ts";
import type { CreateJob, CreateStage } from "./create.ts";
import type { LookStage } from "./look.ts";
import { digestOf, provisionOf } from "./provision.ts";

/**
 * How many of a verify batch's answers are judged under the lock at a time (see `run`): a change
 * waits behind at most this many (and their re-applies, when the backend lost some).
 */
const JUDGED_AT_ONCE = 256;

/** One consumer due to be checked, with its record's generation when that was decided. */
export interface Due {
  readonly g: Contribution;
  readonly generation: number;
}

/** One consumer a verification checks, with its record's generation when the check began. */
interface Check {
  readonly p: Provision;
  readonly digest: string;
  readonly generation: number;
}

/** What a verification is given besides the context. */
export interface VerifyDeps {
  readonly lock: Mutex;
  readonly look: LookStage;
  readonly create: CreateStage;
  /** Makes the status board again from the book. */
  readonly rebuild: () => Promise<void>;
  /** How many consumers one batched check covers, read when each verification starts. */
  readonly batchSize: () => number;
}

/** Checks that the backend still holds what was applied, and applies again what it lost. */
export class VerifyStage {
  constructor(
    private readonly ctx: PassContext,
    private readonly deps: VerifyDeps,
  ) {}

  /** Every consumer applied as asked and not held back by its brake: what a verification checks. */
  due(now: number): Due[] {
    const { book } = this.ctx;
    const due: Due[] = [];
    for (const r of book.records()) {
      if (r.asked === undefined || r.applied === undefined || r.inFlight) continue;
      // An entry that cannot be served fails alone at every pass; what it had is left as it was.
      if (r.asked.refused !== undefined || !isValidLogin(r.login)) continue;
      if (book.isBraked(r.login, now)) continue;
      due.push({ g: r.asked, generation: r.generation });
    }
    return due;
  }

  /**
   * Verifies `due`, a batch at a time. Each secret is read again (the safety net for a change the
   * watcher missed) and each backend check is asked outside the lock, so a change that arrives
   * meanwhile is applied at once; the lock is taken only to act on a slice of a batch's answers at
   * a time (`JUDGED_AT_ONCE`), so a change waits behind one slice at most, and an answer for a
   * consumer that changed since its check began (applied, retired, deleted, asked differently) is
   * dropped.
   */
  async run(due: readonly Due[]): Promise<void> {
    const { book, clock, secretsDir } = this.ctx;
    const { lock, look, create } = this.deps;
    const stopped = (): boolean => this.ctx.isStopped();
    const size = this.deps.batchSize();
    secretsDir.refresh();
    for (let at = 0; at < due.length && !stopped(); at += size) {
      const batch = due.slice(at, at + size);
      const checks: Check[] = [];
      const changed: Contribution[] = [];
      await forEachLimited(batch, 64, async ({ g, generation }) => {
        let password: string;
        try {
          password = await secretsDir.read(g.secret);
        } catch {
          changed.push(g);
          return;
        }
        const r = book.get(g.as);
        // The same entry and the same password as applied: what was applied is checked as it is,
        // with nothing made again for it.
        if (
          r?.provision !== undefined &&
          r.applied !== undefined &&
          r.asked === g &&
          r.provision.password === password
        ) {
          checks.push({ p: r.provision, digest: r.applied, generation });
          return;
        }
        const p = provisionOf(g, password);
        const digest = digestOf(p);
        if (digest === r?.applied) checks.push({ p, digest, generation });
        else changed.push(g);
      });
      const { answers, timedOut } = await this.#ask(checks);
      if (!timedOut) await this.#lookForSessions(checks.map((c) => c.p.as));
      // Judged a slice at a time, each under the lock on its own: a pass that a change queued
      // meanwhile takes the lock between two slices (the lock is first come, first served), so a
      // change waits on one slice at most, never on the whole batch. An answer whose consumer
      // changed since its check began is dropped by `#judge`, however late its slice comes.
      for (let from = 0; from < checks.length && !stopped(); from += JUDGED_AT_ONCE) {
        const slice = checks.slice(from, from + JUDGED_AT_ONCE);
        await lock.run(async () => {
          if (stopped()) return;
          await create.run(this.#judge(slice, answers));
        });
      }
      await lock.run(async () => {
        if (stopped()) return;
        // A secret that changed without a word from the watcher: looked at as a pass would.
        const stillAsked = changed.filter((g) => book.get(g.as)?.asked === g);
        if (stillAsked.length > 0) await create.run(await look.look(stillAsked, clock.now()));
        // What this batch applied is finished now, as a pass's changes are, not at the next pass.
        await this.ctx.changes.finish();
        await this.deps.rebuild();
      });
      // A backend that timed out will time out for the next batch too: the rest wait a pass.
      if (timedOut) break;
    }
  }

  // Which of these logins the backend shows connected, when the adapter can tell: an app that
  // never connects (pointed at another server, misconfigured, never started) is said so. A look
  // that fails or times out is no evidence: nothing is marked.
  async #lookForSessions(logins: readonly string[]): Promise<void> {
    const { adapter, book, clock, settings } = this.ctx;
    if (!adapter.seesSessions || logins.length === 0) return;
    try {
      const { result } = withTimeout(clock, settings.holdsTimeout, "looking for sessions", (signal) =>
        adapter.seenConnected(logins, signal),
      );
      book.sawSessions(logins, await result);
    } catch {
      // Unable to look is not "never connected".
    }
  }

  /** Asks the backend whether it holds these (read-only, outside the lock). */
  async #ask(
    checks: readonly Check[],
  ): Promise<{ answers: Map<string, boolean | Error>; timedOut: boolean }> {
    const { adapter, clock, metrics, settings } = this.ctx;
    const answers = new Map<string, boolean | Error>();
    let timedOut = false;
    if (checks.length === 0) return { answers, timedOut };
    if (adapter.batched) {
      const many = adapter.holdsMany.bind(adapter);
      const batch = checks.map((c) => c.p);
      metrics.roundTrip(batch.length);
      const { result } = withTimeout(clock, settings.holdsTimeout, "verifying", (signal) =>
        many(batch, signal),
      );
      try {
        for (const [login, answer] of await result) answers.set(login, answer);
      } catch (err) {
        const e = err instanceof Error ? err : new Error(String(err));
        for (const p of batch) answers.set(p.as, e);
        if (err instanceof TimeoutError) timedOut = true;
      }
      return { answers, timedOut };
    }
    const holds = adapter.holds.bind(adapter);
    await forEachLimited(checks, settings.concurrency, async (c) => {
      if (timedOut) return;
      metrics.roundTrip(1);
      const { result } = withTimeout(clock, settings.holdsTimeout, `checking ${c.p.as}`, (signal) =>
        holds(c.p, signal),
      );
      try {
        answers.set(c.p.as, await result);
      } catch (err) {
        if (err instanceof TimeoutError) timedOut = true;
        answers.set(c.p.as, err instanceof Error ? err : new Error(String(err)));
      }
    });
    return { answers, timedOut };
  }

  /** Acts on a batch's answers (under the lock): returns the re-applies due. */
  #judge(checks: readonly Check[], answers: ReadonlyMap<string, boolean | Error>): CreateJob[] {
    const { book, log, metrics, report } = this.ctx;
    const reapply: CreateJob[] = [];
    for (const c of checks) {
      const answer = answers.get(c.p.as);
      if (answer === undefined) continue; // not asked this pass
      // Changed while it was checked: the answer is about what was, and nothing is done on it.
      if (book.get(c.p.as)?.generation !== c.generation) continue;
      if (answer instanceof Error) {
        // Unable to ask is not evidence of loss: nothing is re-applied on it.
        const text = report.describe(answer, [c.p.password]);
        const cls = report.classify(answer, text);
        metrics.verified("unknown");
        metrics.failed("verify", cls);
        report.fail(c.p.as, c.p.node, cls, `could not check: ${text}`);
        continue;
      }
      metrics.verified(answer ? "held" : "not-held");
      if (answer) {
        book.held(c.p.as);
        report.succeed(c.p.as);
        continue;
      }
      const times = book.notHeld(c.p.as);
      if (times === 1) log.warn(`${c.p.as}: the backend no longer holds it; applying again`);
      else {
        log.warn(
          `${c.p.as}: still not held after being applied again (${times} times in a row): ` +
            "create does not produce what holds checks; applying again",
        );
      }
      reapply.push({
        p: c.p,
        digest: c.digest,
        reapplying: times,
        action: "re-applied",
        why: "the backend no longer held it",
      });
    }
    return reapply;
  }
}
