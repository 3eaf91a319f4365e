// One module's process, kept running: started with its environment, its output appended to its
// log, restarted after each exit with a delay that doubles (so a module that cannot start does not
// spin), said clearly when it keeps crashing, and stopped politely then firmly.
import { spawn, type ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";
import type { BusLogger } from "@mesh/bus";
import { formatLimit, formatSize, type EffectiveLimits, type OnNewPassword } from "@mesh/manifest";
import { logTail } from "./log-tail.ts";
import type { LimitCounters, ModuleCgroup, ModuleCgroups } from "./module-cgroups.ts";
import { ModuleLog, type ModuleLogFormat } from "./module-log.ts";
import { processStartTime } from "./process-records.ts";
import type { ModuleIsolation } from "./module-isolation.ts";

/** How a module is started: everything that, when it changes, calls for a restart. */
export interface ModuleLaunch {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[];
  /** The manifest's directory. */
  readonly cwd: string;
  readonly env: Readonly<Record<string, string>>;
  /** `<state>/modules/<name>/log`: stdout and stderr, appended. */
  readonly logFile: string;
  /**
   * Files a run of the module writes about that run only (its metrics URL): removed before each
   * start, so what a process that died left is never taken for what the next one says.
   */
  readonly staleFiles?: readonly string[];
  /** The user and group it runs as (its own, made by the agent); absent: the agent's. */
  readonly uid?: number;
  readonly gid?: number;
  /** Whether it runs apart from the agent and the other modules, and why not. */
  readonly isolation?: ModuleIsolation;
  /**
   * A digest of the files rendered for it from its manifest's `run.files` (never their contents):
   * a change of it alone is a new password, handled as `onNewPassword` says.
   */
  readonly rendered?: string;
  /** What a new password in its rendered files needs; restart when absent. */
  readonly onNewPassword?: OnNewPassword;
  /**
   * `http://HOST:PORT/metrics` when its templates name `{module.metrics}`: an app that does not
   * know the mesh serves its metrics there and writes no metrics.url.
   */
  readonly metrics?: string;
  /** What it may use of the node (the fleet's, defaults filled in): its cgroup's limits. */
  readonly limits?: EffectiveLimits;
}

/** A limit a module reached, as its status and its log say it. */
export interface LimitEvent {
  readonly kind: "out-of-memory" | "pids" | "home";
  /** In words: `killed: out of memory (limit 64M)`, `pids limit 100 reached`. */
  readonly text: string;
  /** ISO 8601. */
  readonly at: string;
}

/** A module's lifecycle as reported: `crashing` once it exits too often, whatever it does right now. */
export type ModuleState = "starting" | "running" | "crashing" | "stopped";

/** How a module's last process ended. */
export interface ModuleExit {
  readonly code: number | null;
  readonly signal: string | null;
  /** ISO 8601. */
  readonly at: string;
}

/** One module as the agent reports it. */
export interface ModuleStatus {
  readonly name: string;
  readonly state: ModuleState;
  readonly pid?: number;
  /** Restarts after an exit, since the agent started the module. */
  readonly restarts: number;
  /** Not started yet, and what it waits for ("its bus credential"); its state is then `starting`. */
  readonly waiting?: string;
  readonly lastExit?: ModuleExit;
  readonly log: string;
  /** `http://HOST:PORT/metrics` while it runs and serves Prometheus metrics (what it wrote to its metrics.url). */
  readonly metrics?: string;
  /** Whether it runs as its own user (`mesh-<module>`), or as the agent's and why. */
  readonly isolation?: ModuleIsolation;
  /** Why it is not started (its command is not on this node, its manifest has no run), when it is not. */
  readonly reason?: string;
  /** While it keeps crashing: the last lines of its log, clipped (the agent scrubs them before reporting). */
  readonly logTail?: readonly string[];
  /** Its cgroup (`mesh-<id>-<module>`), while it runs in one. */
  readonly cgroup?: string;
  /** The limits it runs under (null: no bound); absent when it runs in no cgroup. */
  readonly limits?: EffectiveLimits;
  /** The last limit it reached, since the agent started it. */
  readonly limitEvent?: LimitEvent;
  /** How large its home is on disk, as last measured. */
  readonly home?: { readonly bytes: number; readonly at: string };
}

/** The delays and limits of supervision. */
export interface SupervisionTimings {
  /** The delay before the first restart; it doubles after each exit. */
  readonly restartFirstMs: number;
  readonly restartMaxMs: number;
  /** How long a module has after SIGTERM before SIGKILL. */
  readonly stopGraceMs: number;
  /** A module that exits `crashExits` times within `crashWindowMs` keeps crashing. */
  readonly crashWindowMs: number;
  readonly crashExits: number;
  /** The size at which a module's log rotates (module-log's DEFAULT_LOG_MAX_BYTES when absent). */
  readonly logMaxBytes?: number;
  /** How many rotated logs are kept besides the current one (DEFAULT_LOG_KEEP when absent). */
  readonly logKeep?: number;
  /** How a module's log lines are written: `text` (the default) or `json`. */
  readonly logFormat?: ModuleLogFormat;
}

/** Supervision as the contract sets it: 1 s doubling to 1 min, 10 s to stop, 5 exits in 2 min. */
export const DEFAULT_SUPERVISION: SupervisionTimings = {
  restartFirstMs: 1_000,
  restartMaxMs: 60_000,
  stopGraceMs: 10_000,
  crashWindowMs: 120_000,
  crashExits: 5,
};

/**
 * Told of each process a module runs, as soon as it has a PID and once it has exited: the agent
 * records them, so the next start finds what a `kill -9` of the agent left.
 */
export interface ModuleProcessHooks {
  started(name: string, pid: number): void;
  exited(name: string, pid: number): void;
}

/** How soon after an out-of-memory kill is read a SIGKILL exit is taken for it. */
const OOM_EXIT_WITHIN_MS = 5_000;

/** A supervised module process. Made by the supervisor; `start()` once, `stop()` at the end. */
export class ModuleProcess {
  #launch: ModuleLaunch;
  readonly #logger: BusLogger;
  readonly #timings: SupervisionTimings;
  readonly #onChange: () => void;
  #child: ChildProcess | undefined;
  // Settled once the current process's end is handled: its cgroup emptied, its exit said.
  #ended: Promise<void> | undefined;
  // One for every process of this launch: a restart goes on in the same file, rotating as it grows.
  #log: ModuleLog | undefined;
  #running = false;
  #startedAt = 0;
  #failures = 0;
  #restarts = 0;
  #exits: number[] = [];
  #lastExit: ModuleExit | undefined;
  #timer: NodeJS.Timeout | undefined;
  #stopping: Promise<void> | undefined;
  #saidCrashing = false;
  readonly #hooks: ModuleProcessHooks | undefined;
  readonly #cgroups: ModuleCgroups | undefined;
  // Its cgroup, once made; its counters as last read, so each limit reached is said once.
  #cgroup: ModuleCgroup | undefined;
  #counters: LimitCounters = { oomKills: 0, pidsMax: 0 };
  #limitEvent: LimitEvent | undefined;
  // When an out-of-memory kill was last read (ms since the epoch).
  #oomSeenAt = 0;
  readonly #saidCgroup = new Set<string>();

  /** `cgroups`, when given, puts each of its processes in a cgroup of its own, with its limits. */
  constructor(
    launch: ModuleLaunch,
    logger: BusLogger,
    timings: SupervisionTimings,
    onChange: () => void,
    hooks?: ModuleProcessHooks,
    cgroups?: ModuleCgroups,
  ) {
    this.#launch = launch;
    this.#hooks = hooks;
    this.#logger = logger;
    this.#timings = timings;
    this.#onChange = onChange;
    this.#cgroups = cgroups;
  }

  /** How it is started, now: the launch it was made with, or the one `notify` gave it. */
  get launch(): ModuleLaunch {
    return this.#launch;
  }

  /**
   * Takes `launch` (the same program, its files rendered anew) as its own and sends `signal`, if
   * given, to the running process's group, so it reads its files again; a process that is not
   * running now reads them when it starts. Returns the PID signalled, if any.
   */
  notify(launch: ModuleLaunch, signal?: NodeJS.Signals): number | undefined {
    this.#launch = launch;
    const child = this.#child;
    if (signal === undefined || !this.#running || child?.pid === undefined) return undefined;
    signalGroup(child, signal);
    return child.pid;
  }

  /**
   * Takes `launch` (the same program under other limits) as its own and sets its limits on the
   * cgroup at once: a running module is not restarted for a new limit.
   */
  relimit(launch: ModuleLaunch): void {
    this.#launch = launch;
    if (this.#cgroup === undefined || launch.limits === undefined) return;
    this.#limitCgroup(this.#cgroup, launch.limits);
    this.#log?.say(`mesh agent sets ${this.launch.name}'s limits: ${limitWords(launch.limits)}`);
    this.#onChange();
  }

  /** Starts the module's process. */
  start(): void {
    this.#spawn();
  }

  /** Writes a line about the module to its log, as the agent (`mesh` lines). */
  say(text: string): void {
    this.#log?.say(text);
  }

  /** The module as reported now. */
  status(): ModuleStatus {
    const cgroup = this.#cgroup;
    return {
      name: this.launch.name,
      state: this.#state(),
      ...(this.#running && this.#child?.pid !== undefined ? { pid: this.#child.pid } : {}),
      restarts: this.#restarts,
      ...(this.#lastExit === undefined ? {} : { lastExit: this.#lastExit }),
      log: this.launch.logFile,
      ...(this.launch.isolation === undefined ? {} : { isolation: this.launch.isolation }),
      ...(this.launch.metrics !== undefined && this.#state() === "running"
        ? { metrics: this.launch.metrics }
        : {}),
      ...(this.#state() === "crashing" ? { logTail: this.#logTail() } : {}),
      ...(cgroup === undefined ? {} : { cgroup: cgroup.name }),
      ...(cgroup === undefined || this.launch.limits === undefined ? {} : { limits: this.launch.limits }),
      ...(this.#limitEvent === undefined ? {} : { limitEvent: this.#limitEvent }),
    };
  }

  // Read again only after another exit: a crashing module's status is asked for on every report.
  #tail: { exits: number; lines: string[] } | undefined;
  #logTail(): string[] {
    const exits = this.#restarts + (this.#lastExit === undefined ? 0 : 1);
    if (this.#tail?.exits !== exits) this.#tail = { exits, lines: logTail(this.launch.logFile) };
    return this.#tail.lines;
  }

  /**
   * Says when a module that kept crashing has stopped doing so, and any limit it reached since the
   * last call (a process of it killed for memory, a fork refused); called on the report tick.
   */
  refresh(): void {
    // A main process the kernel just killed (a zombie not yet reaped) is said by its exit instead.
    const pid = this.#child?.pid;
    if (this.#running && pid !== undefined && processStartTime(pid) !== undefined)
      this.#readLimits(undefined);
    if (this.#saidCrashing && this.#state() === "running") {
      this.#saidCrashing = false;
      this.#logger.info(
        `${this.launch.name} has run without exiting for a while: it no longer keeps crashing`,
      );
      this.#onChange();
    }
  }

  /**
   * Stops the process and any restart to come: SIGTERM to its process group, SIGKILL after the
   * grace period; once it has exited, every process left in its cgroup is killed and the cgroup
   * removed. Resolves then. Safe to call twice.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stop();
    return this.#stopping;
  }

  async #stop(): Promise<void> {
    clearTimeout(this.#timer);
    const child = this.#child;
    const ended = this.#ended;
    if (child !== undefined && ended !== undefined) {
      const kill = setTimeout(() => {
        this.#logger.warn(
          `${this.launch.name} did not stop within ${this.#timings.stopGraceMs / 1000} s of SIGTERM: killing it`,
        );
        signalGroup(child, "SIGKILL");
      }, this.#timings.stopGraceMs);
      signalGroup(child, "SIGTERM");
      await ended;
      clearTimeout(kill);
    } else if (ended !== undefined) {
      await ended; // an exit being handled as the stop came
    }
    const cgroup = this.#cgroup;
    if (cgroup !== undefined) {
      await this.#empty(cgroup);
      if (!cgroup.remove())
        this.#sayCgroup("remove", `${this.launch.name}'s cgroup ${cgroup.name} cannot be removed yet`);
    }
    this.#log?.close();
    this.#onChange();
  }

  #state(): ModuleState {
    if (this.#stopping !== undefined) return "stopped";
    if (this.#recentExits() >= this.#timings.crashExits) return "crashing";
    return this.#running ? "running" : "starting";
  }

  #recentExits(): number {
    const since = Date.now() - this.#timings.crashWindowMs;
    this.#exits = this.#exits.filter((t) => t >= since);
    return this.#exits.length;
  }

  #spawn(): void {
    const { name, command, args, cwd, env, logFile, uid, gid } = this.launch;
    for (const stale of this.launch.staleFiles ?? []) {
      try {
        rmSync(stale, { force: true });
      } catch (err) {
        this.#logger.warn(
          `${name}: ${stale}, left by its last run, cannot be removed (${(err as Error).message})`,
        );
      }
    }
    let log: ModuleLog;
    try {
      const { logMaxBytes: maxBytes, logKeep: keep, logFormat: format } = this.#timings;
      const limits = { maxBytes, keep, format };
      log = this.#log ??= new ModuleLog(logFile, limits);
      log.say(`mesh agent starts ${name}: ${command} ${args.join(" ")}`);
    } catch (err) {
      this.#exited(null, null, `its log ${logFile} cannot be opened (${(err as Error).message})`);
      return;
    }
    const user = uid === undefined || gid === undefined ? undefined : { uid, gid };
    const cgroup = this.#makeCgroup();
    const confined = cgroup === undefined ? undefined : this.#cgroups?.confine(cgroup, command, args, user);
    let child: ChildProcess;
    try {
      // Its own process group, so stopping it reaches whatever it started too.
      // Piped, so each line is timestamped as it comes and the file rotates (module-log.ts); as its
      // own user when it has one (libuv drops the agent's supplementary groups with it). In a
      // cgroup, the process joins it as root before it becomes the module (module-cgroups.ts).
      const joinsFirst = confined?.joinsFirst === true;
      child = spawn(joinsFirst ? confined.command : command, joinsFirst ? [...confined.args] : [...args], {
        cwd,
        env,
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
        ...(joinsFirst || user === undefined ? {} : user),
      });
      if (cgroup !== undefined && !joinsFirst && child.pid !== undefined) {
        this.#sayCgroup(
          "late",
          `${name} joins its cgroup just after it starts (setpriv, from util-linux, is not installed): ` +
            `what it forks in that instant stays out of it`,
        );
        try {
          cgroup.join(child.pid);
        } catch (err) {
          this.#sayCgroup(
            "join",
            `${name} could not join its cgroup ${cgroup.name}: ${(err as Error).message}`,
          );
        }
      }
    } catch (err) {
      this.#exited(null, null, `it cannot be started (${(err as Error).message})`);
      return;
    }
    if (child.stdout) log.follow(child.stdout, "out");
    if (child.stderr) log.follow(child.stderr, "err");
    this.#child = child;
    this.#startedAt = Date.now();
    const pid = child.pid;
    if (pid !== undefined) this.#hooks?.started(name, pid);
    let ended = false;
    let settle!: () => void;
    this.#ended = new Promise<void>((resolve) => (settle = resolve));
    child.once("spawn", () => {
      this.#running = true;
      this.#logger.info(`${name} started (pid ${child.pid}); its log: ${logFile}`);
      this.#onChange();
    });
    child.once("error", (err) => {
      // An error without a pid is a process that never ran (command not found): no exit follows.
      if (child.pid !== undefined || ended) return;
      ended = true;
      this.#exited(null, null, `${command} cannot be started (${err.message})`);
      settle();
    });
    child.once("exit", (code, signal) => {
      if (pid !== undefined) this.#hooks?.exited(name, pid);
      if (ended) return;
      ended = true;
      this.#running = false;
      void this.#afterExit(code, signal).finally(settle);
    });
    this.#onChange();
  }

  // The main process has exited: what reached a limit is said, and what it left in its cgroup is
  // ended before anything else (a restart, the end of a stop), as a unit's processes end with it.
  async #afterExit(code: number | null, signal: NodeJS.Signals | null): Promise<void> {
    const event = this.#readLimits(signal);
    const cgroup = this.#cgroup;
    if (cgroup !== undefined) await this.#empty(cgroup);
    this.#exited(code, signal, event?.kind === "out-of-memory" ? event.text : undefined);
  }

  // Every process left in its cgroup is killed; said when there were any.
  async #empty(cgroup: ModuleCgroup): Promise<void> {
    const left = cgroup.members();
    if (left.length === 0) return;
    const stuck = await cgroup.kill();
    this.#log?.say(
      `mesh agent ended ${left.length} process(es) ${this.launch.name} left in its cgroup ${cgroup.name}` +
        (stuck.length > 0 ? `; ${stuck.length} still there (pid ${stuck.join(", ")})` : ""),
    );
    if (stuck.length > 0) {
      this.#logger.warn(
        `${this.launch.name}'s cgroup ${cgroup.name} still holds pid ${stuck.join(", ")} after SIGKILL`,
      );
    }
  }

  // Its cgroup, made (once) and given the launch's limits before each start; undefined (and said
  // once) when modules get none or this one cannot be made: it then runs without.
  #makeCgroup(): ModuleCgroup | undefined {
    const cgroups = this.#cgroups;
    if (cgroups === undefined || !cgroups.available) return undefined;
    const cgroup = (this.#cgroup ??= cgroups.forModule(this.launch.name));
    if (cgroup === undefined) return undefined;
    try {
      cgroup.make();
    } catch (err) {
      this.#cgroup = undefined;
      this.#sayCgroup(
        "make",
        `${this.launch.name} runs without a cgroup, so without limits: ${(err as Error).message}`,
      );
      return undefined;
    }
    this.#limitCgroup(cgroup, this.launch.limits);
    this.#counters = cgroup.counters();
    return cgroup;
  }

  #limitCgroup(cgroup: ModuleCgroup, limits: EffectiveLimits | undefined): void {
    if (limits === undefined) return;
    const unset = cgroup.limit(limits);
    if (unset.length > 0) {
      this.#sayCgroup(
        `unset ${unset.join()}`,
        `${this.launch.name} runs without ${unset.join(", ")}: this node's cgroups cannot bound them`,
      );
    }
  }

  // Reads its cgroup's counters: a limit reached since the last read is said in its log and the
  // agent's, and kept for its status. `signal` is how its main process just ended, when it did.
  #readLimits(signal: NodeJS.Signals | null | undefined): LimitEvent | undefined {
    const cgroup = this.#cgroup;
    if (cgroup === undefined) return undefined;
    const now = cgroup.counters();
    const before = this.#counters;
    this.#counters = now;
    const limits = this.launch.limits;
    let event: LimitEvent | undefined;
    const at = new Date().toISOString();
    if (now.pidsMax > before.pidsMax) {
      const limit = limits?.pids == null ? "" : ` ${limits.pids}`;
      const text = `pids limit${limit} reached: its forks past it are refused`;
      event = { kind: "pids", text, at };
    }
    const memory = limits?.memory == null ? "" : ` (limit ${formatSize(limits.memory)})`;
    if (now.oomKills > before.oomKills) {
      this.#oomSeenAt = Date.now();
      const text =
        signal === "SIGKILL"
          ? `killed: out of memory${memory}`
          : `${now.oomKills - before.oomKills} of its processes killed: out of memory${memory}`;
      event = { kind: "out-of-memory", text, at };
    } else if (signal === "SIGKILL" && Date.now() - this.#oomSeenAt < OOM_EXIT_WITHIN_MS) {
      // The kill was read a moment before the exit it caused: the exit is the out of memory.
      event = { kind: "out-of-memory", text: `killed: out of memory${memory}`, at };
    }
    if (event !== undefined) {
      this.#limitEvent = event;
      this.#log?.say(`mesh agent: ${this.launch.name} ${event.text}`);
      this.#logger.warn(`${this.launch.name} ${event.text}; its log: ${this.launch.logFile}`);
      this.#onChange();
    }
    return event;
  }

  #sayCgroup(key: string, message: string): void {
    if (this.#saidCgroup.has(key)) return;
    this.#saidCgroup.add(key);
    this.#logger.warn(message);
    this.#log?.say(`mesh agent: ${message}`);
  }

  #exited(code: number | null, signal: NodeJS.Signals | null, why?: string): void {
    this.#running = false;
    this.#child = undefined;
    this.#lastExit = { code, signal, at: new Date().toISOString() };
    if (this.#stopping !== undefined) {
      this.#logger.info(`${this.launch.name} stopped`);
      this.#onChange();
      return;
    }
    const ranMs = this.#startedAt === 0 ? 0 : Date.now() - this.#startedAt;
    // A run longer than the longest delay was a working module that failed once, not a crash loop.
    this.#failures = ranMs >= this.#timings.restartMaxMs ? 1 : this.#failures + 1;
    this.#exits.push(Date.now());
    const delay = Math.min(
      this.#timings.restartFirstMs * 2 ** (this.#failures - 1),
      this.#timings.restartMaxMs,
    );
    const how = why ?? (signal !== null ? `was killed by ${signal}` : `exited with code ${code}`);
    const recent = this.#recentExits();
    if (recent >= this.#timings.crashExits && !this.#saidCrashing) {
      this.#saidCrashing = true;
      this.#logger.error(
        `${this.launch.name} keeps crashing: ${recent} exits in ${formatMs(this.#timings.crashWindowMs)}, ` +
          `last ${lastExitWords(code, signal, why)}; its log: ${this.launch.logFile}`,
      );
    } else {
      this.#logger.warn(
        `${this.launch.name} ${how}; restarting it in ${formatMs(delay)}; its log: ${this.launch.logFile}`,
      );
    }
    this.#timer = setTimeout(() => {
      this.#restarts++;
      this.#spawn();
    }, delay);
    this.#onChange();
  }
}

/** A module's limits in words, the bounded ones only: `pids 100, memory 64M` (or `none`). */
export function limitWords(limits: EffectiveLimits): string {
  const bounded = (["pids", "memory", "cpu", "home"] as const).filter((k) => limits[k] !== null);
  return bounded.length === 0 ? "none" : bounded.map((k) => formatLimit(k, limits[k])).join(", ");
}

function lastExitWords(code: number | null, signal: string | null, why: string | undefined): string {
  if (why !== undefined) return `failure: ${why}`;
  return signal !== null ? `killed by ${signal}` : `exit code ${code}`;
}

function formatMs(ms: number): string {
  if (ms >= 60_000 && ms % 60_000 === 0) return `${ms / 60_000} min`;
  return ms >= 1_000 ? `${Math.round(ms / 100) / 10} s` : `${ms} ms`;
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, signal);
  } catch {
    // The group is gone (it exited meanwhile), or the child is not a group leader: signal it alone.
    child.kill(signal);
  }
}
