import { dirname } from "node:path";
import type { Provision, ProviderAdapter } from "./adapter.ts";
import { guardAdapter, type GuardedAdapter } from "./adapter-guard.ts";
import { assertInstance } from "./admin-settings.ts";
import {
  consoleLogger,
  discardActions,
  silentAnnouncer,
  systemClock,
  type ActionLog,
  type Announcer,
  type Clock,
  type Logger,
} from "./collaborators.ts";
import { forEachLimited, Mutex, TimeoutError, withTimeout } from "./concurrency.ts";
import { ConsumerBook } from "./consumer-book.ts";
import type { Contribution } from "./contributions-file.ts";
import { PROVISIONER_DEFAULTS } from "./defaults.ts";
import { isValidLogin } from "./login.ts";
import { silentObserver, type ProvisionerObserver } from "./metrics.ts";
import type { PassContext, Settings } from "./pass/context.ts";
import { CreateStage, type CreateJob } from "./pass/create.ts";
import { DrainWakes } from "./pass/drain-wakes.ts";
import { LookStage } from "./pass/look.ts";
import { digestOf, provisionOf } from "./pass/provision.ts";
import { ReadStage } from "./pass/read.ts";
import { ReportStage } from "./pass/report.ts";
import { SeedStage } from "./pass/seed.ts";
import { UnsavedChanges } from "./pass/unsaved-changes.ts";
import { approveRetirement, deleteRetired, StatusBoard, type ToolHost } from "./provisioner-tools.ts";
import { RetirementCounter } from "./retirement.ts";
import { SecretsDirectory } from "./secret-file.ts";
import { Standings } from "./standing.ts";
import { type CleanupEntry, type ProvisionerTools, type RetireList, type StatusReport } from "./tools.ts";
import { FileWatcher, type FileWatch } from "./watcher.ts";

/** Settings of one provisioner loop; every duration is in milliseconds. */
/**
 * How many of a verify batch's answers are judged under the lock at a time (see `#verify`): a
 * change waits behind at most this many (and their re-applies, when the backend lost some).
 */
const JUDGED_AT_ONCE = 256;

export interface ProvisionerOptions {
  /** The contributions file the mesh writes for this interface. */
  readonly receives: string;
  /**
   * The directory consumers' secrets are read from: a secret is read only when it is a regular file
   * of at most 4 KiB under it (see `SecretsDirectory`). Default: the contributions file's directory.
   */
  readonly secretsDir?: string;
  /** Names this provider in the marks it writes and the messages it says. Default "default". */
  readonly instance?: string;
  /** The node this provider runs on, said in standings. */
  readonly node?: string;
  /** Periodic pass interval (5 s). */
  readonly every?: number;
  /** How often each consumer is verified with `holds` (60 s). */
  readonly verifyEvery?: number;
  /** How long one `holds` may take (30 s); a timeout skips the rest of that pass's checks. */
  readonly holdsTimeout?: number;
  /** How long one `create` may take before it is counted a failure (60 s). */
  readonly createTimeout?: number;
  /** How long a consumer fails without a success before `provisioner.failing` (5 min). */
  readonly failingAfter?: number;
  /** How often that is announced again while it lasts (15 min). */
  readonly sayAgainEvery?: number;
  /** Consecutive periodic passes that must see the same unasked set before it is retired (5). */
  readonly stablePasses?: number;
  /** More than this many at once waits for a person (3). */
  readonly retireAtOnce?: number;
  /** Where more than one is held, a larger share than this waits for a person (0.5). */
  readonly retireFraction?: number;
  /**
   * How long a rotated-out password stays valid beside the new one (2 min), for an adapter that can
   * hold both (`overlap`): the apps holding it have that long to move.
   */
  readonly rotationGrace?: number;
  /**
   * Where this provider serves its consumers (its admin URL's host and port), said in `status` so
   * that consumers of a provider with no `endpoint:` in the fleet are given it. None: not said.
   */
  readonly serves?: { readonly host: string; readonly port: number } | undefined;
  /** The longest the re-apply brake waits (1 h). */
  readonly maxBrake?: number;
  /** How many creates or checks run at once (8). */
  readonly concurrency?: number;
  /**
   * How many consumers one batched check (`holdsMany`) covers; each batch has its own timeout.
   * Default: the adapter's own `verifyBatch` when it has one, else 100.
   */
  readonly verifyBatch?: number;
  /**
   * Watch the contributions file's directory and the secret files (true): a pass then reads only
   * what changed, and every secret once per `verifyEvery`. Unwatched, every pass reads everything.
   */
  readonly watch?: boolean;
  /** What reports file changes instead of a `FileWatcher` (for tests that lose a change on purpose). */
  readonly watcher?: (onChange: (path: string) => void) => FileWatch;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly announcer?: Announcer;
  readonly actions?: ActionLog;
  /** Told of passes, creates, failures, verifications, retirements and deletions, to count them. */
  readonly metrics?: ProvisionerObserver;
  /**
   * The provider's own secrets (its admin URL's password): scrubbed, like every consumer's password,
   * from each error text it logs, announces, reports or answers a tool with.
   */
  readonly secrets?: readonly string[];
}

