// Looking at what is asked: each consumer's secret read, compared with what was last applied, and
// the create (or rotation step) due for each one whose (login, password, values, derived) changed.

import { OLDER_THAN_BACKEND, olderThanHeld } from "@mesh/manifest";
import type { Provision } from "../adapter.ts";
import { forEachLimited, withTimeout } from "../concurrency.ts";
import type { ConsumerRecord } from "../consumer-book.ts";
import type { Contribution } from "../contributions-file.ts";
import { InvalidLoginError, isValidLogin, secondLogin } from "../login.ts";
import type { PassContext } from "./context.ts";
import type { CreateJob } from "./create.ts";
import { digestOf, provisionOf } from "./provision.ts";

/** Reads consumers' secrets and works out the creates due. */
export class LookStage {
  constructor(private readonly ctx: PassContext) {}

  /** A pass's look: nothing when nothing is to be looked at (`null`), else `look` at these. */
  async run(lookAt: readonly Contribution[] | null, now: number): Promise<CreateJob[]> {
    if (lookAt === null) return [];
    // Resolved again each pass: a secrets directory replaced since the last one is judged as it is now.
    this.ctx.secretsDir.refresh();
    return this.look(lookAt, now);
  }

  /** Reads these consumers' secrets; returns a create for each whose (login, password, values, derived) changed. */
  async look(given: readonly Contribution[], now: number): Promise<CreateJob[]> {
    const { book, log, metrics, report, secretsDir } = this.ctx;
    const creates: CreateJob[] = [];
    await forEachLimited(given, 64, async (g) => {
      if (!isValidLogin(g.as)) {
        metrics.failed("validate", "refused");
        report.fail(g.as, g.node, "refused", new InvalidLoginError(g.as).message);
        return;
      }
      if (g.refused !== undefined) {
        // Still asked for, so never retired for it; it fails alone, and what it had stays as it was.
        metrics.failed("validate", "refused");
        report.fail(g.as, g.node, "refused", `contributions entry for ${g.as}: ${g.refused}`);
        return;
      }
      if (book.get(g.as)?.inFlight) return;
      let password: string;
      try {
        password = await secretsDir.read(g.secret);
      } catch (err) {
        report.secretMissing(g, err, now);
        return;
      }
      if (book.secretFound(g.as)) log.info(`${g.as}: secret readable again`);
      book.secretRead(g.as, password);
      if (this.#olderThanHeld(g)) return;
      const p = await this.#desired(g, password, now);
      if (p === undefined) return;
      const job = jobFor(g, p, book.get(g.as), now);
      if (job !== undefined) creates.push(job);
    });
    return creates;
  }

  /**
   * Whether `g`'s password is older than the one the backend holds (as its mark, or this process's
   * last apply, says): then it is not applied, since putting it back would undo a rotation (perhaps
   * of a leaked password) behind everyone's back. The consumer fails with `OLDER_THAN_BACKEND`, and
   * the controller rotates it to a newer password. Said once per run.
   */
  #olderThanHeld(g: Contribution): boolean {
    const { book, log, metrics, report, standings } = this.ctx;
    const why = olderThanHeld(g.minted, book.get(g.as)?.heldMinted);
    if (why === undefined) return false;
    if (standings.get(g.as)?.class !== OLDER_THAN_BACKEND) log.warn(`${g.as}: ${why}`);
    metrics.failed("create", OLDER_THAN_BACKEND);
    report.fail(g.as, g.node, OLDER_THAN_BACKEND, why);
    return true;
  }

