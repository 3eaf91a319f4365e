// How a module of this node is started, derived from its manifest's `run` and the plan: the
// environment is the contract between the agent and every module, so it is built in one place.
import { dirname, join } from "node:path";
import { credentialPath, loadManifest, receivesPath } from "@mesh/manifest";
import { metricsUrlPath } from "@mesh/sdk";
import type { DeliveredModule, Delivery } from "@mesh/manifest";
import { moduleCredsPath } from "./module-keys.ts";
import type { ModuleLaunch } from "./module-process.ts";

/** What the agent knows of itself when it starts a module. */
export interface LaunchContext {
  readonly node: string;
  readonly stateDir: string;
  /** The environment every module inherits (the agent's own, by default). */
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
  /** The bus as modules reach it: absent, no module gets MESH_BUS_*. */
  readonly bus?: ModuleBusAccess;
}

/** What a module needs to connect to the bus with its own credential. */
export interface ModuleBusAccess {
  /** The bus's URLs (the agent's own). */
  readonly servers: readonly string[];
  /**
   * Module -> the bus user (public key) its creds file holds a credential for. A module missing
   * here has no credential yet: it starts without MESH_BUS_* (its events off).
   */
  readonly users: ReadonlyMap<string, string>;
}

// What the agent was given for a module of its own must not leak into another module.
const NOT_INHERITED = new Set([
  "MESH_RECEIVES",
  "MESH_CREDENTIALS",
  "MESH_BUS_SERVERS",
  "MESH_BUS_CREDS",
  "MESH_BUS_USER",
  "MESH_MANIFEST",
  "MESH_SEATS",
]);

/** A module's launch, or why it is not started (its manifest has no `run`, or cannot be read). */
export type LaunchDecision =
  | { readonly kind: "run"; readonly launch: ModuleLaunch }
  | { readonly kind: "not-run"; readonly why: string }
  | { readonly kind: "unreadable"; readonly why: string };

/** `<state>/modules/<name>/log`. */
export function moduleLogPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "log");
}

/** Where a module serves its metrics when the fleet file does not say: loopback, a port the kernel picks. */
export const DEFAULT_MODULE_METRICS = "127.0.0.1:0";

/** `<state>/modules/<name>/control.sock`: where the module answers its tools. */
export function moduleControlPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "control.sock");
}

/**
 * The environment of `module` (without the base): MESH_NODE, MESH_MODULE, MESH_STATE_DIR (the
 * node's state directory), MESH_INSTANCE, MESH_CONTROL, MESH_MANIFEST (its module.json), MESH_SEATS
 * (`seats`, the seats it holds, comma-separated; empty when none), MESH_METRICS (where a provider
 * serves its metrics: the fleet file's `metrics`, else `DEFAULT_MODULE_METRICS`; the provider writes
 * the URL it bound to `metricsUrlPath`), and MESH_RECEIVES (its first
 * provided interface's contributions file) and MESH_CREDENTIALS (its credential files' directory)
 * when it provides or needs anything in the plan. When it has a bus credential: MESH_BUS_SERVERS
 * (comma-separated URLs), MESH_BUS_CREDS (its creds file) and MESH_BUS_USER (the credential's
 * public key, so a replaced credential changes the launch and restarts the module).
 */
export function moduleEnv(
  module: string,
  delivery: Delivery,
  ctx: LaunchContext,
  seats: readonly string[] = [],
): Record<string, string> {
  const env: Record<string, string> = {
    MESH_NODE: ctx.node,
    MESH_MODULE: module,
    MESH_STATE_DIR: ctx.stateDir,
    MESH_INSTANCE: module,
    MESH_CONTROL: moduleControlPath(ctx.stateDir, module),
    MESH_SEATS: seats.join(","),
  };
  const delivered = delivery.modules.find((m) => m.name === module);
  if (delivered !== undefined) env["MESH_MANIFEST"] = delivered.manifest;
  env["MESH_METRICS"] = delivered?.metrics ?? DEFAULT_MODULE_METRICS;
  const user = ctx.bus?.users.get(module);
  if (ctx.bus !== undefined && user !== undefined && ctx.bus.servers.length > 0) {
    env["MESH_BUS_SERVERS"] = ctx.bus.servers.join(",");
    env["MESH_BUS_CREDS"] = moduleCredsPath(ctx.stateDir, module);
    env["MESH_BUS_USER"] = user;
  }
  const provided = delivery.plan.instances.find((i) => i.provider === module);
  if (provided !== undefined) env["MESH_RECEIVES"] = receivesPath(ctx.stateDir, module, provided.interface);
  const need = delivery.plan.instances.flatMap((i) => i.consumers).find((c) => c.consumer === module);
  if (need !== undefined) {
    env["MESH_CREDENTIALS"] = dirname(credentialPath(ctx.stateDir, module, need.interface));
  }
  return env;
}

/**
 * Decides how `module` is started: its manifest's `run` (relative paths read from the manifest's
 * directory), with the base environment and `moduleEnv`.
 */
export async function decideLaunch(
  module: DeliveredModule,
  delivery: Delivery,
  ctx: LaunchContext,
): Promise<LaunchDecision> {
  let run;
  let seats: readonly string[];
  try {
    ({ run, seats } = await loadManifest(module.manifest));
  } catch (err) {
    return { kind: "unreadable", why: err instanceof Error ? err.message : String(err) };
  }
  if (run === undefined) {
    return { kind: "not-run", why: `its manifest ${module.manifest} has no "run"` };
  }
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(ctx.baseEnv)) {
    if (value !== undefined && !NOT_INHERITED.has(key)) env[key] = value;
  }
  // A module holds the seats its manifest declares (the controller grants it the same).
  Object.assign(env, moduleEnv(module.name, delivery, ctx, seats));
  return {
    kind: "run",
    launch: {
      name: module.name,
      command: run.command,
      args: run.args,
      cwd: dirname(module.manifest),
      env,
      logFile: moduleLogPath(ctx.stateDir, module.name),
      staleFiles: [metricsUrlPath(ctx.stateDir, module.name)],
    },
  };
}
