// The harness (DESIGN §3): `runProvisioner` and the conductor that runs one pass after another.
// A pass is the stages under ./pass/, in order: seed, read, look, create, retire, report. The
// conductor keeps the schedule, the lock, and the tools it hands the board and the book to.

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
import { Mutex } from "./concurrency.ts";
import { ConsumerBook } from "./consumer-book.ts";
import { PROVISIONER_DEFAULTS } from "./defaults.ts";
import { silentObserver, type ProvisionerObserver } from "./metrics.ts";
import type { PassContext, PassKind, Settings } from "./pass/context.ts";
import { CreateStage } from "./pass/create.ts";
import { DrainWakes } from "./pass/drain-wakes.ts";
import { LookStage } from "./pass/look.ts";
import { ReadStage } from "./pass/read.ts";
import { ReportStage } from "./pass/report.ts";
import { RetireStage } from "./pass/retire.ts";
import { SeedStage } from "./pass/seed.ts";
import { UnsavedChanges } from "./pass/unsaved-changes.ts";
import { VerifyStage, type Due } from "./pass/verify.ts";
import { approveRetirement, deleteRetired, StatusBoard, type ToolHost } from "./provisioner-tools.ts";
import { RetirementCounter } from "./retirement.ts";
import { SecretsDirectory } from "./secret-file.ts";
import { Standings } from "./standing.ts";
import type { CleanupEntry, ProvisionerTools, RetireList, StatusReport } from "./tools.ts";
import { FileWatcher, type FileWatch } from "./watcher.ts";

/** What `runProvisioner` is told: the files it reads, its settings (durations in milliseconds), its collaborators. */
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

/**
 * The conductor: runs a pass (the stages in order) under the lock at start, every `every`, when a
 * watched file changes and when a rotation's grace bound passes; then, when one is due, a
 * verification; and hands the tools the board and the book.
 */
class Provisioner implements ProvisionerHandle {
  readonly ready: Promise<void>;
  readonly #ctx: PassContext;
  readonly #lock = new Mutex();
  readonly #board: StatusBoard;
  readonly #host: ToolHost;
  readonly #seed: SeedStage;
  readonly #read: ReadStage;
  readonly #look: LookStage;
  readonly #create: CreateStage;
  readonly #retire: RetireStage;
  readonly #report: ReportStage;
  readonly #verify: VerifyStage;
  #verifiedAt = Number.NEGATIVE_INFINITY;
  #verifying: Promise<void> | undefined;
  #lastPassAt: number | null = null;
  #timer: unknown;
  #watchQueued = false;
  #stopped = false;