  /**
   * What the backend should hold for `g` now. For an adapter that can hold two passwords, while the
   * entry names the password being retired: both, until the rotation's grace bound; a rotation
   * begins only where the backend takes the retiring password now (what this process applied, or,
   * after a restart, what `holds` finds), so a password already removed is never made valid again.
   * Undefined when that cannot be told this pass (the backend did not answer).
   */
  async #desired(g: Contribution, password: string, now: number): Promise<Provision | undefined> {
    const { adapter, book, clock, log, report, settings } = this.ctx;
    const plain = provisionOf(g, password);
    if (!adapter.overlaps) return plain;
    const r = book.get(g.as);
    // Where logins alternate, a login that moved while the password did not is the agent half-way
    // through writing a rotation (the new password file comes last): applied now, it would move the
    // old password to the other login and lock out the one the apps use. The new password's file
    // sets off the next pass.
    const was = r?.provision;
    if (
      adapter.alternates &&
      was !== undefined &&
      was.password === password &&
      (was.login ?? was.as) !== (plain.login ?? plain.as)
    )
      return undefined;
    let rotation = r?.rotation;
    // A rotation for another password is over: a newer one supersedes it.
    if (rotation?.password !== undefined && rotation.password !== password) {
      book.rotationOver(g.as);
      rotation = undefined;
    }
    const retiring = g.retiring === undefined ? undefined : await this.#readRetiring(g);
    if (retiring === undefined || retiring === password) return plain;
    if (rotation !== undefined) {
      if (rotation.password === undefined) book.rotationIs(g.as, { ...rotation, password });
      return rotation.until > now ? { ...plain, retiring } : plain;
    }
    if (r?.made !== "active") return plain;
    if (r.applied !== undefined && r.applied === digestOf(plain)) return plain;
    let begins = r.provision?.password === retiring;
    if (!begins && r.applied === undefined) {
      const holds = adapter.holds.bind(adapter);
      // Where logins alternate, the password being retired is on the login the new one is not.
      const { result } = withTimeout(clock, settings.holdsTimeout, `checking ${g.as}`, (signal) =>
        holds({ ...plain, password: retiring, login: this.#otherLogin(plain) }, signal),
      );
      try {
        begins = await result;
      } catch (err) {
        log.warn(
          `${g.as}: cannot tell whether the backend still takes the password being retired ` +
            `(${report.describe(err, [password, retiring])}); asked again at the next pass`,
        );
        return undefined;
      }
    }
    if (!begins) return plain;
    book.rotationIs(g.as, { phase: "add", since: now, until: now + settings.rotationGrace, password });
    return { ...plain, retiring };
  }

  /** Where logins alternate, the login that is not `p`'s now; otherwise `p`'s own. */
  #otherLogin(p: Provision): string | undefined {
    if (!this.ctx.adapter.alternates) return p.login;
    return (p.login ?? p.as) === p.as ? secondLogin(p.as) : p.as;
  }

  /** The password being retired, from the entry's `retiring` file; undefined when it cannot be read. */
  async #readRetiring(g: Contribution): Promise<string | undefined> {
    if (g.retiring === undefined) return undefined;
    try {
      return await this.ctx.secretsDir.read(g.retiring);
    } catch (err) {
      this.ctx.log.warn(
        `${g.as}: the password being retired cannot be read (${this.ctx.report.describe(err, [])}); ` +
          "the new one is made the only one",
      );
      return undefined;
    }
  }
}

/** What the record says of the consumer, as far as deciding its create goes. */
type Held = Pick<ConsumerRecord, "applied" | "rotation" | "provision" | "made">;

/**
 * The create due for `g` to make the backend hold `p`, and why, given what its record `r` says was
 * applied; undefined when `p` is what was applied.
 */
export function jobFor(
  g: Contribution,
  p: Provision,
  r: Held | undefined,
  now: number,
): CreateJob | undefined {
  const digest = digestOf(p);
  const was = r?.applied;
  if (was === digest) return undefined;
  const rotation = r?.rotation;
  // Only where this process applied another password: a restarted provider re-asserting the
  // same one ends nobody's sessions.
  const cut =
    g.cut === true && r?.provision !== undefined && r.provision.password !== p.password
      ? { endSessions: true as const }
      : {};
  if (p.retiring !== undefined && rotation !== undefined) {
    const why = `password rotated: the new one is made valid beside the old until ${new Date(rotation.until).toISOString()}`;
    return { p, digest, reapplying: 0, action: null, why, rotation: "add" };
  }
  if (p.retiring === undefined && rotation !== undefined) {
    const why =
      rotation.until <= now
        ? "the rotation's grace bound passed: the old password goes"
        : "the password being retired is no longer given: the new one is made the only one";
    return { p, digest, reapplying: 0, action: null, why, rotation: "remove", ...cut };
  }
  if (was !== undefined) {
    return {
      p,
      digest,
      reapplying: 0,
      action: "re-applied",
      why: "password, values or derived changed",
      ...cut,
    };
  }
  if (r?.made === "retired") {
    return { p, digest, reapplying: 0, action: "created", why: "asked for again: re-enabled as it was" };
  }
  if (r?.made === "active") {
    // Made before this process started: applied again to be sure, which changes nothing worth a record.
    return { p, digest, reapplying: 0, action: null, why: "applied again after the provider started" };
  }
  const why = `asked for${g.node ? ` by node ${g.node}` : ""}`;
  return { p, digest, reapplying: 0, action: "created", why };
}
