// What every benchmark shares: figures (percentiles, tables, a labelled result block), temp
// directories and servers that are cleaned up however the run ends, contributions and secret files
// written the way the agent writes them (atomically, secrets 0600), and a meter for a client's calls.

import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, open, readFile, rename, rm } from "node:fs/promises";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { performance } from "node:perf_hooks";
import {
  FakeClock,
  runProvisioner,
  type Logger,
  type ProviderAdapter,
  type ProvisionerHandle,
  type ProvisionerOptions,
} from "@mesh/sdk";
import { removeStaleModuleUsers } from "@mesh/testkit";

/** A process's memory as /proc/PID/status says it, in bytes: resident now, and at its highest. */
export interface ProcMemory {
  readonly rss: number;
  readonly hwm: number;
}

/** VmRSS and VmHWM in the text of a /proc/PID/status (0 where absent, as for a kernel thread). */
export function memoryInStatus(status: string): ProcMemory {
  const kb = (field: string): number =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? 0);
  return { rss: kb("VmRSS") * 1024, hwm: kb("VmHWM") * 1024 };
}

/** VmRSS and VmHWM of `pid`, in bytes. @throws when the process is gone. */
export async function procMemory(pid: number): Promise<ProcMemory> {
  return memoryInStatus(await readFile(`/proc/${pid}/status`, "utf8"));
}

/** Bytes as megabytes (2^20), for a table. */
export const mb = (bytes: number): number => bytes / 2 ** 20;

/** Milliseconds on a monotonic clock, for intervals only. */
export const now = (): number => performance.now();

/** Resolves after `ms`. */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A positive whole number from the environment variable `name`, else `fallback`.
 * @throws Error naming the variable when it is set to something else.
 */
export function envInt(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value <= 0) {
    throw new Error(`${name}=${JSON.stringify(raw)} is not a positive whole number; unset it or give one`);
  }
  return value;
}

// ---- figures ----------------------------------------------------------------------------------

/** The nearest-rank `p`-th percentile (0–100) of `values`; NaN for none. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length)));
  return sorted[rank - 1] ?? Number.NaN;
}

/** The median of `values`: the mean of the two middle ones for an even count; NaN for none. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const upper = sorted[mid] ?? Number.NaN;
  return sorted.length % 2 === 1 ? upper : ((sorted[mid - 1] ?? Number.NaN) + upper) / 2;
}

/** The usual summary of a set of timings. */
export interface Summary {
  readonly n: number;
  readonly min: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly max: number;
  readonly mean: number;
}

/** Summarises `values` (all NaN when there are none). */
export function summarize(values: readonly number[]): Summary {
  const n = values.length;
  return {
    n,
    min: n === 0 ? Number.NaN : Math.min(...values),
    p50: median(values),
    p90: percentile(values, 90),
    p99: percentile(values, 99),
    max: n === 0 ? Number.NaN : Math.max(...values),
    mean: n === 0 ? Number.NaN : values.reduce((a, b) => a + b, 0) / n,
  };
}