  constructor(
    readonly iface: string,
    readonly adapter: GuardedAdapter,
    readonly options: ProvisionerOptions,
    ownBatch: () => number | undefined,
  ) {
    const ctx = passContextOf(iface, adapter, options, {
      changed: (path) => this.#changed(path),
      wake: () => this.#runPass("watch"),
      isStopped: () => this.#stopped,
    });
    this.#ctx = ctx;
    this.#seed = new SeedStage(ctx);
    this.#read = new ReadStage(ctx);
    this.#look = new LookStage(ctx);
    this.#create = new CreateStage(ctx);
    this.#retire = new RetireStage(ctx);
    this.#report = ctx.report;
    this.#verify = new VerifyStage(ctx, {
      lock: this.#lock,
      look: this.#look,
      create: this.#create,
      rebuild: () => this.#rebuild(),
      batchSize: () => options.verifyBatch ?? ownBatch() ?? ctx.settings.verifyBatch,
    });
    this.#host = toolHostOf(ctx, options.serves, {
      retire: (logins, why, who) => this.#retire.retire(logins, why, who),
      rebuild: () => this.#rebuild(),
    });
    this.#board = new StatusBoard(this.#host);
    this.ready = this.#runPass("periodic").then(() => this.#schedule());
  }

  // ---- one pass -----------------------------------------------------------------------------

  /** One pass: the stages in order, each reading the book and changing it through its transitions. */
  async #pass(kind: PassKind): Promise<void> {
    const now = this.#ctx.clock.now();
    await this.#seed.run();
    const asked = await this.#read.run(kind, now);
    if (!asked.ok) {
      // Nothing read is not nobody asking: nothing is applied, nothing retired, the count restarts.
      this.#report.sayProblem(asked.problem);
      this.#retire.restart();
      await this.#finish(now);
      return;
    }
    this.#report.sayProblem(null);
    const creates = await this.#look.run(asked.lookAt, now);
    await this.#create.run(creates);
    // Nothing is retired before the backend's inventory says what this provider made.
    if (this.#seed.seeded) await this.#retire.run(kind, now);
    this.#report.forgetUnasked();
    await this.#finish(now);
  }

  /** The backend finishes the pass's changes, then the board is made again for the tools. */
  async #finish(now: number): Promise<void> {
    await this.#ctx.changes.finish();
    this.#lastPassAt = now;
    await this.#rebuild();
  }

  // ---- scheduling ---------------------------------------------------------------------------

  pass(kind: PassKind = "periodic"): Promise<void> {
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
    this.#ctx.clock.clearTimeout(this.#timer);
    this.#ctx.wakes.stop();
    this.#ctx.watcher?.close();
    await this.#verifying;
    await this.#lock.run(async () => {
      await this.adapter.close?.();
    });
  }

  /** One pass under the lock, then, when one is due, a verification (which takes the lock only to act). */
  async #runPass(kind: PassKind): Promise<void> {
    const { clock, log, metrics, report, settings } = this.#ctx;
    let due: Due[] | undefined;
    await this.#lock.run(async () => {
      if (kind === "watch") this.#watchQueued = false;
      if (this.#stopped) return;
      const started = performance.now();
      const now = clock.now();
      // Who is checked is settled as the pass begins: what it applies now is checked next time.
      if (this.#verifying === undefined && now - this.#verifiedAt >= settings.verifyEvery) {
        this.#verifiedAt = now;
        due = this.#verify.due(now);
      }
      try {
        await this.#pass(kind);
      } catch (err) {
        // A pass that throws is a bug, not a reason to stop serving every consumer.
        log.error(`pass failed unexpectedly, will try again: ${report.describe(err, report.passwords())}`);
      }
      metrics.passed(kind, (performance.now() - started) / 1000);
    });
    if (due === undefined || due.length === 0 || this.#stopped || this.#verifying) return;
    const verifying = this.#verify.run(due).catch((err: unknown) => {
      log.error(`verification failed unexpectedly: ${report.describe(err, report.passwords())}`);
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
    this.#timer = this.#ctx.clock.setTimeout(() => {
      void this.#runPass("periodic").then(() => this.#schedule());
    }, this.#ctx.settings.every);
  }

  /** A watched file changed: it is read at the next pass, which starts at once unless one is queued. */
  #changed(path: string): void {
    // A watcher that reports while the constructor runs, before the stages are made: taken just after.
    if ((this.#read as ReadStage | undefined) === undefined) {
      queueMicrotask(() => this.#changed(path));
      return;
    }
    this.#read.changed(path);
    if (this.#stopped || this.#watchQueued) return;
    this.#watchQueued = true;
    // Changes that arrive together (one burst of file events) make one pass; the first one does not wait.
    setImmediate(() => void this.#runPass("watch"));
  }

  // ---- the board and the tools --------------------------------------------------------------

  #rebuild(): Promise<void> {
    return this.#board.rebuild(this.#host, this.#lastPassAt, this.#ctx.report.problem);
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

/** What the conductor hands the context: its own reactions to a file change and to a wake. */
interface ConductorHooks {
  /** A watched file changed. */
  changed(path: string): void;
  /** Runs a pass now (a rotation's grace bound passed). */
  wake(): Promise<void>;
  isStopped(): boolean;
}

/** The collaborators every stage shares, made from the options (the composition root). */
function passContextOf(
  iface: string,
  adapter: GuardedAdapter,
  options: ProvisionerOptions,
  hooks: ConductorHooks,
): PassContext {
  const settings = settingsOf(options);
  const clock = options.clock ?? systemClock;
  const log = prefixed(
    options.logger ?? consoleLogger,
    `${iface}${settings.instance === "default" ? "" : `/${settings.instance}`}`,
  );
  const metrics = options.metrics ?? silentObserver;
  const standings = new Standings(
    { iface, instance: settings.instance, node: options.node },
    clock,
    options.announcer ?? silentAnnouncer,
    settings,
    (login, run) =>
      log.error(
        `${login}: FAILING for ${Math.round((clock.now() - run.since) / 1000)}s ` +
          `(${run.attempts} attempts, ${run.class}): ${run.text}. Announced as provisioner.failing; ` +
          "`status` names it until it succeeds",
      ),
  );
  const book = new ConsumerBook(
    () => clock.now(),
    (login) => standings.get(login),
  );
  const receives = options.receives;
  const report = new ReportStage({
    iface,
    receives,
    adapter,
    clock,
    log,
    metrics,
    actions: options.actions ?? discardActions,
    book,
    standings,
    secrets: options.secrets ?? [],
  });
  let watcher: FileWatch | undefined;
  if (options.watch !== false) {
    const onChange = (path: string): void => hooks.changed(path);
    watcher = options.watcher?.(onChange) ?? new FileWatcher(onChange);
  }
  watcher?.watchFiles([receives]);
  return {
    iface,
    receives,
    settings,
    adapter,
    clock,
    log,
    metrics,
    book,
    standings,
    retirement: new RetirementCounter(settings),
    secretsDir: new SecretsDirectory(options.secretsDir ?? dirname(receives)),
    watcher,
    report,
    changes: new UnsavedChanges({ adapter, clock, timeout: settings.createTimeout, book, log, report }),
    wakes: new DrainWakes(clock, book, hooks.wake, hooks.isStopped),
    isStopped: hooks.isStopped,
  };
}

/** What the tools are handed: the book and its collaborators, and the retiring and rebuilding they may ask for. */
function toolHostOf(
  ctx: PassContext,
  serves: ProvisionerOptions["serves"],
  acts: Pick<ToolHost, "retire" | "rebuild">,
): ToolHost {
  const { report, changes, settings } = ctx;
  return {
    iface: ctx.iface,
    instance: settings.instance,
    receives: ctx.receives,
    stablePasses: settings.stablePasses,
    book: ctx.book,
    standings: ctx.standings,
    retirement: ctx.retirement,
    adapter: ctx.adapter,
    ...(serves === undefined ? {} : { serves }),
    log: ctx.log,
    metrics: ctx.metrics,
    record: (entry) => report.record(entry),
    describe: (err) => report.describe(err, []),
    retire: acts.retire,
    rebuild: acts.rebuild,
    afterChanges: (changed) => {
      if (changed) changes.changed();
      return changes.finish();
    },
  };
}

function settingsOf(options: ProvisionerOptions): Settings {
  const s = { ...PROVISIONER_DEFAULTS } as Settings;
  for (const key of Object.keys(PROVISIONER_DEFAULTS) as (keyof Settings)[]) {
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
