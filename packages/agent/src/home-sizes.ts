// How much disk each module's home takes, measured the way `du` does (blocks in use, each hard link
// once, symlinks not followed, one filesystem), by `du` itself: a walk in native code, outside the
// agent's event loop, bounded in time. Measured one module at a time, about once a minute: a home
// of many files costs a moment of one core now and then, never a stalled agent.
import { execFile } from "node:child_process";
import { moduleHomePath } from "@mesh/manifest";
import type { BusLogger } from "@mesh/bus";

/** A home's size as last measured. */
export interface HomeSize {
  /** Bytes of disk in use. */
  readonly bytes: number;
  /** ISO 8601: when it was measured. */
  readonly at: string;
}

/** Measures the disk in use under `dir`, in bytes; undefined when it cannot be measured now. */
export type MeasureHome = (dir: string) => Promise<number | undefined>;

/** How often each home is measured, by default: once a minute. */
export const HOME_MEASURE_EVERY_MS = 60_000;
/** How long one home's measure may take before it is given up (its size is then not known this round). */
export const HOME_MEASURE_TIMEOUT_MS = 30_000;

/**
 * `du -s -x -B1 DIR` with a time bound. A home where some directory cannot be read still gives
 * the size of what could (du says so and exits 1): at least that much is in use.
 */
export function measureWithDu(timeoutMs = HOME_MEASURE_TIMEOUT_MS): MeasureHome {
  return (dir) =>
    new Promise((resolve) => {
      execFile(
        "du",
        ["-s", "-x", "-B1", "--", dir],
        { env: { PATH: "/usr/bin:/bin", LC_ALL: "C" }, timeout: timeoutMs, encoding: "utf8" },
        (err, stdout) => {
          const m = /^(\d+)\s/.exec(stdout);
          const timedOut = err !== null && (err as { killed?: boolean }).killed === true;
          resolve(m === null || timedOut ? undefined : Number(m[1]));
        },
      );
    });
}

/** What `HomeSizes` is made with. */
export interface HomeSizesOptions {
  readonly stateDir: string;
  readonly logger: BusLogger;
  /** Called after each round that changed a size. */
  readonly onMeasured: () => void;
  /** How long between rounds (HOME_MEASURE_EVERY_MS). */
  readonly everyMs?: number;
  /** How a home is measured (`measureWithDu` by default). */
  readonly measure?: MeasureHome;
}

/** The sizes of one node's module homes, measured in rounds. `start` once, `stop` at the end. */
export class HomeSizes {
  readonly #o: HomeSizesOptions;
  readonly #measure: MeasureHome;
  readonly #sizes = new Map<string, HomeSize>();
  readonly #said = new Set<string>();
  #modules: readonly string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #round: Promise<void> | undefined;
  #stopped = false;

  constructor(options: HomeSizesOptions) {
    this.#o = options;
    this.#measure = options.measure ?? measureWithDu();
  }

  /** The modules whose homes are measured from the next round on. */
  watch(modules: readonly string[]): void {
    this.#modules = [...modules];
    for (const name of this.#sizes.keys()) if (!modules.includes(name)) this.#sizes.delete(name);
  }

  /** `module`'s home size as last measured, if it has been. */
  size(module: string): HomeSize | undefined {
    return this.#sizes.get(module);
  }

  /** Measures every home now, then a round every `everyMs` after the last one ended. */
  start(): void {
    if (this.#stopped || this.#round !== undefined) return;
    this.#round = this.#measureAll().finally(() => {
      this.#round = undefined;
      if (!this.#stopped)
        this.#timer = setTimeout(() => this.start(), this.#o.everyMs ?? HOME_MEASURE_EVERY_MS);
    });
  }

  /** Stops measuring; resolves once a round under way has ended. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#round;
  }

  async #measureAll(): Promise<void> {
    let changed = false;
    for (const module of this.#modules) {
      if (this.#stopped) return;
      const bytes = await this.#measure(moduleHomePath(this.#o.stateDir, module));
      if (bytes === undefined) {
        if (!this.#said.has(module)) {
          this.#said.add(module);
          this.#o.logger.warn(
            `the size of ${module}'s home cannot be measured now (du failed or took longer than it may): ` +
              `its home limit is not checked until it can be`,
          );
        }
        continue;
      }
      this.#said.delete(module);
      if (this.#sizes.get(module)?.bytes !== bytes) changed = true;
      this.#sizes.set(module, { bytes, at: new Date().toISOString() });
    }
    if (changed) this.#o.onMeasured();
  }
}