/** A duration for a person: µs below a millisecond, ms below ten seconds, else seconds. */
export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return "n/a";
  if (ms < 1) return `${(ms * 1000).toFixed(0)} µs`;
  if (ms < 10) return `${ms.toFixed(2)} ms`;
  if (ms < 10_000) return `${ms.toFixed(0)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

/** A ratio with two decimals and an ×. */
export function fmtRatio(ratio: number): string {
  return Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : "n/a";
}

/** Renders rows under headers as an aligned plain-text table (numbers right-aligned). */
export function table(headers: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const cells = [headers, ...rows.map((r) => r.map(String))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? "").length)));
  const numeric = headers.map((_, i) =>
    rows.every((r) => typeof r[i] === "number" || /^[\d.,]/.test(String(r[i]))),
  );
  const line = (r: readonly string[]): string =>
    r
      .map((c, i) => (numeric[i] && r !== headers ? c.padStart(widths[i] ?? 0) : c.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [
    line(headers),
    widths.map((w) => "-".repeat(w)).join("  "),
    ...rows.map((r) => line(r.map(String))),
  ].join("\n");
}

/** Says a step of the benchmark on standard error, so the result block on standard output stays clean. */
export function say(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

/**
 * Prints the labelled block a reader looks for at the end of a run, with the machine's load, since
 * on a shared machine every figure depends on it.
 */
export function printResult(name: string, body: string): void {
  const [one, five] = loadavg();
  const machine =
    `machine: ${availableParallelism()} CPUs, load average ${one?.toFixed(2) ?? "?"} (1 min) ` +
    `${five?.toFixed(2) ?? "?"} (5 min) at the end; node ${process.version}; ${new Date().toISOString()}`;
  body = `${body.trimEnd()}\n${machine}`;
  const rule = "=".repeat(Math.max(20, 72 - name.length - 12));
  process.stdout.write(
    `\n==== RESULT: ${name} ${rule}\n${body.trimEnd()}\n==== END ${name} ${"=".repeat(Math.max(20, 72 - name.length - 10))}\n`,
  );
}

// ---- lifetime ---------------------------------------------------------------------------------

type CleanupFn = () => Promise<void> | void;
const cleanups: CleanupFn[] = [];
let cleaning: Promise<void> | undefined;

/** Registers something to undo when the benchmark ends, however it ends (last registered runs first). */
export function onCleanup(fn: CleanupFn): void {
  cleanups.push(fn);
}

function cleanUp(): Promise<void> {
  cleaning ??= (async () => {
    for (const fn of cleanups.splice(0).reverse()) {
      try {
        await fn();
      } catch (err) {
        say(`cleanup step failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  })();
  return cleaning;
}

/**
 * Runs a benchmark's body, then every cleanup (also on Ctrl-C or SIGTERM), and sets the exit code:
 * 0 when the body finished, 1 when it threw. The process then ends by itself.
 */
export function runBench(name: string, body: () => Promise<void>): void {
  const interrupted = (signal: NodeJS.Signals): void => {
    say(`${name}: ${signal}, cleaning up`);
    void cleanUp().then(() => {
      removeStaleModuleUsers();
      process.exit(130);
    });
  };
  process.once("SIGINT", interrupted);
  process.once("SIGTERM", interrupted);
  const started = now();
  void (async () => {
    try {
      await body();
      say(`${name}: finished in ${fmtMs(now() - started)}`);
    } catch (err) {
      process.exitCode = 1;
      say(
        `${name} FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}${err instanceof Error && err.cause !== undefined ? `\ncaused by: ${String((err.cause as Error).stack ?? err.cause)}` : ""}`,
      );
    } finally {
      await cleanUp();
      // A mesh it ran made a system user per module, and its state directory is gone now: without
      // this, a few runs of a 100-consumer benchmark use up the machine's system group ids.
      const gone = removeStaleModuleUsers();
      if (gone.length > 0) say(`${name}: removed ${gone.length} module users of its meshes`);
      process.removeListener("SIGINT", interrupted);
      process.removeListener("SIGTERM", interrupted);
    }
  })();
}

/** Makes a directory under the system temp dir that is removed when the benchmark ends. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `mesh-bench-${prefix}-`));
  onCleanup(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A logger that keeps quiet about routine work and keeps warnings and errors to report at the end. */
export interface QuietLogger extends Logger {
  readonly warnings: string[];
  readonly errors: string[];
}

/** Makes a `QuietLogger`; errors are also said at once, since a benchmark that fails should say why. */
export function quietLogger(): QuietLogger {
  const warnings: string[] = [];
  const errors: string[] = [];
  return {
    warnings,
    errors,
    info: () => {},
    warn: (m) => warnings.push(m),
    error: (m) => {
      errors.push(m);
      say(`harness error: ${m}`);
    },
  };
}

// ---- files as the agent writes them -----------------------------------------------------------

/** A password as the mesh mints one: 192 bits from the CSPRNG, URL-safe. */
export function mintPassword(): string {
  return randomBytes(24).toString("base64url");
}

