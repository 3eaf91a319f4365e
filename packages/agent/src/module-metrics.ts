// Where each running module serves its metrics, as it said in its metrics.url: read at every
// report (the agent also watches the files, so a new URL is reported at once, not at the next tick).
// The file is the module's own words: read no further than a URL can be long, used only when it is
// an http(s) URL, and anything else there counts against the module as a malformed answer.
import { closeSync, readSync } from "node:fs";
import { METRICS_URL_MAX_LENGTH, metricsUrlOf, metricsUrlPath } from "@mesh/sdk/provider";
import type { MisbehavingModules } from "./misbehaving-modules.ts";
import type { ModuleStatus } from "./module-process.ts";
import { openModuleFileSync, UnsafeModuleFileError } from "./safe-open.ts";

/** What the agent asks of a module when it reads its metrics.url, as its book of misbehaviour names it. */
export const METRICS_URL_ANSWER = "metrics.url";

/** What a module's metrics.url says: a URL, nothing (no file), or something that is not one, and what. */
export type MetricsUrlRead =
  | { readonly kind: "url"; readonly url: string }
  | { readonly kind: "none" }
  | { readonly kind: "bad"; readonly what: string };

/**
 * Reads the metrics URL `module` wrote to its `metricsUrlPath` under `stateDir`: at most
 * `METRICS_URL_MAX_LENGTH` bytes, through no link. Never throws.
 */
export function readMetricsUrlFile(stateDir: string, module: string): MetricsUrlRead {
  let fd: number | undefined;
  try {
    // In the module's own directory: never through a link it planted, only its own regular file.
    fd = openModuleFileSync(metricsUrlPath(stateDir, module));
    const buffer = Buffer.alloc(METRICS_URL_MAX_LENGTH + 2);
    const read = readSync(fd, buffer, 0, buffer.length, 0);
    if (read === 0) return { kind: "none" };
    if (read > METRICS_URL_MAX_LENGTH + 1) {
      return { kind: "bad", what: `it is longer than a URL may be (${METRICS_URL_MAX_LENGTH} bytes)` };
    }
    const url = metricsUrlOf(buffer.subarray(0, read).toString("utf8"));
    return url === undefined
      ? { kind: "bad", what: "it is not an http(s) URL without a user or password" }
      : { kind: "url", url };
  } catch (err) {
    if (err instanceof UnsafeModuleFileError) return { kind: "bad", what: err.rule };
    return { kind: "none" };
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * The metrics URL `module` wrote to its `metricsUrlPath` under `stateDir`, or undefined when there
 * is none (it serves no metrics, has not started serving them, or wrote something that is not an
 * http(s) URL). Reads at most `METRICS_URL_MAX_LENGTH` bytes; never throws.
 */
export function readModuleMetricsUrl(stateDir: string, module: string): string | undefined {
  const read = readMetricsUrlFile(stateDir, module);
  return read.kind === "url" ? read.url : undefined;
}

/**
 * `statuses` with the metrics URL of each running module that serves metrics. A module that is not
 * running has none: the file its last process left may name a port nobody listens on any more.
 * A file that is not a URL counts against its module in `misbehaving`, when given.
 */
export function withMetricsUrls(
  stateDir: string,
  statuses: readonly ModuleStatus[],
  misbehaving?: MisbehavingModules,
): ModuleStatus[] {
  return statuses.map((s) => {
    if (s.state !== "running") return s;
    const read = readMetricsUrlFile(stateDir, s.name);
    if (read.kind === "bad") misbehaving?.bad(s.name, METRICS_URL_ANSWER, "malformed", read.what);
    else if (read.kind === "url") misbehaving?.good(s.name, METRICS_URL_ANSWER);
    return read.kind === "url" ? { ...s, metrics: read.url } : s;
  });
}
