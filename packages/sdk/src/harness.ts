import { createHash } from "node:crypto";
import { dirname } from "node:path";
import type { FailureClass, Provision, ProviderAdapter } from "./adapter.ts";
import { guardAdapter, type GuardedAdapter } from "./adapter-guard.ts";
import { assertInstance } from "./admin-settings.ts";
import { rememberJson } from "./cached-json.ts";
import {
  consoleLogger,
  discardActions,
  silentAnnouncer,
  systemClock,
  type ActionEntry,
  type ActionLog,
  type Announcer,
  type Clock,
  type Logger,
} from "./collaborators.ts";
import {
  forEachLimited,
  Mutex,
  TimeoutError,
  withTimeout,
  YieldTimer,
  yieldToEventLoop,
} from "./concurrency.ts";
import { readContributions, type Contribution } from "./contributions-file.ts";
import { InvalidLoginError, isValidLogin } from "./login.ts";
import { silentObserver, type ProvisionerObserver } from "./metrics.ts";
import { DEFAULT_RETIREMENT_LIMITS, RetirementCounter } from "./retirement.ts";
import { isRefusal } from "./refusals.ts";
import { classOf, describeError } from "./scrub.ts";
import { SecretsDirectory, SecretUnreadableError } from "./secret-file.ts";
import { Standings } from "./standing.ts";
import {
  passwordTag,
  ToolError,
  type CleanupEntry,
  type ConsumerState,
  type ConsumerStatus,
  type ProvisionerTools,
  type RetireList,
  type StatusReport,
} from "./tools.ts";
import { FileWatcher } from "./watcher.ts";

/** Settings of one provisioner loop; every duration is in milliseconds. */
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
  /** The longest the re-apply brake waits (1 h). */
  readonly maxBrake?: number;
  /** How many creates or checks run at once (8). */
  readonly concurrency?: number;
  /** How many consumers one batched check (`holdsMany`) covers; each batch has its own timeout (100). */
  readonly verifyBatch?: number;
  /** Watch the contributions file's directory and the secret files (true). */
  readonly watch?: boolean;
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
    instance: options.instance ?? DEFAULTS.instance,
    logger: options.logger,
  });
  return new Provisioner(iface, guarded, options);
}

const DEFAULTS = {
  instance: "default",
  every: 5_000,
  verifyEvery: 60_000,
  holdsTimeout: 30_000,
  createTimeout: 60_000,
  failingAfter: 5 * 60_000,
  sayAgainEvery: 15 * 60_000,
  ...DEFAULT_RETIREMENT_LIMITS,
  maxBrake: 60 * 60_000,
  concurrency: 8,
  verifyBatch: 100,
} as const;

/** How long a missing secret is a race before it is said loudly, and how often after. */
const SECRET_PATIENCE = 60_000;
const SECRET_SAY_AGAIN = 20 * 60_000;
/** A create failing the same way is said again only this often (in attempts). */
const SAY_AGAIN_ATTEMPTS = 240;
/** File changes closer together than this make one pass. */
const WATCH_SETTLE = 15;

type Settings = Omit<
  { -readonly [K in keyof typeof DEFAULTS]: (typeof DEFAULTS)[K] extends number ? number : string },
  never
>;

/** A consumer this provider made, as the backend and this process know it. */
interface Known {
  state: "active" | "retired";
  derived: Readonly<Record<string, unknown>>;
  retiredAt?: number | undefined;
  why?: string | undefined;
}

interface CreateJob {
  readonly p: Provision;
  readonly digest: string;
  /** How many times in a row it has been found not held and applied again (0: not a re-apply). */
  readonly reapplying: number;
  /** What the action log records when it succeeds; null for re-asserting what the backend had. */
  readonly action: "created" | "re-applied" | null;
  readonly why: string;
}

class Provisioner implements ProvisionerHandle {
  readonly ready: Promise<void>;
  readonly #s: Settings;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #actions: ActionLog;
  readonly #metrics: ProvisionerObserver;
  readonly #secrets: readonly string[];
  readonly #lock = new Mutex();
  readonly #retirement: RetirementCounter;
  readonly #standings: Standings;
  readonly #watcher: FileWatcher | undefined;
  readonly #secretsDir: SecretsDirectory;