/** A running provisioner: its tools, a way to run a pass now, and `stop()`. */
export interface ProvisionerHandle extends ProvisionerTools {
  /** Resolves when the first pass (after reading the inventory) has finished. */
  readonly ready: Promise<void>;
  /**
   * Runs one pass now and resolves when it is done. `periodic` passes advance the retirement count;
   * `watch` passes (what a file change sets off) never do.
   */
  pass(kind?: "periodic" | "watch"): Promise<void>;
  /** Resolves once every pass and tool already asked for has finished. */
  idle(): Promise<void>;
  /** Stops the loop and the watchers, waits for a running pass, closes the adapter. */
  stop(): Promise<void>;
}

/**
 * Runs the reconcile loop for one provided interface (DESIGN §3) until `stop()`: the first pass
 * starts at once, then one every `every`, and one more whenever a watched file changes.
 */
export function runProvisioner(
  iface: string,
  adapter: ProviderAdapter,
  options: ProvisionerOptions,
): ProvisionerHandle {
  const guarded = guardAdapter(adapter, {
    instance: options.instance ?? PROVISIONER_DEFAULTS.instance,
    logger: options.logger,
  });
  // Read when each verification starts: an adapter says how many consumers one `holdsMany` covers.
  const ownBatch = (): number | undefined => {
    const size = (adapter as { verifyBatch?: unknown }).verifyBatch;
    return typeof size === "number" && size >= 1 ? Math.floor(size) : undefined;
  };
  return new Provisioner(iface, guarded, options, ownBatch);
}

const DEFAULTS = PROVISIONER_DEFAULTS;

/** One consumer due to be checked, with its record's generation when that was decided. */
interface Due {
  readonly g: Contribution;
  readonly generation: number;
}

/** One consumer a verification checks, with its record's generation when the check began. */
interface Check {
  readonly p: Provision;
  readonly digest: string;
  readonly generation: number;
}

class Provisioner implements ProvisionerHandle {
  readonly ready: Promise<void>;
  readonly #s: Settings;
  readonly #ownBatch: () => number | undefined;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #metrics: ProvisionerObserver;
  readonly #lock = new Mutex();
  readonly #retirement: RetirementCounter;
  readonly #standings: Standings;
  readonly #book: ConsumerBook;
  readonly #report: ReportStage;
  readonly #board: StatusBoard;
  readonly #host: ToolHost;
  readonly #ctx: PassContext;
  readonly #seed: SeedStage;
  readonly #read: ReadStage;
  readonly #look: LookStage;
  readonly #create: CreateStage;
  readonly #watcher: FileWatch | undefined;
  readonly #secretsDir: SecretsDirectory;

  #verifiedAt = Number.NEGATIVE_INFINITY;
  #verifying: Promise<void> | undefined;
  #lastPassAt: number | null = null;
  #waitingId: string | undefined;
  #counted = 0;
  #timer: unknown;
  #watchQueued = false;
  #stopped = false;