/**
 * Writes `text` to `path` atomically (temp file in the same directory, fsync, rename) with `mode`.
 * Answers the monotonic time taken right before the rename: the moment a reader may first see it.
 */
export async function writeAtomic(
  path: string,
  text: string,
  options: { mode?: number; sync?: boolean } = {},
): Promise<number> {
  const tmp = join(dirname(path), `.${randomBytes(6).toString("hex")}.tmp`);
  const file = await open(tmp, "w", options.mode ?? 0o600);
  try {
    await file.writeFile(text, "utf8");
    if (options.sync !== false) await file.sync();
  } finally {
    await file.close();
  }
  const at = now();
  await rename(tmp, path);
  return at;
}

/** One consumer in a contributions file. */
export interface GivenEntry {
  readonly as: string;
  readonly secret: string;
  readonly node: string;
  readonly values: Readonly<Record<string, unknown>>;
  readonly derived: Readonly<Record<string, unknown>>;
}

/**
 * A contributions file and its secret files, written as the agent writes them: each new consumer's
 * secret first (0600, atomic), then the whole contributions file (atomic). Consumers are only ever
 * added, so nothing a benchmark writes asks the harness to retire anything.
 */
export class ContributionsFile {
  readonly path: string;
  readonly secrets: string;
  readonly #given: GivenEntry[] = [];
  readonly #passwords = new Map<string, string>();

  constructor(
    readonly dir: string,
    readonly requirement: string,
    readonly options: { sync?: boolean } = {},
  ) {
    this.path = join(dir, "contributions.json");
    this.secrets = join(dir, "secrets");
  }

  /** The consumers asked for so far. */
  get given(): readonly GivenEntry[] {
    return this.#given;
  }

  /** The password minted for `login`. @throws Error for a login never added. */
  passwordOf(login: string): string {
    const password = this.#passwords.get(login);
    if (password === undefined) throw new Error(`${login} was never added to ${this.path}`);
    return password;
  }

  /**
   * Adds consumers (secrets first, at most 64 written at once) and rewrites the file.
   * Answers the monotonic time right before the contributions file's rename.
   */
  async add(logins: readonly string[]): Promise<number> {
    await mkdir(this.secrets, { recursive: true, mode: 0o700 });
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < logins.length) {
        const login = logins[next++] as string;
        const password = mintPassword();
        await writeAtomic(join(this.secrets, login), `${password}\n`, { mode: 0o600, ...this.options });
        this.#passwords.set(login, password);
      }
    };
    await Promise.all(Array.from({ length: Math.min(64, logins.length) }, worker));
    for (const as of logins) {
      this.#given.push({ as, secret: join(this.secrets, as), node: "bench", values: {}, derived: {} });
    }
    return this.write();
  }

  /** Writes the file as it stands; answers the monotonic time right before its rename. */
  write(): Promise<number> {
    return writeAtomic(this.path, JSON.stringify({ requirement: this.requirement, given: this.#given }), {
      mode: 0o600,
      ...this.options,
    });
  }
}

/** `prefix` followed by `i` padded to `width` digits: a valid, sortable login. */
export function loginOf(prefix: string, i: number, width = 5): string {
  return `${prefix}${String(i).padStart(width, "0")}`;
}

// ---- metering a client ------------------------------------------------------------------------

/** What a metered method was asked, by kind. */
export interface MeterKind {
  count: number;
  /** Milliseconds from the call to its answer, summed (calls that overlap each count in full). */
  totalMs: number;
}

/** Counts (and times) the calls of one method on a prototype, until `restore()`. */
export interface CallMeter {
  readonly calls: number;
  readonly kinds: ReadonlyMap<string, MeterKind>;
  /** Forgets what was counted so far. */
  reset(): void;
  /** Puts the original method back. */
  restore(): void;
}

/**
 * Wraps `target[method]` so every call is counted under `kindOf(args)` and timed to its answer,
 * whether the answer comes through a trailing callback or a returned promise.
 */
