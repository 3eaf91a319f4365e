// The set of modules this node runs, brought in line with each delivery: new ones started, those no
// longer assigned stopped, those whose command or environment changed restarted, the rest untouched.
// A module whose bus credential has not come yet is held back: it starts once, with it.
import type { BusLogger } from "@mesh/bus";
import type { ModuleCgroups } from "./module-cgroups.ts";
import type { LaunchDecision } from "./module-launch.ts";
import { ModuleLog } from "./module-log.ts";
import type { ProcessRecords } from "./process-records.ts";
import { processStartTime } from "./process-records.ts";
import {
  ModuleProcess,
  type LimitEvent,
  type ModuleLaunch,
  type ModuleProcessHooks,
  type ModuleStatus,
  type SupervisionTimings,
} from "./module-process.ts";

/** One module the delivery assigns to this node, and how (or whether) to start it. */
export interface AssignedModule {
  readonly name: string;
  readonly logFile: string;
  readonly decision: LaunchDecision;
  /**
   * What it waits for before its first start ("its bus credential"): a module not running yet is
   * not started; one already running is left as it is.
   */
  readonly waiting?: string;
  /**
   * A limit it passed that keeps it stopped (its home over `limits.home`) until it no longer does:
   * one running is stopped, one not running is not started.
   */
  readonly held?: LimitEvent;
}

/** Supervises every module of one node. Calls to `reconcile` and `stopAll` must not overlap. */
export class ModuleSupervisor {
  readonly #logger: BusLogger;
  readonly #timings: SupervisionTimings;
  readonly #onChange: () => void;
  readonly #running = new Map<string, ModuleProcess>();
  /** Assigned modules the agent does not start, with the log path they would have and why. */
  readonly #idle = new Map<string, { log: string; why: string }>();
  /** Assigned modules held back before their first start: their log path and what they wait for. */
  readonly #waiting = new Map<string, { log: string; why: string }>();
  /** Assigned modules kept stopped for a limit they passed: their log path and that limit. */
  readonly #held = new Map<string, { log: string; event: LimitEvent }>();
  readonly #said = new Set<string>();
  readonly #hooks: ModuleProcessHooks | undefined;
  readonly #cgroups: ModuleCgroups | undefined;

  /**
   * `records`, when given, holds every module process this supervisor starts, while it runs;
   * `cgroups`, when given, puts each module in a cgroup of its own.
   */
  constructor(
    logger: BusLogger,
    timings: SupervisionTimings,
    onChange: () => void,
    records?: ProcessRecords,
    cgroups?: ModuleCgroups,
  ) {
    this.#logger = logger;
    this.#timings = timings;
    this.#onChange = onChange;
    this.#hooks = records === undefined ? undefined : recordingHooks(records, logger);
    this.#cgroups = cgroups;
  }

  /**
   * Brings the running modules in line with `assigned`: each module's stop, restart or start runs
   * beside the others', so a change of many modules takes one grace period, not one each.
   */
  async reconcile(assigned: readonly AssignedModule[]): Promise<void> {
    const names = new Set(assigned.map((m) => m.name));
    const stopping: Promise<void>[] = [];
    for (const [name, process] of this.#running) {
      if (names.has(name)) continue;
      this.#logger.info(`stopping ${name}: it is no longer assigned to this node`);
      this.#running.delete(name);
      stopping.push(process.stop());
    }
    for (const name of this.#idle.keys()) if (!names.has(name)) this.#idle.delete(name);
    for (const name of this.#waiting.keys()) if (!names.has(name)) this.#waiting.delete(name);
    for (const name of this.#held.keys()) if (!names.has(name)) this.#held.delete(name);
    await Promise.all(stopping);
    await Promise.all(assigned.map((module) => this.#bringInLine(module)));
    this.#onChange();
  }

  async #bringInLine(module: AssignedModule): Promise<void> {
    const current = this.#running.get(module.name);
    const { decision } = module;
    if (module.held !== undefined) {
      await this.#hold(module, module.held, current);
      return;
    }
    if (this.#held.delete(module.name)) {
      this.#logger.info(`${module.name} no longer passes its limit: it may start again`);
    }
    if (module.waiting !== undefined && current === undefined && decision.kind === "run") {
      if (this.#waiting.get(module.name)?.why !== module.waiting) {
        this.#logger.info(`${module.name} waits for ${module.waiting} before it starts`);
      }
      this.#waiting.set(module.name, { log: module.logFile, why: module.waiting });
      return;
    }
    this.#waiting.delete(module.name);
    if (decision.kind === "unreadable") {
      // The last good launch stands: a manifest being edited must not take a running module down.
      this.#sayOnce(
        "warn",
        `unreadable ${module.name} ${decision.why}`,
        `${decision.what ?? `module ${module.name}'s manifest cannot be read`}, so it is ${current ? "left running as it was" : "not started"}: ${decision.why}`,
      );
      if (current === undefined) this.#idle.set(module.name, { log: module.logFile, why: decision.why });
      return;
    }
    if (decision.kind === "not-run") {
      this.#sayOnce(
        "info",
        `not-run ${module.name}`,
        `${module.name} is not started by the agent (${decision.why}); its files are written all the same`,
      );
      if (current !== undefined) {
        this.#running.delete(module.name);
        await current.stop();
      }
      this.#idle.set(module.name, { log: module.logFile, why: decision.why });
      return;
    }
    this.#idle.delete(module.name);
    if (
      current !== undefined &&
      (module.waiting !== undefined || sameLaunch(current.launch, decision.launch))
    ) {
      // New limits alone are set on its cgroup as it runs.
      if (module.waiting === undefined && !sameLimits(current.launch, decision.launch)) {
        current.relimit(decision.launch);
      }
      return;
    }
    if (current !== undefined && sameProgram(current.launch, decision.launch)) {
      // Only its rendered files changed: a new password its provider has applied.
      const how = decision.launch.onNewPassword ?? { kind: "restart" };
      if (how.kind !== "restart") {
        const signal = how.kind === "signal" ? (how.signal as NodeJS.Signals) : undefined;
        const pid = current.notify(decision.launch, signal);
        this.#logger.info(
          `${module.name}'s files were rendered with a password its provider has applied: ` +
            (signal === undefined
              ? "it is left running (onNewPassword: none)"
              : `sent ${signal} to pid ${pid ?? "none"}`),
        );
        return;
      }
      this.#logger.info(
        `restarting ${module.name}: its files were rendered with a password its provider has applied`,
      );
      await current.stop();
    } else if (current !== undefined) {
      this.#logger.info(`restarting ${module.name}: its command or environment changed`);
      await current.stop();
    }
    const process = new ModuleProcess(
      decision.launch,
      this.#logger,
      this.#timings,
      this.#onChange,
      this.#hooks,
      this.#cgroups,
    );
    this.#running.set(module.name, process);
    process.start();
  }

