import type { Adapter } from "./adapter.ts";
import type { ActionLog, Announcer, Clock, Logger } from "./collaborators.ts";
import type { ProvisionerTools } from "./tools.ts";

/** Settings of one provisioner loop; every duration is in milliseconds. */
export interface ProvisionerOptions {
  /** The contributions file the mesh writes for this interface. */
  readonly receives: string;
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
  /** Watch the contributions file's directory and the secret files (true). */
  readonly watch?: boolean;
  readonly clock?: Clock;
  readonly logger?: Logger;
  readonly announcer?: Announcer;
  readonly actions?: ActionLog;
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
  /** Stops the loop and the watchers, waits for a running pass, closes the adapter. */
  stop(): Promise<void>;
}

/**
 * Runs the reconcile loop for one provided interface (DESIGN §3) until `stop()`.
 * Being written: the contract above is final.
 */
export function runProvisioner(
  _iface: string,
  _adapter: Adapter,
  _options: ProvisionerOptions,
): ProvisionerHandle {
  throw new Error("runProvisioner is being written");
}
