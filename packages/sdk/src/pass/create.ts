// Applying: each create (or a rotation's step) the looking and the verifying found due, under the
// create timeout, with what it moves in the book, the log and the action log.

import type { Provision, RotationMark } from "../adapter.ts";
import type { ActionEntry } from "../collaborators.ts";
import { forEachLimited, withTimeout } from "../concurrency.ts";
import type { Rotation } from "../consumer-book.ts";
import { passwordTag } from "../tools.ts";
import type { PassContext } from "./context.ts";

/** A create failing the same way is said again only this often (in attempts). */
const SAY_AGAIN_ATTEMPTS = 240;

/** One create due. */
export interface CreateJob {
  readonly p: Provision;
  /** A rotation's step: `add` makes the new password valid beside the old, `remove` drops the old. */
  readonly rotation?: "add" | "remove" | undefined;
  readonly digest: string;
  /** How many times in a row it has been found not held and applied again (0: not a re-apply). */
  readonly reapplying: number;
  /** What the action log records when it succeeds; null for re-asserting what the backend had. */
  readonly action: "created" | "re-applied" | null;
  readonly why: string;
  /** A leaked password replaced (`mesh rotate --now`): the login's sessions end once it is applied. */
  readonly endSessions?: true;
}

/** Runs creates, `concurrency` at a time. */
export class CreateStage {
  constructor(private readonly ctx: PassContext) {}

  async run(jobs: readonly CreateJob[]): Promise<void> {
    await forEachLimited(jobs, this.ctx.settings.concurrency, (job) => this.#create(job));
  }

  async #create(job: CreateJob): Promise<void> {
    const { adapter, book, clock, log, metrics, report, settings } = this.ctx;
    const { p } = job;
    const rotation = book.get(p.as)?.rotation;
    const retiring = p.retiring;
    const apply =
      retiring !== undefined && rotation !== undefined
        ? (signal: AbortSignal) => adapter.overlap({ ...p, retiring }, rotationMark(rotation), signal)
        : (signal: AbortSignal) => adapter.create(p, signal);
    const { result, settled } = withTimeout(clock, settings.createTimeout, `creating ${p.as}`, apply);
    book.flying(p.as);
    void settled.then(() => book.landed(p.as));
    try {
      await result;
    } catch (err) {
      const text = report.describe(err, p.retiring === undefined ? [p.password] : [p.password, p.retiring]);
      const failure = book.createFailed(p.as, text);
      // Said when it changes; while it stays the same, only rarely.
      if (failure.times === 1 || failure.times % SAY_AGAIN_ATTEMPTS === 0) {
        log.warn(`${p.as}: create failed, will retry: ${text}`);
      }
      const cls = report.classify(err, text);
      metrics.failed("create", cls);
      report.fail(p.as, p.node, cls, text);
      return;
    }
    metrics.created(job.action ?? "re-asserted");
    this.ctx.changes.applied(p.as);
    const failed = book.created(p, job.digest, passwordTag(p.password));
    report.succeed(p.as);
    if (failed) log.info(`${p.as}: created, after ${failed.times} failed attempt(s)`);

    if (job.action) {
      log.info(`${p.as}: ${job.action} (${job.why})`);
      report.record({ action: job.action, login: p.as, who: "provisioner", why: job.why });
    }
    this.#rotated(job, rotation);
    if (job.endSessions === true) await this.#endSessions(p.as);
    if (job.reapplying === 0) {
      book.held(p.as);
      return;
    }
    // The brake: a create that keeps not producing what holds checks is checked less and less often.
    const wait = Math.min(settings.verifyEvery * 2 ** (job.reapplying - 1), settings.maxBrake);
    book.braked(p.as, job.reapplying, clock.now() + wait);
    if (job.reapplying > 1) log.warn(`${p.as}: next check in ${Math.round(wait / 1000)}s`);
  }

  // A leaked password replaced: the sessions opened with it end now. A failure is said and left to
  // the operator (the old password is refused already); never retried behind their back.
  async #endSessions(login: string): Promise<void> {
    const { adapter, clock, log, report, settings } = this.ctx;
    if (!adapter.endsSessions) {
      log.warn(
        `${login}: its password was replaced at once (mesh rotate --now), but this provider cannot end its open sessions`,
      );
      return;
    }
    const { result } = withTimeout(clock, settings.createTimeout, `ending ${login}'s sessions`, (signal) =>
      adapter.endSessions(login, signal),
    );
    try {
      const ended = await result;
      const why = `password replaced at once (mesh rotate --now): ${ended === undefined ? "its open sessions were" : `${ended} open session(s)`} ended`;
      log.info(`${login}: ${why}`);
      report.record({ action: "sessions-ended", login, who: "provisioner", why });
    } catch (err) {
      log.warn(
        `${login}: its sessions could not be ended after mesh rotate --now: ${report.describe(err, [])}`,
      );
    }
  }

  /** What a rotation's step that succeeded moves it to, said and recorded phase by phase. */
  #rotated(job: CreateJob, rotation: Rotation | undefined): void {
    const { book, log, report } = this.ctx;
    const login = job.p.as;
    if (rotation === undefined) return;
    if (job.p.retiring === undefined) {
      book.rotationOver(login);
      log.info(`${login}: rotation: remove (${job.why})`);
      report.record({ action: "rotation-remove", login, who: "provisioner", why: job.why });
      return;
    }
    if (rotation.phase !== "add") return;
    const until = new Date(rotation.until).toISOString();
    book.rotationIs(login, { ...rotation, phase: "drain" });
    const said: [ActionEntry["action"], string][] = [
      ["rotation-add", "the new password is valid beside the old one"],
      [
        "rotation-deliver",
        "the new password is offered to the nodes (status names it applied): the agent hands it to the apps",
      ],
      ["rotation-drain", `the old password stays valid until ${until}, then it goes`],
    ];
    for (const [action, why] of said) report.record({ action, login, who: "provisioner", why });
    log.info(`${login}: rotation: both passwords valid; the old one goes at ${until}`);
    this.ctx.wakes.wakeFor(rotation.until);
  }
}

/** The rotation as the adapter records it in the mark: phase `drain` once `overlap` succeeds. */
function rotationMark(rotation: Rotation): RotationMark {
  return {
    phase: "drain",
    since: new Date(rotation.since).toISOString(),
    until: new Date(rotation.until).toISOString(),
  };
}