  // A module past a limit that keeps it stopped: stopped if it runs, said in its log once.
  async #hold(module: AssignedModule, event: LimitEvent, current: ModuleProcess | undefined): Promise<void> {
    this.#waiting.delete(module.name);
    this.#idle.delete(module.name);
    // Said once for each hold, not again at each measure of the same home.
    const before = this.#held.get(module.name);
    const same = before?.event.kind === event.kind;
    this.#held.set(module.name, { log: module.logFile, event: same ? before.event : event });
    if (same && current === undefined) return;
    this.#logger.warn(`${module.name} ${event.text}; its log: ${module.logFile}`);
    if (current !== undefined) {
      current.say(`mesh agent stops ${module.name}: ${event.text}`);
      this.#running.delete(module.name);
      await current.stop();
    } else {
      sayInLog(module.logFile, `mesh agent keeps ${module.name} stopped: ${event.text}`);
    }
  }

  /** Every assigned module as reported now, by name. */
  statuses(): ModuleStatus[] {
    const all: ModuleStatus[] = [...this.#running.values()].map((p) => p.status());
    for (const [name, { log, why }] of this.#idle) {
      all.push({ name, state: "stopped", restarts: 0, log, reason: why });
    }
    for (const [name, { log, why }] of this.#waiting) {
      all.push({ name, state: "starting", restarts: 0, log, waiting: why });
    }
    for (const [name, { log, event }] of this.#held) {
      all.push({ name, state: "stopped", restarts: 0, log, reason: event.text, limitEvent: event });
    }
    return all.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Lets each module say when it has stopped crashing. */
  refresh(): void {
    for (const process of this.#running.values()) process.refresh();
  }

  /** Stops every module (SIGTERM, then SIGKILL after the grace period) and waits for them. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.#running.values()].map((p) => p.stop()));
  }

  #sayOnce(level: "info" | "warn", key: string, message: string): void {
    if (this.#said.has(key)) return;
    this.#said.add(key);
    this.#logger[level](message);
  }
}

// A record is written as soon as the process has a PID, before anything else can happen to it.
function recordingHooks(records: ProcessRecords, logger: BusLogger): ModuleProcessHooks {
  return {
    started(name, pid) {
      const start = processStartTime(pid);
      try {
        if (start !== undefined) records.add({ kind: "module", name, pid, start });
      } catch (err) {
        logger.warn(
          `${name} (pid ${pid}) could not be recorded in ${records.path}: ${(err as Error).message}`,
        );
      }
    },
    exited(_name, pid) {
      try {
        records.remove(pid);
      } catch {
        // kept: the next start finds the PID gone, or reused with another start time
      }
    },
  };
}

function sameProgram(a: ModuleLaunch, b: ModuleLaunch): boolean {
  return (
    JSON.stringify([a.command, a.args, a.cwd, a.env, a.uid, a.gid]) ===
    JSON.stringify([b.command, b.args, b.cwd, b.env, b.uid, b.gid])
  );
}

function sameLaunch(a: ModuleLaunch, b: ModuleLaunch): boolean {
  return sameProgram(a, b) && a.rendered === b.rendered;
}

function sameLimits(a: ModuleLaunch, b: ModuleLaunch): boolean {
  return JSON.stringify(a.limits ?? null) === JSON.stringify(b.limits ?? null);
}

// One line in a module's log while no process of it runs (its log is otherwise opened by its process).
function sayInLog(logFile: string, text: string): void {
  try {
    const log = new ModuleLog(logFile);
    log.say(text);
    log.close();
  } catch {
    // Its log cannot be opened: the agent's own log says it all the same.
  }
}
