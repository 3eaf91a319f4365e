// Where a provider run by the agent says its /metrics server really listens: the agent gives it
// a free port, so only the provider knows the port, and it writes the URL to a file beside the
// module's other files for the agent to report. The file says nothing secret.
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "@mesh/bus/files";
import { moduleHomePath } from "@mesh/manifest";

/** The longest metrics URL read back; a URL longer than this is not one a provider wrote. */
export const METRICS_URL_MAX_LENGTH = 2_048;

/**
 * `<state>/modules/<module>/home/metrics.url` (in the module's own writable directory): where a
 * provider run by the agent writes the URL of its /metrics server, once it listens, and removes it
 * on a clean stop.
 * @throws StateDirError for a state directory that is not absolute; InvalidNameError for a bad module name.
 */
export function metricsUrlPath(stateDir: string, module: string): string {
  return join(moduleHomePath(stateDir, module), "metrics.url");
}

/**
 * `text` as a metrics URL: an http or https URL with no user or password, at most
 * `METRICS_URL_MAX_LENGTH` long, surrounding whitespace dropped. Undefined for anything else, so
 * what is shown as a link can only ever be a web address.
 */
export function metricsUrlOf(text: unknown): string | undefined {
  if (typeof text !== "string") return undefined;
  const trimmed = text.trim();
  if (trimmed.length === 0 || trimmed.length > METRICS_URL_MAX_LENGTH || !URL.canParse(trimmed)) {
    return undefined;
  }
  const url = new URL(trimmed);
  if (url.protocol !== "http:" && url.protocol !== "https:") return undefined;
  if (url.username !== "" || url.password !== "") return undefined;
  return url.href;
}

/**
 * Writes `url` to `path` atomically (0644: it is not secret), its directory made when missing.
 * @throws FileWriteError (from @mesh/bus) when it cannot be written.
 */
export async function writeMetricsUrl(path: string, url: string): Promise<void> {
  await writeFileAtomic(path, `${url}\n`, 0o644);
}

/** Removes the metrics URL file at `path`; nothing when it is not there. Never throws. */
export async function removeMetricsUrl(path: string): Promise<void> {
  await rm(path, { force: true }).catch(() => undefined);
}
