// What the long-running commands (`mesh up`, `mesh controller`, `mesh agent`) read from their
// flags before anything starts: how long a module has to stop, and how modules are isolated. Apart
// from mesh-daemon.ts, which runs the daemon, so that building the program does not load it.
import type { IsolationMode } from "@mesh/agent";
import { parseDuration } from "@mesh/sdk/duration";
import { CliExit, EXIT_USAGE } from "./exit-codes.ts";

/** How long a module has after SIGTERM before SIGKILL, when `--grace` does not say. */
export const DEFAULT_GRACE = "10s";

/** How much longer than the grace period a whole stop may take: the agents, the controller, the bus. */
export const STOP_MARGIN_MS = 4_000;

/**
 * `--grace` in milliseconds (`DEFAULT_GRACE` when absent).
 * @throws CliExit (usage) for a value that is not a duration.
 */
export function graceOf(text: string | undefined): number {
  try {
    return parseDuration(text ?? DEFAULT_GRACE);
  } catch (err) {
    throw new CliExit(EXIT_USAGE, `--grace: ${(err as Error).message}`);
  }
}

/**
 * `--isolation`: strict or auto.
 * @throws CliExit (usage) for anything else.
 */
export function isolationOf(value: string): IsolationMode {
  if (value === "strict" || value === "auto") return value;
  throw new CliExit(EXIT_USAGE, `--isolation must be strict or auto, not ${JSON.stringify(value)}`);
}