  /** What this provider made: seeded from the backend's marks, then kept as it acts. */
  readonly #known = new Map<string, Known>();
  /** Digest of what was last applied (or found held) per login, in this process. */
  readonly #applied = new Map<string, string>();
  /** `passwordTag` of the password last applied per login, in this process: what `status` names. */
  readonly #appliedTags = new Map<string, string>();
  readonly #brakes = new Map<string, { times: number; nextAt: number }>();
  readonly #createFailures = new Map<string, { text: string; times: number }>();
  readonly #secretMisses = new Map<string, { since: number; loudAt: number | undefined }>();
  /** Creates that timed out but have not finished: not started again until they do. */
  readonly #inFlight = new Set<string>();
  readonly #stateSince = new Map<string, { state: ConsumerState; since: number }>();
  /** Logins created or re-applied since the adapter's `afterChanges` last succeeded. */
  readonly #unsaved = new Set<string>();
  /** Whether anything changed in the backend since `afterChanges` last succeeded. */
  #changesUnsaved = false;

  #asked = new Map<string, Contribution>();
  #lastPasswords: string[] = [];
  #seeded = false;
  #seedProblem: string | undefined;
  #problem: string | null = null;
  #verifiedAt = Number.NEGATIVE_INFINITY;
  #lastPassAt: number | null = null;
  #snapshot: StatusReport;
  /** What `cleanup list` and `retire list` answer, made with the snapshot, so no request walks every consumer. */
  #cleanupList: readonly CleanupEntry[] = [];
  #retireList: RetireList | undefined;
  #timer: unknown;
  #watchTimer: unknown;
  #watchQueued = false;
  #stopped = false;

  constructor(
    readonly iface: string,
    readonly adapter: GuardedAdapter,
    readonly options: ProvisionerOptions,
  ) {
    this.#s = settingsOf(options);
    this.#clock = options.clock ?? systemClock;
    this.#log = prefixed(
      options.logger ?? consoleLogger,
      `${iface}${this.#s.instance === "default" ? "" : `/${this.#s.instance}`}`,
    );
    this.#actions = options.actions ?? discardActions;
    this.#metrics = options.metrics ?? silentObserver;
    this.#secrets = options.secrets ?? [];
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
    this.#secretsDir = new SecretsDirectory(options.secretsDir ?? dirname(options.receives));
    this.#snapshot = this.#emptySnapshot();
    if (options.watch !== false) this.#watcher = new FileWatcher(() => this.#poke());
    this.#watcher?.watchFiles([options.receives]);
    this.ready = this.#runPass("periodic").then(() => this.#schedule());
  }

  pass(kind: "periodic" | "watch" = "periodic"): Promise<void> {
    return this.#runPass(kind);
  }