  constructor(
    readonly iface: string,
    readonly adapter: GuardedAdapter,
    readonly options: ProvisionerOptions,
    ownBatch: () => number | undefined,
  ) {
    this.#s = settingsOf(options);
    this.#ownBatch = ownBatch;
    this.#clock = options.clock ?? systemClock;
    this.#log = prefixed(
      options.logger ?? consoleLogger,
      `${iface}${this.#s.instance === "default" ? "" : `/${this.#s.instance}`}`,
    );
    this.#metrics = options.metrics ?? silentObserver;
    this.#retirement = new RetirementCounter(this.#s);
    this.#standings = new Standings(
      { iface, instance: this.#s.instance, node: options.node },
      this.#clock,
      options.announcer ?? silentAnnouncer,
      this.#s,
      (login, run) =>
        this.#log.error(
          `${login}: FAILING for ${Math.round((this.#clock.now() - run.since) / 1000)}s ` +
            `(${run.attempts} attempts, ${run.class}): ${run.text}. Announced as provisioner.failing; ` +
            "`status` names it until it succeeds",
        ),
    );
    this.#book = new ConsumerBook(
      () => this.#clock.now(),
      (login) => this.#standings.get(login),
    );
    this.#report = new ReportStage({
      iface,
      receives: options.receives,
      adapter,
      clock: this.#clock,
      log: this.#log,
      metrics: this.#metrics,
      actions: options.actions ?? discardActions,
      book: this.#book,
      standings: this.#standings,
      secrets: options.secrets ?? [],
    });
    this.#host = {
      iface,
      instance: this.#s.instance,
      receives: options.receives,
      stablePasses: this.#s.stablePasses,
      book: this.#book,
      standings: this.#standings,
      retirement: this.#retirement,
      adapter,
      ...(options.serves === undefined ? {} : { serves: options.serves }),
      log: this.#log,
      metrics: this.#metrics,
      record: (entry) => this.#report.record(entry),
      describe: (err) => this.#report.describe(err, []),
      retire: (logins, why, who) => this.#retire(logins, why, who),
      rebuild: () => this.#rebuild(),
      afterChanges: (changed) => {
        if (changed) this.#ctx.changes.changed();
        return this.#ctx.changes.finish();
      },
    };
    this.#board = new StatusBoard(this.#host);
    this.#secretsDir = new SecretsDirectory(options.secretsDir ?? dirname(options.receives));
    if (options.watch !== false) {
      const onChange = (path: string): void => this.#changed(path);
      this.#watcher = options.watcher?.(onChange) ?? new FileWatcher(onChange);
    }
    this.#watcher?.watchFiles([options.receives]);
    this.#ctx = {
      iface,
      receives: options.receives,
      settings: this.#s,
      adapter,
      clock: this.#clock,
      log: this.#log,
      metrics: this.#metrics,
      book: this.#book,
      standings: this.#standings,
      retirement: this.#retirement,
      secretsDir: this.#secretsDir,
      watcher: this.#watcher,
      report: this.#report,
      changes: new UnsavedChanges({
        adapter,
        clock: this.#clock,
        timeout: this.#s.createTimeout,
        book: this.#book,
        log: this.#log,
        report: this.#report,
      }),
      wakes: new DrainWakes(
        this.#clock,
        this.#book,
        () => this.#runPass("watch"),
        () => this.#stopped,
      ),
      isStopped: () => this.#stopped,
    };
    this.#seed = new SeedStage(this.#ctx);
    this.#read = new ReadStage(this.#ctx);
    this.#look = new LookStage(this.#ctx);
    this.#create = new CreateStage(this.#ctx);
    this.ready = this.#runPass("periodic").then(() => this.#schedule());
  }

  pass(kind: "periodic" | "watch" = "periodic"): Promise<void> {
    return this.#runPass(kind);
  }

  async idle(): Promise<void> {
    for (;;) {
      await this.#lock.run(async () => {});
      const verifying = this.#verifying;
      if (verifying === undefined) return;
      await verifying;
    }
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#clock.clearTimeout(this.#timer);
    this.#ctx.wakes.stop();
    this.#watcher?.close();
    await this.#verifying;
    await this.#lock.run(async () => {
      await this.adapter.close?.();
    });
  }

  // ---- scheduling ---------------------------------------------------------------------------

  /** One pass under the lock, then, when one is due, a verification (which takes the lock only to act). */
  async #runPass(kind: "periodic" | "watch"): Promise<void> {
    let due: Due[] | undefined;
    await this.#lock.run(async () => {
      if (kind === "watch") this.#watchQueued = false;
      if (this.#stopped) return;
      const started = performance.now();
      const now = this.#clock.now();
      // Who is checked is settled as the pass begins: what it applies now is checked next time.
      if (this.#verifying === undefined && now - this.#verifiedAt >= this.#s.verifyEvery) {
        this.#verifiedAt = now;
        due = this.#dueForCheck(now);
      }
      try {
        await this.#pass(kind);
      } catch (err) {
        // A pass that throws is a bug, not a reason to stop serving every consumer.
        this.#log.error(
          `pass failed unexpectedly, will try again: ${this.#report.describe(err, this.#report.passwords())}`,
        );
      }
      this.#metrics.passed(kind, (performance.now() - started) / 1000);
    });
    if (due === undefined || due.length === 0 || this.#stopped || this.#verifying) return;
    const verifying = this.#verify(due).catch((err: unknown) => {
      this.#log.error(
        `verification failed unexpectedly: ${this.#report.describe(err, this.#report.passwords())}`,
      );
    });
    this.#verifying = verifying;
    try {
      await verifying;
    } finally {
      this.#verifying = undefined;
    }
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = this.#clock.setTimeout(() => {
      void this.#runPass("periodic").then(() => this.#schedule());
    }, this.#s.every);
  }

  /** A watched file changed: it is read at the next pass, which starts at once unless one is queued. */
  #changed(path: string): void {
    this.#read.changed(path);
    if (this.#stopped || this.#watchQueued) return;
    this.#watchQueued = true;
    // Changes that arrive together (one burst of file events) make one pass; the first one does not wait.
    setImmediate(() => void this.#runPass("watch"));
  }

  // ---- the pass -----------------------------------------------------------------------------

  async #pass(kind: "periodic" | "watch"): Promise<void> {
    const now = this.#clock.now();
    await this.#seed.run();
    const asked = await this.#read.run(kind, now);
    if (!asked.ok) {
      // Nothing read is not nobody asking: nothing is applied, nothing retired, the count restarts.
      this.#report.sayProblem(asked.problem);
      this.#retirement.reset();
      this.#followRetirement();
      await this.#finishPass(now);
      return;
    }
    this.#report.sayProblem(null);
    const creates = await this.#look.run(asked.lookAt, now);
    await this.#create.run(creates);

    if (this.#seed.seeded) await this.#retireUnasked(kind, now);
    this.#report.forgetUnasked();
    await this.#finishPass(now);
  }

  // ---- verification -------------------------------------------------------------------------

  /**
   * Verifies every consumer applied as asked (DESIGN §3 rule 4), a batch at a time. Each secret is
   * read again (the safety net for a change the watcher missed) and each backend check is asked
   * outside the lock, so a change that arrives meanwhile is applied at once; the lock is taken only
   * to act on a slice of a batch's answers at a time (`JUDGED_AT_ONCE`), so a change waits behind
   * one slice at most, and an answer for a consumer that changed since its check began (applied,
   * retired, deleted, asked differently) is dropped.
   */
  /** Every consumer applied as asked and not held back by its brake: what a verification checks. */
  #dueForCheck(now: number): Due[] {
    const due: Due[] = [];
    for (const r of this.#book.records()) {
      if (r.asked === undefined || r.applied === undefined || r.inFlight) continue;
      // An entry that cannot be served fails alone at every pass; what it had is left as it was.
      if (r.asked.refused !== undefined || !isValidLogin(r.login)) continue;
      if (this.#book.isBraked(r.login, now)) continue;
      due.push({ g: r.asked, generation: r.generation });
    }
    return due;
  }

  async #verify(due: readonly Due[]): Promise<void> {
    const size = this.options.verifyBatch ?? this.#ownBatch() ?? this.#s.verifyBatch;
    this.#secretsDir.refresh();
    for (let at = 0; at < due.length && !this.#stopped; at += size) {
      const batch = due.slice(at, at + size);
      const checks: Check[] = [];
      const changed: Contribution[] = [];
      await forEachLimited(batch, 64, async ({ g, generation }) => {
        let password: string;
        try {
          password = await this.#secretsDir.read(g.secret);
        } catch {
          changed.push(g);
          return;
        }
        const r = this.#book.get(g.as);
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
      for (let from = 0; from < checks.length && !this.#stopped; from += JUDGED_AT_ONCE) {
        const slice = checks.slice(from, from + JUDGED_AT_ONCE);
        await this.#lock.run(async () => {
          if (this.#stopped) return;
          await this.#create.run(this.#judge(slice, answers));
        });
      }
      await this.#lock.run(async () => {
        if (this.#stopped) return;
        // A secret that changed without a word from the watcher: looked at as a pass would.
        const stillAsked = changed.filter((g) => this.#book.get(g.as)?.asked === g);
        if (stillAsked.length > 0)
          await this.#create.run(await this.#look.look(stillAsked, this.#clock.now()));
        // What this batch applied is finished now, as a pass's changes are, not at the next pass.
        await this.#ctx.changes.finish();
        await this.#rebuild();
      });
      // A backend that timed out will time out for the next batch too: the rest wait a pass.
      if (timedOut) break;
    }
  }

  // Which of these logins the backend shows connected, when the adapter can tell: an app that
  // never connects (pointed at another server, misconfigured, never started) is said so. A look
  // that fails or times out is no evidence: nothing is marked.
  async #lookForSessions(logins: readonly string[]): Promise<void> {
    if (!this.adapter.seesSessions || logins.length === 0) return;
    try {
      const { result } = withTimeout(this.#clock, this.#s.holdsTimeout, "looking for sessions", (signal) =>
        this.adapter.seenConnected(logins, signal),
      );
      this.#book.sawSessions(logins, await result);
    } catch {
      // Unable to look is not "never connected".
    }
  }

  /** Asks the backend whether it holds these (read-only, outside the lock). */
  async #ask(
    checks: readonly Check[],
  ): Promise<{ answers: Map<string, boolean | Error>; timedOut: boolean }> {
    const answers = new Map<string, boolean | Error>();
    let timedOut = false;
    if (checks.length === 0) return { answers, timedOut };
    if (this.adapter.batched) {
      const many = this.adapter.holdsMany.bind(this.adapter);
      const batch = checks.map((c) => c.p);
      this.#metrics.roundTrip(batch.length);
      const { result } = withTimeout(this.#clock, this.#s.holdsTimeout, "verifying", (signal) =>
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
    const holds = this.adapter.holds.bind(this.adapter);
    await forEachLimited(checks, this.#s.concurrency, async (c) => {
      if (timedOut) return;
      this.#metrics.roundTrip(1);
      const { result } = withTimeout(this.#clock, this.#s.holdsTimeout, `checking ${c.p.as}`, (signal) =>
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
    const reapply: CreateJob[] = [];
    for (const c of checks) {
      const answer = answers.get(c.p.as);
      if (answer === undefined) continue; // not asked this pass
      // Changed while it was checked: the answer is about what was, and nothing is done on it.
      if (this.#book.get(c.p.as)?.generation !== c.generation) continue;
      if (answer instanceof Error) {
        // Unable to ask is not evidence of loss: nothing is re-applied on it.
        const text = this.#report.describe(answer, [c.p.password]);
        const cls = this.#report.classify(answer, text);
        this.#metrics.verified("unknown");
        this.#metrics.failed("verify", cls);
        this.#report.fail(c.p.as, c.p.node, cls, `could not check: ${text}`);
        continue;
      }
      this.#metrics.verified(answer ? "held" : "not-held");
      if (answer) {
        this.#book.held(c.p.as);
        this.#report.succeed(c.p.as);
        continue;
      }
      const times = this.#book.notHeld(c.p.as);
      if (times === 1) this.#log.warn(`${c.p.as}: the backend no longer holds it; applying again`);
      else {
        this.#log.warn(
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

  // ---- retiring ----------------------------------------------------------------------------

  async #retireUnasked(kind: "periodic" | "watch", now: number): Promise<void> {
    const unasked: string[] = [];
    let held = 0;
    for (const r of this.#book.records()) {
      if (r.made !== "active") continue;
      held++;
      if (r.asked === undefined) unasked.push(r.login);
    }
    const step = this.#retirement.observe(unasked, held, kind === "periodic", now);
    if (step.kind === "retire") {
      const why = `no longer asked for in ${this.options.receives} for ${this.#s.stablePasses} consecutive passes`;
      await this.#retire(step.logins, why, "provisioner");
    } else if (step.kind === "wait" && step.isNew) {
      const w = step.waiting;
      this.#log.warn(
        `${w.logins.length} consumer(s) no longer asked for (${w.logins.join(", ")}); ${w.reason}, so the ` +
          `retirement waits for a person: \`mesh tool retire approve ${w.id}\` retires them, asking for them again cancels it`,
      );
    }
    // What status says of the unasked names the count.
    if (this.#retirement.count !== this.#counted) {
      this.#counted = this.#retirement.count;
      for (const login of unasked) this.#book.touch(login);
    }
    this.#followRetirement();
  }

  /** Marks the set waiting for a person (if any) in the book, when it changed. */
  #followRetirement(): void {
    const waiting = this.#retirement.waiting;
    if (waiting?.id === this.#waitingId) return;
    this.#waitingId = waiting?.id;
    this.#book.awaiting(waiting?.logins ?? []);
  }

  async #retire(logins: readonly string[], why: string, who: string): Promise<string[]> {
    const done: string[] = [];
    await forEachLimited(logins, this.#s.concurrency, async (login) => {
      const r = this.#book.get(login);
      if (!r || r.made !== "active") return;
      const at = this.#clock.now();
      try {
        await this.adapter.retire(login, r.derived, why, new Date(at));
      } catch (err) {
        this.#log.error(
          `${login}: could not retire, will try again: ${this.#report.describe(err, this.#report.passwords())}`,
        );
        return;
      }
      this.#standings.clear(login, "retired");
      this.#book.retired(login, at, why);
      this.#ctx.changes.changed();
      this.#log.info(`${login}: retired (access disabled, data kept, marked to delete): ${why}`);
      this.#report.record({ action: "retired", login, who, why });
      this.#metrics.retired(who === "provisioner" ? "provisioner" : "approval");
      done.push(login);
    });
    this.#retirement.reset();
    this.#followRetirement();
    return done.sort();
  }

  // ---- the board and the tools --------------------------------------------------------------

  async #finishPass(now: number): Promise<void> {
    await this.#ctx.changes.finish();
    this.#lastPassAt = now;
    await this.#rebuild();
  }

  #rebuild(): Promise<void> {
    return this.#board.rebuild(this.#host, this.#lastPassAt, this.#report.problem);
  }

  status(): StatusReport {
    return this.#board.status;
  }

  retireList(): RetireList {
    return this.#board.retireList(this.#host);
  }

  cleanupList(): readonly CleanupEntry[] {
    return this.#board.cleanupList;
  }

  retireApprove(id?: string, who = "operator"): Promise<{ id: string; retired: string[] }> {
    return this.#lock.run(() => approveRetirement(this.#host, id, who));
  }

  cleanupDelete(login: string, who = "operator"): Promise<{ login: string; freedBytes: number }> {
    return this.#lock.run(() => deleteRetired(this.#host, login, who));
  }
}

function settingsOf(options: ProvisionerOptions): Settings {
  const s = { ...DEFAULTS } as Settings;
  for (const key of Object.keys(DEFAULTS) as (keyof Settings)[]) {
    const value = options[key];
    if (value === undefined) continue;
    if (key === "instance") {
      s.instance = assertInstance(value);
      continue;
    }
    if (typeof value !== "number" || !(value > 0)) {
      throw new TypeError(`${key} must be a positive number, not ${String(value)}`);
    }
    (s as Record<string, unknown>)[key] = value;
  }
  return s;
}

function prefixed(logger: Logger, prefix: string): Logger {
  return {
    info: (m) => logger.info(`[${prefix}] ${m}`),
    warn: (m) => logger.warn(`[${prefix}] ${m}`),
    error: (m) => logger.error(`[${prefix}] ${m}`),
  };
}
