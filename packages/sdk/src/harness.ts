import { dirname } from "node:path";
import type { ProviderAdapter } from "./adapter.ts";
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
import { forEachLimited, Mutex } from "./concurrency.ts";
import { ConsumerBook } from "./consumer-book.ts";
import { PROVISIONER_DEFAULTS } from "./defaults.ts";
import { silentObserver, type ProvisionerObserver } from "./metrics.ts";
import type { PassContext, Settings } from "./pass/context.ts";
import { CreateStage } from "./pass/create.ts";
import { DrainWakes } from "./pass/drain-wakes.ts";
import { LookStage } from "./pass/look.ts";
import { ReadStage } from "./pass/read.ts";
import { ReportStage } from "./pass/report.ts";
import { SeedStage } from "./pass/seed.ts";
import { UnsavedChanges } from "./pass/unsaved-changes.ts";
import { VerifyStage, type Due } from "./pass/verify.ts";
import { approveRetirement, deleteRetired, StatusBoard, type ToolHost } from "./provisioner-tools.ts";
import { RetirementCounter } from "./retirement.ts";
import { SecretsDirectory } from "./secret-file.ts";
import { Standings } from "./standing.ts";
import { type CleanupEntry, type ProvisionerTools, type RetireList, type StatusReport } from "./tools.ts";
import { FileWatcher, type FileWatch } from "./watcher.ts";

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

class Provisioner implements ProvisionerHandle {
  readonly ready: Promise<void>;
  readonly #s: Settings;
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
  readonly #verify: VerifyStage;
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
    this.#verify = new VerifyStage(this.#ctx, {
      lock: this.#lock,
      look: this.#look,
      create: this.#create,
      rebuild: () => this.#rebuild(),
      batchSize: () => options.verifyBatch ?? ownBatch() ?? this.#s.verifyBatch,
    });
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
        due = this.#verify.due(now);
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
    const verifying = this.#verify.run(due).catch((err: unknown) => {
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
