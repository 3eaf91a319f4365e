// The set of modules this node runs, brought in line with each delivery: new ones started, those no
// longer assigned stopped, those whose command or environment changed restarted, the rest untouched.
import type { BusLogger } from "@mesh/bus";
import type { LaunchDecision } from "./module-launch.ts";
import {
  ModuleProcess,
  type ModuleLaunch,
  type ModuleStatus,
  type SupervisionTimings,
} from "./module-process.ts";

/** One module the delivery assigns to this node, and how (or whether) to start it. */
export interface AssignedModule {
  readonly name: string;
  readonly logFile: string;
  readonly decision: LaunchDecision;
}

/** Supervises every module of one node. Calls to `reconcile` and `stopAll` must not overlap. */
export class ModuleSupervisor {
  readonly #logger: BusLogger;
  readonly #timings: SupervisionTimings;
  readonly #onChange: () => void;
  readonly #running = new Map<string, ModuleProcess>();
  /** Assigned modules the agent does not start, with the log path they would have. */
  readonly #idle = new Map<string, string>();
  readonly #said = new Set<string>();

  constructor(logger: BusLogger, timings: SupervisionTimings, onChange: () => void) {
    this.#logger = logger;
    this.#timings = timings;
    this.#onChange = onChange;
  }

  /** Brings the running modules in line with `assigned`. */
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
    await Promise.all(stopping);

    for (const module of assigned) {
      const current = this.#running.get(module.name);
      const { decision } = module;
      if (decision.kind === "unreadable") {
        // The last good launch stands: a manifest being edited must not take a running module down.
        this.#sayOnce(
          "warn",
          `unreadable ${module.name} ${decision.why}`,
          `${decision.what ?? `module ${module.name}'s manifest cannot be read`}, so it is ${current ? "left running as it was" : "not started"}: ${decision.why}`,
        );
        if (current === undefined) this.#idle.set(module.name, module.logFile);
        continue;
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
        this.#idle.set(module.name, module.logFile);
        continue;
      }
      this.#idle.delete(module.name);
      if (current !== undefined && sameLaunch(current.launch, decision.launch)) continue;
      if (current !== undefined) {
        this.#logger.info(`restarting ${module.name}: its command or environment changed`);
        await current.stop();
      }
      const process = new ModuleProcess(decision.launch, this.#logger, this.#timings, this.#onChange);
      this.#running.set(module.name, process);
      process.start();
    }
    this.#onChange();
  }

  /** Every assigned module as reported now, by name. */
  statuses(): ModuleStatus[] {
    const all: ModuleStatus[] = [...this.#running.values()].map((p) => p.status());
    for (const [name, log] of this.#idle) all.push({ name, state: "stopped", restarts: 0, log });
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

function sameLaunch(a: ModuleLaunch, b: ModuleLaunch): boolean {
  return (
    JSON.stringify([a.command, a.args, a.cwd, a.env, a.uid, a.gid]) ===
    JSON.stringify([b.command, b.args, b.cwd, b.env, b.uid, b.gid])
  );
}
