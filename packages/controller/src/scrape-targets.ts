// Where Prometheus finds the mesh: a file_sd JSON the controller keeps, listing its own /metrics and
// every running module's that serves metrics (a provider, from the metrics.url it wrote; an app that
// names {module.metrics}, from the address the agent gave it), as the nodes report them. Rewritten
// atomically when a module comes, goes or moves to another port; Prometheus reads it again on its
// own (file_sd_configs), so its scrape configuration never names a port.
import { chmod, mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { writeFileAtomic } from "@mesh/bus";
import type { ControllerStatus } from "./controller-status.ts";

/** One group of a Prometheus file_sd file: addresses, and the labels every one of them gets. */
export interface ScrapeTargetGroup {
  readonly targets: readonly string[];
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * The file_sd groups for `status`: the controller's `/metrics` at `controllerUrl` (when given)
 * labelled `mesh="controller"`, then each running module with a metrics URL, labelled
 * `mesh="module"`, `module` and `node`, sorted by node and module. A path other than `/metrics` is
 * carried as `__metrics_path__`.
 */
export function scrapeTargetGroups(
  status: ControllerStatus,
  controllerUrl: string | undefined,
): ScrapeTargetGroup[] {
  const groups: ScrapeTargetGroup[] = [];
  const group = (url: string, labels: Record<string, string>): void => {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return;
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") return;
    const path = u.pathname === "/" ? "/metrics" : u.pathname;
    groups.push({
      targets: [u.host],
      labels: {
        ...labels,
        ...(path === "/metrics" ? {} : { __metrics_path__: path }),
        ...(u.protocol === "https:" ? { __scheme__: "https" } : {}),
      },
    });
  };
  if (controllerUrl !== undefined)
    group(new URL("/metrics", controllerUrl).toString(), { mesh: "controller" });
  const modules = status.nodes
    .flatMap((n) => n.modules.map((m) => ({ node: n.name, m })))
    .filter(({ m }) => m.state === "running" && typeof m.metrics === "string")
    .sort((a, b) => (a.node === b.node ? cmp(a.m.name, b.m.name) : cmp(a.node, b.node)));
  for (const { node, m } of modules) group(m.metrics ?? "", { mesh: "module", module: m.name, node });
  return groups;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** What `keepScrapeTargets` is given. */
export interface ScrapeTargetsOptions {
  /** The file to keep: world-readable (0644, in a 0755 directory), since it names no secret. */
  readonly file: string;
  readonly status: () => ControllerStatus;
  /** The controller's HTTP server (`http://127.0.0.1:PORT`), whose /metrics is the first target. */
  readonly controllerUrl?: string;
  /** How often the status is looked at (default 1 s). */
  readonly everyMs?: number;
  readonly onError?: (err: Error) => void;
}

/** The kept file: `stop()` ends the refreshing (the file stays, for the next start to rewrite). */
export interface ScrapeTargets {
  /** Writes the file now when the targets changed; resolves once it is written. */
  refresh(): Promise<void>;
  stop(): void;
}

/**
 * Keeps `options.file` holding `scrapeTargetGroups` of the controller's status: written at once,
 * then again whenever the groups change, always by an atomic rename, so Prometheus never reads
 * half a file.
 */
export async function keepScrapeTargets(options: ScrapeTargetsOptions): Promise<ScrapeTargets> {
  const dir = dirname(options.file);
  await mkdir(dir, { recursive: true, mode: 0o755 });
  await chmod(dir, 0o755);
  let last: string | undefined;
  let writing: Promise<void> = Promise.resolve();
  const refresh = (): Promise<void> => {
    writing = writing.then(async () => {
      const text = `${JSON.stringify(scrapeTargetGroups(options.status(), options.controllerUrl), null, 2)}\n`;
      if (text === last) return;
      await writeFileAtomic(options.file, text, 0o644);
      last = text;
    });
    return writing.catch((err: unknown) => {
      options.onError?.(err instanceof Error ? err : new Error(String(err)));
    });
  };
  await refresh();
  const timer = setInterval(() => void refresh(), options.everyMs ?? 1_000);
  timer.unref();
  return {
    refresh,
    stop: () => clearInterval(timer),
  };
}
