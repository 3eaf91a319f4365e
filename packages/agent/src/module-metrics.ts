// Where each running module serves its metrics, as it said in its metrics.url: read at every
// report (the agent also watches the files, so a new URL is reported at once, not at the next tick).
import { closeSync, readSync } from "node:fs";
import { METRICS_URL_MAX_LENGTH, metricsUrlOf, metricsUrlPath } from "@mesh/sdk/provider";
import type { ModuleStatus } from "./module-process.ts";
import { openModuleFileSync } from "./safe-open.ts";

/**
 * The metrics URL `module` wrote to its `metricsUrlPath` under `stateDir`, or undefined when there
 * is none (it serves no metrics, has not started serving them, or wrote something that is not an
 * http(s) URL). Reads at most `METRICS_URL_MAX_LENGTH` bytes; never throws.
 */
export function readModuleMetricsUrl(stateDir: string, module: string): string | undefined {
  let fd: number | undefined;
  try {
    // In the module's own directory: never through a link it planted, only its own regular file.
    fd = openModuleFileSync(metricsUrlPath(stateDir, module));
    const buffer = Buffer.alloc(METRICS_URL_MAX_LENGTH + 2);
    const read = readSync(fd, buffer, 0, buffer.length, 0);
    return metricsUrlOf(buffer.subarray(0, read).toString("utf8"));
  } catch {
    return undefined;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * `statuses` with the metrics URL of each running module that serves metrics. A module that is not
 * running has none: the file its last process left may name a port nobody listens on any more.
 */
export function withMetricsUrls(stateDir: string, statuses: readonly ModuleStatus[]): ModuleStatus[] {
  return statuses.map((s) => {
    if (s.state !== "running") return s;
    const metrics = readModuleMetricsUrl(stateDir, s.name);
    return metrics === undefined ? s : { ...s, metrics };
  });
}