export function meterMethod(
  target: object,
  method: string,
  kindOf: (args: readonly unknown[]) => string = () => method,
): CallMeter {
  const holder = target as Record<string, unknown>;
  const original = holder[method];
  if (typeof original !== "function") throw new Error(`${method} is not a method of the object metered`);
  let calls = 0;
  const kinds = new Map<string, MeterKind>();
  const done = (kind: string, started: number): void => {
    const k = kinds.get(kind) ?? { count: 0, totalMs: 0 };
    k.count++;
    k.totalMs += now() - started;
    kinds.set(kind, k);
  };
  holder[method] = function metered(this: unknown, ...args: unknown[]): unknown {
    calls++;
    const kind = kindOf(args);
    const started = now();
    const last = args.length - 1;
    const callback = args[last];
    if (typeof callback === "function") {
      args[last] = function answered(this: unknown, ...answer: unknown[]): unknown {
        done(kind, started);
        return (callback as (...a: unknown[]) => unknown).apply(this, answer);
      };
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    }
    const result = (original as (...a: unknown[]) => unknown).apply(this, args);
    if (
      result !== null &&
      typeof result === "object" &&
      typeof (result as Promise<unknown>).then === "function"
    ) {
      (result as Promise<unknown>).then(
        () => done(kind, started),
        () => done(kind, started),
      );
    } else {
      done(kind, started);
    }
    return result;
  };
  return {
    get calls() {
      return calls;
    },
    kinds,
    reset() {
      calls = 0;
      kinds.clear();
    },
    restore() {
      holder[method] = original;
    },
  };
}

/** The kind of an SQL statement for a per-statement breakdown: its verb, and for a read its first catalog. */
export function sqlKind(args: readonly unknown[]): string {
  const first = args[0];
  const text =
    typeof first === "string"
      ? first
      : first !== null && typeof first === "object" && typeof (first as { text?: unknown }).text === "string"
        ? (first as { text: string }).text
        : "";
  const words = text.trim().replace(/\s+/g, " ").split(" ");
  const verb = (words[0] ?? "").toUpperCase();
  if (verb === "SELECT") {
    const from = /\bFROM\s+(?:pg_catalog\.)?([a-z_]+)/i.exec(text);
    return `SELECT … ${from?.[1] ?? (/pg_terminate_backend/.test(text) ? "pg_terminate_backend" : "(expression)")}`;
  }
  if (verb === "CREATE" || verb === "ALTER" || verb === "DROP" || verb === "COMMENT") {
    return `${verb} ${(words[1] ?? "").toUpperCase()}${verb === "COMMENT" ? ` ${(words[2] ?? "").toUpperCase()}` : ""}`;
  }
  return verb || "(other)";
}

// ---- goals, concurrency, and the harness's own path --------------------------------------------

/** A figure next to its goal and whether it is met: `1.42× (goal ≤ 2×: met)`. */
export function verdict(figure: string, goal: string, met: boolean): string {
  return `${figure} (goal ${goal}: ${met ? "met" : "not met"})`;
}