  idle(): Promise<void> {
    return this.#lock.run(async () => {});
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#clock.clearTimeout(this.#timer);
    this.#clock.clearTimeout(this.#watchTimer);
    this.#watcher?.close();
    await this.#lock.run(async () => {
      await this.adapter.close?.();
    });
  }

  // ---- scheduling ---------------------------------------------------------------------------

  #runPass(kind: "periodic" | "watch"): Promise<void> {
    return this.#lock.run(async () => {
      if (this.#stopped) return;
      const started = performance.now();
      try {
        await this.#pass(kind);
      } catch (err) {
        // A pass that throws is a bug, not a reason to stop serving every consumer.
        this.#log.error(
          `pass failed unexpectedly, will try again: ${this.#describe(err, this.#passwords())}`,
        );
      }
      this.#metrics.passed(kind, (performance.now() - started) / 1000);
    });
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#timer = this.#clock.setTimeout(() => {
      void this.#runPass("periodic").then(() => this.#schedule());
    }, this.#s.every);
  }

  /** A watched file changed: one pass soon, however many changes arrive together. */
  #poke(): void {
    if (this.#stopped || this.#watchQueued) return;
    this.#watchQueued = true;
    this.#watchTimer = this.#clock.setTimeout(() => {
      this.#watchQueued = false;
      void this.#runPass("watch");
    }, WATCH_SETTLE);
  }

  // ---- the pass -----------------------------------------------------------------------------

  async #pass(kind: "periodic" | "watch"): Promise<void> {
    const now = this.#clock.now();
    await this.#seed();
    const read = await readContributions(this.options.receives, this.iface);
    if (!read.ok) {
      // Nothing read is not nobody asking: nothing is applied, nothing retired, the count restarts.
      this.#sayProblem(read.problem);
      this.#retirement.reset();
      await this.#finishPass(now);
      return;
    }
    this.#sayProblem(null);
    this.#asked = new Map(read.given.map((g) => [g.as, g]));
    // Only secrets that can be read are watched: an entry naming /etc/shadow or /dev/zero sets no
    // watch on /etc or /dev.
    this.#watcher?.watchFiles([
      this.options.receives,
      ...read.given.map((g) => g.secret).filter((secret) => this.#secretsDir.mayHold(secret)),
    ]);

    const verifying = now - this.#verifiedAt >= this.#s.verifyEvery;
    if (verifying) this.#verifiedAt = now;

    const creates: CreateJob[] = [];
    const passwords: string[] = [];
    const checks: { p: Provision; digest: string }[] = [];
    // Resolved again each pass: a secrets directory replaced since the last one is judged as it is now.
    this.#secretsDir.refresh();
    await forEachLimited(read.given, 64, async (g) => {
      if (!isValidLogin(g.as)) {
        this.#metrics.failed("validate", "refused");
        this.#standings.failed(g.as, g.node, "refused", new InvalidLoginError(g.as).message);
        return;
      }
      if (g.refused !== undefined) {
        // Still asked for, so never retired for it; it fails alone, and what it had stays as it was.
        this.#metrics.failed("validate", "refused");
        this.#standings.failed(g.as, g.node, "refused", `contributions entry for ${g.as}: ${g.refused}`);
        return;
      }
      if (this.#inFlight.has(g.as)) return;
      let password: string;
      try {
        password = await this.#secretsDir.read(g.secret);
      } catch (err) {
        this.#secretMissing(g, err, now);
        return;
      }
      this.#secretFound(g.as);
      passwords.push(password);
      const p: Provision = {
        as: g.as,
        password,
        values: g.values,
        derived: g.derived,
        at: g.at,
        node: g.node,
      };
      const digest = digestOf(p);
      const was = this.#applied.get(g.as);
      if (was === digest) {
        const brake = this.#brakes.get(g.as);
        if (verifying && !(brake && now < brake.nextAt)) checks.push({ p, digest });
        return;
      }
      const known = this.#known.get(g.as);
      if (was !== undefined) {
        creates.push({
          p,
          digest,
          reapplying: 0,
          action: "re-applied",
          why: "password, values or derived changed",
        });
      } else if (known?.state === "retired") {
        creates.push({
          p,
          digest,
          reapplying: 0,
          action: "created",
          why: "asked for again: re-enabled as it was",
        });
      } else if (known?.state === "active") {
        // Made before this process started: applied again to be sure, which changes nothing worth a record.
        creates.push({
          p,
          digest,
          reapplying: 0,
          action: null,
          why: "applied again after the provider started",
        });
      } else {
        const why = `asked for${g.node ? ` by node ${g.node}` : ""}`;
        creates.push({ p, digest, reapplying: 0, action: "created", why });
      }
    });

    this.#lastPasswords = passwords;
    // What changed is applied before the (possibly long) verification, so a change never waits on it.
    await forEachLimited(creates, this.#s.concurrency, (job) => this.#create(job));
    const reapplies = await this.#check(checks);
    await forEachLimited(reapplies, this.#s.concurrency, (job) => this.#create(job));

    if (this.#seeded) await this.#retireUnasked(kind, now);
    for (const login of this.#standings.logins()) {
      if (!this.#asked.has(login) && this.#known.get(login)?.state !== "active") {
        this.#standings.clear(login, "no longer asked for");
      }
    }
    for (const login of [...this.#createFailures.keys(), ...this.#secretMisses.keys()]) {
      if (!this.#asked.has(login)) {
        this.#createFailures.delete(login);
        this.#secretMisses.delete(login);
      }
    }
    await this.#finishPass(now);
  }

  /** Reads what this provider made from the backend's own marks, once it can. */
  async #seed(): Promise<void> {
    if (this.#seeded) return;
    try {
      const entries = await this.adapter.inventory();
      for (const e of entries) {
        if (this.#known.has(e.as)) continue;
        this.#known.set(e.as, {
          state: e.state,
          derived: e.derived,
          retiredAt: e.retiredAt?.getTime(),
          why: e.why,
        });
      }
      this.#seeded = true;
      const retired = entries.filter((e) => e.state === "retired").length;
      this.#log.info(
        `found ${entries.length - retired} active and ${retired} retired consumer(s) made by instance ${this.#s.instance}`,
      );
      if (this.#seedProblem) this.#log.info("the backend's inventory is readable again");
      this.#seedProblem = undefined;
    } catch (err) {
      const text = this.#describe(err, this.#passwords());
      if (text !== this.#seedProblem) {
        this.#log.warn(
          `cannot read what this provider made from the backend (${text}); nothing is retired until it can`,
        );
      }
      this.#seedProblem = text;
    }
  }

  /** Verifies consumers with `holds` (batched when the adapter can); returns the re-applies due. */
  async #check(checks: readonly { p: Provision; digest: string }[]): Promise<CreateJob[]> {
    if (checks.length === 0) return [];
    const answers = new Map<string, boolean | Error>();
    if (this.adapter.batched) {
      const many = this.adapter.holdsMany.bind(this.adapter);
      // In batches, each with its own timeout: a backend that must be asked once per consumer (a login
      // each) would not answer a thousand within one.
      // The adapter says how many one call answers; the provider's own setting overrides it.
      const size = this.options.verifyBatch ?? this.adapter.verifyBatch ?? this.#s.verifyBatch;
      for (let at = 0; at < checks.length; at += size) {
        const batch = checks.slice(at, at + size).map((c) => c.p);
        this.#metrics.roundTrip(batch.length);
        const { result } = withTimeout(this.#clock, this.#s.holdsTimeout, "verifying", (signal) =>
          many(batch, signal),
        );
        try {
          for (const [login, answer] of await result) answers.set(login, answer);
        } catch (err) {
          const e = err instanceof Error ? err : new Error(String(err));
          for (const p of batch) answers.set(p.as, e);
          // A backend that timed out will time out for the next batch too: the rest wait a pass.
          if (err instanceof TimeoutError) break;
        }
      }
    } else {
      // A backend that timed out will time out for the next consumer too: the rest wait a pass.
      let timedOut = false;
      await forEachLimited(checks, this.#s.concurrency, async (c) => {
        if (timedOut) return;
        this.#metrics.roundTrip(1);
        const holds = this.adapter.holds.bind(this.adapter);
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
    }

    const reapply: CreateJob[] = [];
    for (const c of checks) {
      const answer = answers.get(c.p.as);
      if (answer === undefined) continue; // not asked this pass
      if (answer instanceof Error) {
        // Unable to ask is not evidence of loss: nothing is re-applied on it.
        const text = this.#describe(answer, [c.p.password]);
        const cls = this.#classify(answer, text);
        this.#metrics.verified("unknown");
        this.#metrics.failed("verify", cls);
        this.#standings.failed(c.p.as, c.p.node, cls, `could not check: ${text}`);
        continue;
      }
      this.#metrics.verified(answer ? "held" : "not-held");
      if (answer) {
        this.#brakes.delete(c.p.as);
        this.#standings.succeeded(c.p.as);
        continue;
      }
      const times = (this.#brakes.get(c.p.as)?.times ?? 0) + 1;
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

  async #create(job: CreateJob): Promise<void> {
    const { p } = job;
    const create = this.adapter.create.bind(this.adapter);
    const { result, settled } = withTimeout(
      this.#clock,
      this.#s.createTimeout,
      `creating ${p.as}`,
      (signal) => create(p, signal),
    );
    this.#inFlight.add(p.as);
    void settled.then(() => this.#inFlight.delete(p.as));
    try {
      await result;
    } catch (err) {
      this.#applied.delete(p.as);
      this.#appliedTags.delete(p.as);
      const text = this.#describe(err, [p.password]);
      const was = this.#createFailures.get(p.as);
      const failure = was && was.text === text ? { text, times: was.times + 1 } : { text, times: 1 };
      this.#createFailures.set(p.as, failure);
      // Said when it changes; while it stays the same, only rarely.
      if (failure.times === 1 || failure.times % SAY_AGAIN_ATTEMPTS === 0) {
        this.#log.warn(`${p.as}: create failed, will retry: ${text}`);
      }
      const cls = this.#classify(err, text);
      this.#metrics.failed("create", cls);
      this.#standings.failed(p.as, p.node, cls, text);
      return;
    }
    this.#metrics.created(job.action ?? "re-asserted");
    this.#unsaved.add(p.as);
    this.#changesUnsaved = true;
    const known = this.#known.get(p.as);
    this.#known.set(p.as, { state: "active", derived: known?.derived ?? p.derived });
    this.#applied.set(p.as, job.digest);
    this.#appliedTags.set(p.as, passwordTag(p.password));
    const failed = this.#createFailures.get(p.as);
    this.#createFailures.delete(p.as);
    this.#standings.succeeded(p.as);
    if (failed) this.#log.info(`${p.as}: created, after ${failed.times} failed attempt(s)`);

    if (job.action) {
      this.#log.info(`${p.as}: ${job.action} (${job.why})`);
      this.#record({ action: job.action, login: p.as, who: "provisioner", why: job.why });
    }
    if (job.reapplying === 0) {
      this.#brakes.delete(p.as);
      return;
    }
    // The brake: a create that keeps not producing what holds checks is checked less and less often.
    const wait = Math.min(this.#s.verifyEvery * 2 ** (job.reapplying - 1), this.#s.maxBrake);
    this.#brakes.set(p.as, { times: job.reapplying, nextAt: this.#clock.now() + wait });
    if (job.reapplying > 1) this.#log.warn(`${p.as}: next check in ${Math.round(wait / 1000)}s`);
  }

  async #retireUnasked(kind: "periodic" | "watch", now: number): Promise<void> {
    const unasked: string[] = [];
    let held = 0;
    for (const [login, k] of this.#known) {
      if (k.state !== "active") continue;
      held++;
      if (!this.#asked.has(login)) unasked.push(login);
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
  }

  async #retire(logins: readonly string[], why: string, who: string): Promise<string[]> {
    const done: string[] = [];
    await forEachLimited(logins, this.#s.concurrency, async (login) => {
      const k = this.#known.get(login);
      if (!k || k.state !== "active") return;
      const at = this.#clock.now();
      try {
        await this.adapter.retire(login, k.derived, why, new Date(at));
      } catch (err) {
        this.#log.error(
          `${login}: could not retire, will try again: ${this.#describe(err, this.#passwords())}`,
        );
        return;
      }
      this.#known.set(login, { state: "retired", derived: k.derived, retiredAt: at, why });
      this.#changesUnsaved = true;
      this.#applied.delete(login);
      this.#appliedTags.delete(login);
      this.#brakes.delete(login);
      this.#standings.clear(login, "retired");
      this.#log.info(`${login}: retired (access disabled, data kept, marked to delete): ${why}`);
      this.#record({ action: "retired", login, who, why });
      this.#metrics.retired(who === "provisioner" ? "provisioner" : "approval");
      done.push(login);
    });
    this.#retirement.reset();
    return done.sort();
  }

  /**
   * The adapter's `afterChanges`, once, when something changed since it last succeeded. When it
   * fails, what was created or re-applied since is taken as not applied: the next pass applies it
   * again (create is idempotent) and asks again.
   */
  async #afterChanges(): Promise<void> {
    if (!this.#changesUnsaved) return;
    const after = this.adapter.afterChanges.bind(this.adapter);
    const { result } = withTimeout(this.#clock, this.#s.createTimeout, "finishing the changes", () =>
      after(),
    );
    try {
      await result;
    } catch (err) {
      this.#log.warn(
        `the backend did not finish this pass's changes (${this.#describe(err, this.#passwords())}); ` +
          `the ${this.#unsaved.size} consumer(s) applied since are applied again on the next pass`,
      );
      for (const login of this.#unsaved) this.#applied.delete(login);
      return;
    }
    this.#unsaved.clear();
    this.#changesUnsaved = false;
  }

  // ---- failures, secrets, problems ----------------------------------------------------------

  #classify(err: unknown, text: string): FailureClass {
    if (isRefusal(err)) return "refused";
    let said: FailureClass | undefined;
    try {
      said = this.adapter.classify?.(err);
    } catch {
      said = undefined;
    }
    if (said) return said;
    if (err instanceof TimeoutError) return "unreachable";
    if (err instanceof InvalidLoginError) return "refused";
    return classOf(err, text);
  }

  #secretMissing(g: Contribution, err: unknown, now: number): void {
    const text = this.#describe(err, []);
    const miss = this.#secretMisses.get(g.as);
    if (err instanceof SecretUnreadableError && err.breaksRule) {
      // No race: the file is there and breaks the rule, so it is said loudly at once (and rarely after).
      if (!miss || miss.loudAt === undefined || now - miss.loudAt >= SECRET_SAY_AGAIN) {
        this.#secretMisses.set(g.as, { since: miss?.since ?? now, loudAt: now });
        this.#log.error(
          `${g.as}: its secret is REFUSED (${text}); nothing is provisioned for it until that is fixed`,
        );
      }
    } else if (!miss) {
      this.#secretMisses.set(g.as, { since: now, loudAt: undefined });
      this.#log.info(`${g.as}: secret not readable yet (${text}); waiting for it`);
    } else if (now - miss.since >= SECRET_PATIENCE) {
      if (miss.loudAt === undefined || now - miss.loudAt >= SECRET_SAY_AGAIN) {
        miss.loudAt = now;
        this.#log.error(
          `${g.as}: CANNOT READ its secret for ${Math.round((now - miss.since) / 1000)}s (${text}). This is not a ` +
            "race any more: nothing is provisioned for this consumer until somebody looks. Check that the file " +
            "exists, who owns it, and which user this provider runs as",
        );
      }
    }
    this.#metrics.failed("read-secret", "secret-unreadable");
    this.#standings.failed(g.as, g.node, "secret-unreadable", text);
  }

  #secretFound(login: string): void {
    const miss = this.#secretMisses.get(login);
    if (!miss) return;
    this.#secretMisses.delete(login);
    if (miss.loudAt !== undefined) this.#log.info(`${login}: secret readable again`);
  }

  #sayProblem(problem: string | null): void {
    if (problem === this.#problem) return;
    if (problem) this.#log.warn(`${problem}: nothing is applied or retired until it is fixed`);
    else this.#log.info(`contributions file ${this.options.receives} readable again`);
    this.#problem = problem;
  }

  #record(entry: Omit<ActionEntry, "at" | "interface">): void {
    try {
      this.#actions.append({
        ...entry,
        interface: this.iface,
        at: new Date(this.#clock.now()).toISOString(),
      });
    } catch (err) {
      this.#log.warn(
        `could not record ${entry.action} of ${entry.login} in the action log: ${this.#describe(err, [])}`,
      );
    }
  }

  /** An error's text, scrubbed of `passwords` and of the provider's own secrets. */
  #describe(err: unknown, passwords: readonly string[]): string {
    return describeError(err, this.#secrets.length === 0 ? passwords : [...passwords, ...this.#secrets]);
  }

  /** Every password read in the last pass: what no message may carry. */
  #passwords(): string[] {
    return this.#lastPasswords;
  }

  // ---- snapshot and tools -------------------------------------------------------------------

  async #finishPass(now: number): Promise<void> {
    await this.#afterChanges();
    this.#lastPassAt = now;
    await this.#rebuildSnapshot();
  }

  #emptySnapshot(): StatusReport {
    return Object.freeze({
      interface: this.iface,
      instance: this.#s.instance,
      receives: this.options.receives,
      lastPassAt: null,
      contributionsProblem: null,
      consumers: Object.freeze([]),
    });
  }

  /**
   * Makes what the read-only tools answer until the next rebuild: the status report, `cleanup list`
   * and `retire list`. It yields to the event loop as it goes, so over 100,000 consumers a tool asked
   * meanwhile is answered from the previous snapshot at once.
   */
  async #rebuildSnapshot(): Promise<void> {
    const now = this.#clock.now();
    const waiting = this.#retirement.waiting;
    const waitingLogins = new Set(waiting?.logins ?? []);
    const logins = new Set(this.#asked.keys());
    for (const login of this.#known.keys()) logins.add(login);
    const sorted = [...logins].sort();
    const turns = new YieldTimer();
    const consumers: ConsumerStatus[] = [];
    const cleanup: CleanupEntry[] = [];
    const texts: string[] = [];
    let held = 0;
    for (const login of sorted) {
      if (turns.due()) await yieldToEventLoop();
      const known = this.#known.get(login);
      if (known?.state === "active") held++;
      if (known?.state === "retired") {
        cleanup.push({
          login,
          retiredAt: known.retiredAt === undefined ? null : new Date(known.retiredAt).toISOString(),
          why: known.why ?? "",
          derived: known.derived,
        });
      }
      const status = this.#statusOf(login, waitingLogins.has(login), waiting?.id);
      if (!status) continue;
      const was = this.#stateSince.get(login);
      const since = status.since ?? (was && was.state === status.state ? was.since : now);
      this.#stateSince.set(login, { state: status.state, since });
      const entry = Object.freeze({ ...status, since: new Date(since).toISOString() });
      consumers.push(entry);
      // Written out here, a little at a time, so no request has to write 100,000 at once.
      texts.push(JSON.stringify(entry));
    }
    for (const login of this.#stateSince.keys()) if (!logins.has(login)) this.#stateSince.delete(login);
    const head = {
      interface: this.iface,
      instance: this.#s.instance,
      receives: this.options.receives,
      lastPassAt: this.#lastPassAt === null ? null : new Date(this.#lastPassAt).toISOString(),
      contributionsProblem: this.#problem,
    };
    const snapshot: StatusReport = Object.freeze({ ...head, consumers: Object.freeze(consumers) });
    rememberJson(snapshot, `${JSON.stringify(head).slice(0, -1)},"consumers":[${texts.join(",")}]}`);
    this.#snapshot = snapshot;
    this.#cleanupList = Object.freeze(cleanup.sort((a, b) => a.login.localeCompare(b.login)));
    this.#retireList = Object.freeze(this.#makeRetireList(held, consumers));
  }

  #statusOf(
    login: string,
    isWaiting: boolean,
    waitingId: string | undefined,
  ): (Omit<ConsumerStatus, "since"> & { since: number | undefined }) | undefined {
    const asked = this.#asked.get(login);
    const known = this.#known.get(login);
    const trouble = this.#standings.get(login);
    if (asked && trouble) {
      return {
        login,
        state: "failing",
        class: trouble.class,
        since: trouble.since,
        why: trouble.text,
        node: asked.node,
        attempts: trouble.attempts,
      };
    }
    if (asked) {
      const held = this.#applied.has(login);
      return {
        login,
        state: "active",
        class: null,
        since: undefined,
        why: held ? "held as asked" : "being created",
        node: asked.node,
        ...(this.#appliedTags.has(login) ? { applied: this.#appliedTags.get(login) } : {}),
      };
    }
    if (known?.state === "retired") {
      return { login, state: "retired", class: null, since: known.retiredAt, why: known.why ?? "retired" };
    }
    if (known?.state === "active") {
      if (isWaiting) {
        return {
          login,
          state: "awaiting-approval",
          class: null,
          since: undefined,
          why: `no longer asked for; waits for a person: retire approve ${waitingId ?? ""}`,
        };
      }
      return {
        login,
        state: "unasked",
        class: null,
        since: undefined,
        why: `no longer asked for; seen in ${this.#retirement.count} of ${this.#s.stablePasses} periodic passes`,
      };
    }
    return undefined;
  }

  status(): StatusReport {
    return this.#snapshot;
  }

  retireList(): RetireList {
    return this.#retireList ?? this.#makeRetireList(0, []);
  }

  #makeRetireList(held: number, consumers: readonly ConsumerStatus[]): RetireList {
    const waiting = this.#retirement.waiting;
    if (waiting)
      return { id: waiting.id, logins: waiting.logins, held: waiting.held, reason: waiting.reason };
    const unasked = consumers.filter((c) => c.state === "unasked").map((c) => c.login);
    return {
      id: null,
      logins: [],
      held,
      reason:
        unasked.length === 0
          ? "nothing waits for approval and nothing is counting towards retirement"
          : `nothing waits for approval; ${unasked.join(", ")} seen unasked in ${this.#retirement.count} of ${this.#s.stablePasses} passes`,
    };
  }

  retireApprove(id?: string, who = "operator"): Promise<{ id: string; retired: string[] }> {
    return this.#lock.run(async () => {
      const waiting = this.#retirement.waiting;
      if (!waiting) {
        throw new ToolError(
          "nothing-waiting",
          "no retirement waits for approval; `retire list` shows what is counting",
        );
      }
      if (id !== undefined && id !== waiting.id) {
        throw new ToolError(
          "set-changed",
          `the set waiting is ${waiting.id}, not ${id}: it changed since it was listed; run \`retire list\` again`,
        );
      }
      // The set is confirmed against the file as it is now, not as the last pass saw it.
      const read = await readContributions(this.options.receives, this.iface);
      if (!read.ok) {
        throw new ToolError(
          "contributions-unreadable",
          `${read.problem}: cannot confirm the set; nothing retired`,
        );
      }
      const asked = new Set(read.given.map((g) => g.as));
      const now = [...this.#known]
        .filter(([login, k]) => k.state === "active" && !asked.has(login))
        .map(([login]) => login)
        .sort();
      if (now.join("\n") !== waiting.logins.join("\n")) {
        this.#retirement.reset();
        await this.#rebuildSnapshot();
        throw new ToolError(
          "set-changed",
          `the set no longer asked for is now ${now.join(", ") || "empty"}, not the one approved (${waiting.id}); nothing retired`,
        );
      }
      for (const login of waiting.logins) {
        this.#record({ action: "approved", login, who, why: `retirement of set ${waiting.id} approved` });
      }
      const why = `no longer asked for in ${this.options.receives}; retirement of ${waiting.logins.length} approved by ${who}`;
      const retired = await this.#retire(waiting.logins, why, who);
      await this.#afterChanges();
      await this.#rebuildSnapshot();
      return { id: waiting.id, retired };
    });
  }

  cleanupList(): readonly CleanupEntry[] {
    return this.#cleanupList;
  }

  cleanupDelete(login: string, who = "operator"): Promise<{ login: string; freedBytes: number }> {
    return this.#lock.run(async () => {
      if (!isValidLogin(login)) {
        throw new ToolError(
          "unknown-login",
          `${JSON.stringify(login)} is not a login the mesh could have made`,
        );
      }
      const known = this.#known.get(login);
      if (!known) {
        let exists = false;
        try {
          exists = (await this.adapter.exists?.(login)) ?? false;
        } catch (err) {
          throw new ToolError(
            "backend-failed",
            `cannot ask the backend about ${login}: ${this.#describe(err, [])}`,
          );
        }
        if (exists) {
          throw new ToolError(
            "not-made-here",
            `${login} exists in the backend but was not made by this provider (instance ${this.#s.instance}); the mesh never deletes it`,
          );
        }
        throw new ToolError(
          "unknown-login",
          `${login} is not known to this provider; \`cleanup list\` shows what can be deleted`,
        );
      }
      const read = await readContributions(this.options.receives, this.iface);
      if (!read.ok) {
        throw new ToolError(
          "contributions-unreadable",
          `${read.problem}: cannot confirm ${login} is unasked; nothing deleted`,
        );
      }
      if (read.given.some((g) => g.as === login)) {
        throw new ToolError(
          "still-asked",
          `${login} is still asked for in ${this.options.receives}; it is not deleted`,
        );
      }
      if (known.state !== "retired") {
        throw new ToolError(
          "not-retired",
          `${login} is not retired (it is active); only a retired consumer can be deleted — it retires after ` +
            `${this.#s.stablePasses} passes unasked, or with \`retire approve\``,
        );
      }
      let freedBytes: number;
      try {
        ({ freedBytes } = await this.adapter.delete({
          as: login,
          derived: known.derived,
          retiredAt: known.retiredAt === undefined ? undefined : new Date(known.retiredAt),
          why: known.why,
        }));
      } catch (err) {
        throw new ToolError("backend-failed", `could not delete ${login}: ${this.#describe(err, [])}`, {
          cause: err,
        });
      }
      this.#known.delete(login);
      this.#log.info(`${login}: deleted by ${who}, login and data (${freedBytes} bytes freed)`);
      this.#record({ action: "deleted", login, who, why: `cleanup delete by ${who}`, freedBytes });
      this.#metrics.deleted();
      this.#changesUnsaved = true;
      await this.#afterChanges();
      await this.#rebuildSnapshot();
      return { login, freedBytes };
    });
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

/** A digest of everything a create is given: what changed is re-applied, nothing else. */
function digestOf(p: Provision): string {
  return createHash("sha256")
    .update(stableJson([p.as, p.password, p.values, p.derived]))
    .digest("base64url");
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}
