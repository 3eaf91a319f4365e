// How a module of this node is started, derived from its manifest's `run` and the plan: the
// environment is the contract between the agent and every module, so it is built in one place.
import { dirname, join } from "node:path";
import { credentialPath, loadManifest, receivesPath } from "@mesh/manifest";
import type { DeliveredModule, Delivery } from "@mesh/manifest";
import type { ModuleLaunch } from "./module-process.ts";

/** What the agent knows of itself when it starts a module. */
export interface LaunchContext {
  readonly node: string;
  readonly stateDir: string;
  /** The environment every module inherits (the agent's own, by default). */
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
}

/** A module's launch, or why it is not started (its manifest has no `run`, or cannot be read). */
export type LaunchDecision =
  | { readonly kind: "run"; readonly launch: ModuleLaunch }
  | { readonly kind: "not-run"; readonly why: string }
  | { readonly kind: "unreadable"; readonly why: string };

/** `<state>/modules/<name>/log`. */
export function moduleLogPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "log");
}

/** `<state>/modules/<name>/control.sock`: where the module answers its tools. */
export function moduleControlPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "control.sock");
}

/**
 * The environment of `module` (without the base): MESH_NODE, MESH_MODULE, MESH_STATE_DIR (the
 * node's state directory), MESH_INSTANCE, MESH_CONTROL, and MESH_RECEIVES (its first provided
 * interface's contributions file) and MESH_CREDENTIALS (its credential files' directory) when it
 * provides or needs anything in the plan.
 */
export function moduleEnv(module: string, delivery: Delivery, ctx: LaunchContext): Record<string, string> {
  const env: Record<string, string> = {
    MESH_NODE: ctx.node,
    MESH_MODULE: module,
    MESH_STATE_DIR: ctx.stateDir,
    MESH_INSTANCE: module,
    MESH_CONTROL: moduleControlPath(ctx.stateDir, module),
  };
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
  try {
    run = (await loadManifest(module.manifest)).run;
  } catch (err) {
    return { kind: "unreadable", why: err instanceof Error ? err.message : String(err) };
  }
  if (run === undefined) {
    return { kind: "not-run", why: `its manifest ${module.manifest} has no "run"` };
  }
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(ctx.baseEnv)) {
    // What the agent itself was given for a module of its own must not leak into another module.
    if (value !== undefined && key !== "MESH_RECEIVES" && key !== "MESH_CREDENTIALS") env[key] = value;
  }
  Object.assign(env, moduleEnv(module.name, delivery, ctx));
  return {
    kind: "run",
    launch: {
      name: module.name,
      command: run.command,
      args: run.args,
      cwd: dirname(module.manifest),
      env,
      logFile: moduleLogPath(ctx.stateDir, module.name),
    },
  };
}