/** Runs `work` on every item, `limit` at a time (as the harness runs creates), in order of the items. */
export async function eachLimited<T>(
  items: readonly T[],
  limit: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      await work(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** What `provisionThroughHarness` measured. */
export interface HarnessProvisioning {
  /** From the contributions file's rename to the pass that created the last of them being done. */
  readonly wallMs: number;
  /** From the rename to the last `created` action (the creates themselves, without the end of the pass). */
  readonly lastCreatedMs: number;
  readonly created: number;
  readonly problems: string[];
}

/**
 * N new consumers the way the mesh makes them: the harness already running and watching, the agent
 * writing every secret and then one contributions file naming all of them. Timed from the file's
 * rename until all are created and the pass that made them has finished (so an adapter's
 * `afterChanges` is in the time). Stops the harness, which closes `adapter`.
 */
export async function provisionThroughHarness(options: {
  readonly iface: string;
  readonly adapter: ProviderAdapter;
  readonly instance: string;
  readonly logins: readonly string[];
  readonly concurrency?: number;
  /** Called once the harness is ready and right before the file is written (reset meters here). */
  readonly beforeChange?: () => Promise<void> | void;
  readonly timeoutMs?: number;
}): Promise<HarnessProvisioning> {
  const dir = await tempDir(`${options.instance}-harness`);
  const file = new ContributionsFile(dir, options.iface);
  await file.write();
  const logger = quietLogger();
  const created = new Set<string>();
  let lastAt = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (allDone = resolve));
  const handle = runProvisioner(options.iface, options.adapter, {
    receives: file.path,
    instance: options.instance,
    ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    logger,
    actions: {
      append(entry) {
        if (entry.action !== "created") return;
        created.add(entry.login);
        lastAt = now();
        if (created.size === options.logins.length) allDone();
      },
    },
  });
  onCleanup(() => handle.stop());
  await handle.ready;
  await options.beforeChange?.();
  const renamedAt = await file.add(options.logins);
  const timeout = setTimeout(allDone, options.timeoutMs ?? 900_000);
  await done;
  clearTimeout(timeout);
  // The pass that made the last one ends after its afterChanges; waiting for the lock waits for it.
  await handle.idle();
  const endedAt = now();
  await handle.stop();
  const problems = [...logger.errors, ...logger.warnings];
  if (created.size !== options.logins.length)
    problems.unshift(`only ${created.size} of ${options.logins.length} were created`);
  return { wallMs: endedAt - renamedAt, lastCreatedMs: lastAt - renamedAt, created: created.size, problems };
}

/** One verify pass as `VerifyingHarness` saw it. */
export interface VerifyPass {
  readonly ms: number;
  readonly held: number;
  readonly notHeld: number;
  readonly unknown: number;
  /** How many `holds`/`holdsMany` calls the harness made (its own count of questions). */
  readonly adapterCalls: number;
}

/**
 * A harness under a `FakeClock` over consumers that already exist, for timing its verify passes
 * one at a time: its timer never fires and it does not watch, so a pass runs only when asked.
 */
export class VerifyingHarness {
  readonly clock = new FakeClock();
  readonly logger = quietLogger();
  readonly #verifyEvery = 60_000;
  #handle: ProvisionerHandle | undefined;
  #held = 0;
  #notHeld = 0;
  #unknown = 0;
  #calls = 0;

  constructor(
    readonly iface: string,
    readonly adapter: ProviderAdapter,
    readonly file: ContributionsFile,
    readonly instance: string,
    readonly options: Partial<ProvisionerOptions> = {},
  ) {}

  /** Starts the harness and waits for its first pass (which re-asserts every consumer: not timed). */
  async start(): Promise<void> {
    this.#handle = runProvisioner(this.iface, this.adapter, {
      receives: this.file.path,
      instance: this.instance,
      watch: false,
      every: 1e9,
      verifyEvery: this.#verifyEvery,
      clock: this.clock,
      logger: this.logger,
      metrics: {
        passed: () => {},
        created: () => {},
        failed: () => {},
        verified: (result) => {
          if (result === "held") this.#held++;
          else if (result === "not-held") this.#notHeld++;
          else this.#unknown++;
        },
        roundTrip: () => {
          this.#calls++;
        },
        retired: () => {},
        deleted: () => {},
      },
      ...this.options,
    });
    onCleanup(() => this.#handle?.stop());
    await this.#handle.ready;
  }

  /** Moves the clock on so every consumer is due, and runs one verify pass; answers its wall time and verdicts. */
  async verifyPass(): Promise<VerifyPass> {
    if (!this.#handle) throw new Error("start() first");
    this.#held = this.#notHeld = this.#unknown = this.#calls = 0;
    this.clock.advance(this.#verifyEvery);
    const started = now();
    await this.#handle.pass("periodic");
    return {
      ms: now() - started,
      held: this.#held,
      notHeld: this.#notHeld,
      unknown: this.#unknown,
      adapterCalls: this.#calls,
    };
  }

  async stop(): Promise<void> {
    await this.#handle?.stop();
  }
}
