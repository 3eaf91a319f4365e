// How a module of this node is started, derived from its manifest's `run` and the plan: the
// environment is the contract between the agent and every module, so it is built in one place.
import { createHash } from "node:crypto";
import { constants } from "node:fs";
import { access, open, readFile, stat } from "node:fs/promises";
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path";
import { writeFileAtomic, type FileOwner } from "@mesh/bus";
import {
  ADMIN_URL_VARIABLE,
  credentialPath,
  credentialsFor,
  disagrees,
  effectiveLimits,
  formatHostPort,
  moduleHomePath,
  namesMeshTargets,
  namesModuleMetrics,
  parseListenAddress,
  receivesPath,
  renderedFilePath,
  renderRunTemplate,
  secretInterfaces,
  secretsDirPath,
  type AdminUrlSource,
  type Credential,
  type PlanEntry,
  type RunCommand,
} from "@mesh/manifest";
import { metricsUrlPath } from "@mesh/sdk/provider";
import type { DeliveredModule, Delivery } from "@mesh/manifest";
import { deliveredManifestPath, keepDeliveredManifest, manifestOf } from "./delivered-manifest.ts";
import { moduleCredsPath } from "./module-keys.ts";
import { ensureDir, type ModuleIdentity } from "./module-isolation.ts";
import type { ModuleLaunch } from "./module-process.ts";
import type { ScrapeTargetsCopies } from "./scrape-targets-copies.ts";

/** What the agent knows of itself when it starts a module. */
export interface LaunchContext {
  readonly node: string;
  readonly stateDir: string;
  /**
   * The agent's own environment. A module never inherits it: only PATH, LANG and TZ are taken
   * from it, and a variable a provider's fleet entry names as its admin URL (for that provider).
   */
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
  /** The bus as modules reach it: absent, no module gets MESH_BUS_*. */
  readonly bus?: ModuleBusAccess;
  /** Who each module runs as (see `ModuleIsolations`); absent: every module runs as the agent. */
  readonly identity?: (module: string) => ModuleIdentity | undefined;
  /**
   * Whether the backend has accepted `password` for `entry`'s login, asked of its provider on this
   * node. Absent: a password is handed over as delivered.
   */
  readonly passwordApplied?: PasswordGate;
  /**
   * What a provider module of this node says of itself (its node's standing of it, asked again when
   * it has not answered yet): whether it answered, and where it serves. A consumer whose provider's
   * endpoint the fleet left to the manifest (`defaulted`) waits while the provider serves elsewhere
   * than its credential says, so its app never starts against the manifest's default port. A
   * provider that does not answer is not waited for. Absent: not waited for.
   */
  readonly providerSaid?: (
    provider: string,
  ) => Promise<
    | { readonly answered: boolean; readonly serves?: { readonly host: string; readonly port: number } }
    | undefined
  >;
  /**
   * The Prometheus file_sd JSON the controller keeps on this machine (`mesh up`'s), of which a
   * module whose templates name `{mesh.targets}` is given its own copy; absent: a module that
   * names it is not started.
   */
  readonly scrapeTargets?: ScrapeTargetsCopies;
  /**
   * The controller's scrape token on this machine (`mesh up`'s), for a module whose env or files
   * name `{mesh.scrape-token}`; absent: a module that names it is not started.
   */
  readonly scrapeToken?: string;
  /**
   * A port of this node for `module` to serve its metrics on, when its templates name
   * `{module.metrics}` and the fleet gives it port 0 (or nothing): the same port every time it
   * is asked for the same module, so a new launch decision is not a restart.
   */
  readonly metricsPort?: (module: string, host: string) => Promise<number>;
}

/** Asks a provider of this node whether its backend has taken `password` for `entry`'s login. */
export type PasswordGate = (entry: PlanEntry, password: string) => Promise<GateAnswer>;

/** A provider's word on a password: applied, or not yet and why (in words, never the password). */
export type GateAnswer =
  | { readonly applied: true }
  | {
      readonly applied: false;
      readonly why: string;
      /** The provider said its backend holds two passwords at once: the old one works until the new one is taken. */
      readonly overlaps?: boolean;
    };

/** The agent's variables a module gets: what a program needs to find its tools and speak. */
export const PASSED_VARIABLES: readonly string[] = ["PATH", "LANG", "TZ"];

const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin";

/** The largest admin URL file read. */
export const ADMIN_URL_MAX_BYTES = 4_096;

/** A provider's admin URL, as its fleet entry says where it is, cannot be had. */
export class AdminUrlError extends Error {
  override name = "AdminUrlError";
  constructor(
    readonly module: string,
    readonly source: string,
    why: string,
  ) {
    super(
      `the admin URL of ${module} (${source}) ${why}: ${module} is not started until it is; ` +
        `write the URL alone in a file the agent's user owns, mode 0600, or set the variable for the agent`,
    );
  }
}

/** What a module needs to connect to the bus with its own credential. */
export interface ModuleBusAccess {
  /** The bus's URLs (the agent's own). */
  readonly servers: readonly string[];
  /** The bus CA's file when the bus uses TLS (MESH_BUS_CA). */
  readonly caFile?: string;
  /**
   * Module -> the bus user (public key) its creds file holds a credential for. A module missing
   * here has no credential yet: it starts without MESH_BUS_* (its events off).
   */
  readonly users: ReadonlyMap<string, string>;
}

/** A module's launch, or why it is not started (its manifest has no `run`, or cannot be read). */
export type LaunchDecision =
  | {
      readonly kind: "run";
      readonly launch: ModuleLaunch;
      /**
       * What its templates wait for (a provider to apply its new password): nothing is rendered
       * meanwhile, a module not running yet is not started, and one running is left as it is.
       */
      readonly waiting?: string;
    }
  | { readonly kind: "not-run"; readonly why: string }
  | {
      readonly kind: "unreadable";
      readonly why: string;
      /** What cannot be had, when not its manifest ("module store's admin URL cannot be read"). */
      readonly what?: string;
    };

/** `<state>/modules/<name>/log`. */
export function moduleLogPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "log");
}

/** Where a module serves its metrics when the fleet file does not say: loopback, a port the kernel picks. */
export const DEFAULT_MODULE_METRICS = "127.0.0.1:0";

/** `<state>/modules/<name>/home/control.sock` (in its own writable directory): where the module answers its tools. */
export function moduleControlPath(stateDir: string, module: string): string {
  return join(moduleHomePath(stateDir, module), "control.sock");
}

/**
 * The mesh's variables for `module`: HOME (its own writable directory), MESH_NODE, MESH_MODULE,
 * MESH_STATE_DIR (the node's state directory), MESH_INSTANCE, MESH_CONTROL, MESH_MANIFEST (its module.json: the delivered one the agent keeps, or the fleet's path), MESH_SEATS
 * (`seats`, the seats it holds, comma-separated; empty when none), MESH_METRICS (where a provider
 * serves its metrics: the fleet file's `metrics`, else `DEFAULT_MODULE_METRICS`; the provider writes
 * the URL it bound to `metricsUrlPath`), and MESH_RECEIVES (its first
 * provided interface's contributions file) and MESH_CREDENTIALS (its credential files' directory)
 * when it provides or needs anything in the plan, and MESH_SECRETS_DIR (its flat directory of its
 * consumers' passwords) when it provides. When it has a bus credential: MESH_BUS_SERVERS
 * (comma-separated URLs), MESH_BUS_CREDS (its creds file) and MESH_BUS_USER (the credential's
 * public key, so a replaced credential changes the launch and restarts the module), and MESH_BUS_CA
 * (the bus CA's file) when the bus uses TLS.
 */
export function moduleEnv(
  module: string,
  delivery: Delivery,
  ctx: LaunchContext,
  seats: readonly string[] = [],
): Record<string, string> {
  const env: Record<string, string> = {
    HOME: moduleHomePath(ctx.stateDir, module),
    MESH_NODE: ctx.node,
    MESH_MODULE: module,
    MESH_STATE_DIR: ctx.stateDir,
    MESH_INSTANCE: module,
    MESH_CONTROL: moduleControlPath(ctx.stateDir, module),
    MESH_SEATS: seats.join(","),
  };
  const delivered = delivery.modules.find((m) => m.name === module);
  if (delivered !== undefined)
    env["MESH_MANIFEST"] =
      delivered.manifestText === undefined ? delivered.manifest : deliveredManifestPath(ctx.stateDir, module);
  env["MESH_METRICS"] = delivered?.metrics ?? DEFAULT_MODULE_METRICS;
  const user = ctx.bus?.users.get(module);
  if (ctx.bus !== undefined && user !== undefined && ctx.bus.servers.length > 0) {
    env["MESH_BUS_SERVERS"] = ctx.bus.servers.join(",");
    env["MESH_BUS_CREDS"] = moduleCredsPath(ctx.stateDir, module);
    env["MESH_BUS_USER"] = user;
    if (ctx.bus.caFile !== undefined) env["MESH_BUS_CA"] = ctx.bus.caFile;
  }
  const provided = delivery.plan.instances.find((i) => i.provider === module);
  if (provided !== undefined) {
    env["MESH_RECEIVES"] = receivesPath(ctx.stateDir, module, provided.interface);
    env["MESH_SECRETS_DIR"] = secretsDirPath(ctx.stateDir, module);
  }
  const need = delivery.plan.instances.flatMap((i) => i.consumers).find((c) => c.consumer === module);
  if (need !== undefined) {
    env["MESH_CREDENTIALS"] = dirname(credentialPath(ctx.stateDir, module, need.interface));
  }
  return env;
}

/**
 * Why the module's code is not on this node, or undefined when it is. The fleet names a manifest
 * relative to the fleet file and the delivery carries the path that gives on the machine the fleet
 * was applied from: the module's directory must be at that path on its node. When the delivery
 * carries the manifest's text, only the directory must be there; else the file too (a controller
 * of before).
 */
async function missingModuleDir(
  module: DeliveredModule,
  delivery: Delivery,
  node: string,
): Promise<string | undefined> {
  const dir = dirname(module.manifest);
  const there = await stat(dir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  const copy =
    `a module's code must be on its node at the path the fleet names, relative to ${delivery.fleetFile}; ` +
    `copy the module's directory there (or mount it), and the agent starts it`;
  if (module.manifestText !== undefined) {
    return there ? undefined : `its directory ${dir} is not on node ${node}: ${copy}`;
  }
  try {
    await stat(module.manifest);
    return undefined;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code !== "ENOENT" && code !== "ENOTDIR") return undefined; // said by loadManifest, as it reads
  }
  return (
    `its manifest ${module.manifest} is not on node ${node}` +
    (there ? "" : ` (nor its directory ${dir})`) +
    `: ${copy}`
  );
}

/**
 * Decides how `module` is started: its manifest's `run` (relative paths read from the manifest's
 * directory), as the user its identity says, with an environment built from nothing: PATH, LANG
 * and TZ of the agent, the fleet entry's `env`, its admin URL when it is a provider whose entry
 * names one, and `moduleEnv`.
 */
export async function decideLaunch(
  module: DeliveredModule,
  delivery: Delivery,
  ctx: LaunchContext,
): Promise<LaunchDecision> {
  const absent = await missingModuleDir(module, delivery, ctx.node);
  if (absent !== undefined)
    return {
      kind: "unreadable",
      why: absent,
      what: `module ${module.name}'s directory is not on node ${ctx.node}`,
    };
  let run;
  let seats: readonly string[];
  try {
    ({ run, seats } = await manifestOf(module));
  } catch (err) {
    return { kind: "unreadable", why: err instanceof Error ? err.message : String(err) };
  }
  if (run === undefined) {
    return { kind: "not-run", why: `its manifest ${module.manifest} has no "run"` };
  }
  const identity = ctx.identity?.(module.name);
  if (identity?.kind === "refused") return { kind: "not-run", why: identity.reason };
  const env: Record<string, string> = {};
  for (const key of PASSED_VARIABLES) {
    const value = ctx.baseEnv[key];
    if (value !== undefined) env[key] = value;
  }
  env["PATH"] ??= DEFAULT_PATH;
  Object.assign(env, module.env ?? {});
  if (module.admin !== undefined) {
    try {
      Object.assign(env, await adminUrlOf(module.name, module.admin, delivery, ctx));
    } catch (err) {
      if (!(err instanceof AdminUrlError)) throw err;
      return {
        kind: "unreadable",
        why: err.message,
        what: `module ${module.name}'s admin URL cannot be read`,
      };
    }
  }
  const owner: FileOwner | undefined =
    identity?.kind === "own-user" ? { uid: identity.user.uid, gid: identity.user.gid } : undefined;
  const cwd = dirname(module.manifest);
  const missing = await commandProblem(run.command, cwd, env["PATH"], ctx.node);
  if (missing !== undefined) return { kind: "not-run", why: missing };
  let rendered: Rendered;
  try {
    rendered = await renderRun(module, run, delivery, ctx, owner);
  } catch (err) {
    return {
      kind: "unreadable",
      why: err instanceof Error ? err.message : String(err),
      what: `module ${module.name}'s run templates cannot be rendered`,
    };
  }
  Object.assign(env, rendered.env);
  let manifestPath: string;
  try {
    manifestPath = await keepDeliveredManifest(ctx.stateDir, module, owner);
  } catch (err) {
    return {
      kind: "unreadable",
      why: err instanceof Error ? err.message : String(err),
      what: `module ${module.name}'s delivered manifest cannot be kept for it`,
    };
  }
  // A module holds the seats its manifest declares (the controller grants it the same).
  Object.assign(env, moduleEnv(module.name, delivery, ctx, seats));
  env["MESH_MANIFEST"] = manifestPath;
  return {
    kind: "run",
    ...(rendered.waiting === undefined ? {} : { waiting: rendered.waiting }),
    launch: {
      name: module.name,
      command: run.command,
      args: rendered.args,
      ...(rendered.digest === undefined ? {} : { rendered: rendered.digest }),
      ...(rendered.metrics === undefined ? {} : { metrics: rendered.metrics }),
      onNewPassword: run.onNewPassword,
      cwd,
      env,
      logFile: moduleLogPath(ctx.stateDir, module.name),
      staleFiles: [metricsUrlPath(ctx.stateDir, module.name)],
      limits: effectiveLimits(module.limits),
      ...(identity?.kind === "own-user" ? { uid: identity.user.uid, gid: identity.user.gid } : {}),
      ...(identity === undefined ? {} : { isolation: identity.isolation }),
    },
  };
}

/** What a module's `run` templates gave: its args and env values, and a digest of its files. */
interface Rendered {
  readonly args: readonly string[];
  readonly env: Record<string, string>;
  readonly digest?: string;
  readonly waiting?: string;
  /** `http://HOST:PORT/metrics` when its templates name `{module.metrics}`: where the app serves them. */
  readonly metrics?: string;
}

/**
 * Why a consumer of `provider` (on this node: `ctx`) waits before its app is given its `iface`
 * credential, or undefined when it need not: the fleet names no endpoint: for the provider, and the
 * provider says it serves elsewhere than the delivered endpoint (the controller sends the address
 * it serves at next). A provider that has not answered, or does not say, is not waited for.
 */
async function servedWait(
  delivery: Delivery,
  provider: string,
  iface: string,
  ctx: Pick<LaunchContext, "providerSaid"> | undefined,
): Promise<string | undefined> {
  const told = delivery.plan.instances.find(
    (i) => i.provider === provider && i.interface === iface,
  )?.endpoint;
  if (ctx?.providerSaid === undefined || told?.defaulted !== true || told.port === undefined)
    return undefined;
  const said = await ctx.providerSaid(provider);
  if (said?.answered !== true || said.serves === undefined) return undefined;
  if (!disagrees({ host: told.host, port: told.port }, said.serves)) return undefined;
  return (
    `the controller to send where ${provider} serves ${iface} (${formatHostPort(said.serves)}, its admin URL; ` +
    `the fleet names no endpoint: for it)`
  );
}

/**
 * Renders `run`'s templates for `module` from its credentials (as the delivery derives them) and
 * its password copies. A password is used only once its provider on this node says the backend
 * took it; until then nothing is rendered and `waiting` says why. Files are written 0600, owned by
 * the module's user, only when their contents change.
 * @throws RunTemplateError, TemplateError; FileWriteError when a file cannot be written.
 */
async function renderRun(
  module: DeliveredModule,
  run: RunCommand,
  delivery: Delivery,
  ctx: LaunchContext,
  owner: FileOwner | undefined,
): Promise<Rendered> {
  const templates = [...run.env.values(), ...run.files.values()];
  const credentials: Record<string, { credential: Credential; password?: string }> = {};
  for (const file of credentialsFor(delivery.plan, module.name, ctx.stateDir)) {
    credentials[file.interface] = { credential: file.contents };
  }
  const files = Object.fromEntries(
    [...run.files.keys()].map((name) => [name, renderedFilePath(ctx.stateDir, module.name, name)]),
  );
  for (const iface of new Set(templates.flatMap(secretInterfaces))) {
    const need = credentials[iface];
    const entry = delivery.plan.instances
      .flatMap((i) => i.consumers.map((c) => ({ c, node: i.node })))
      .find(({ c }) => c.consumer === module.name && c.interface === iface);
    if (need === undefined || entry === undefined)
      return { args: run.args, env: {}, waiting: `its credential for ${iface}` };
    let password: string;
    try {
      // The password file its credential names: where logins alternate, the one of the login in use.
      password = (await readFile(need.credential.passwordFile, "utf8")).replace(/\r?\n$/, "");
    } catch {
      return {
        args: run.args,
        env: {},
        waiting: `its password for ${iface} (not delivered to this node yet)`,
      };
    }
    // A provider on another node cannot be asked from here: its password is used as delivered.
    if (entry.node === ctx.node && ctx.passwordApplied !== undefined) {
      const answer = await ctx.passwordApplied(entry.c, password);
      if (!answer.applied) {
        return {
          args: run.args,
          env: {},
          waiting: `${entry.c.provider} to apply its password for ${iface} (${answer.why})`,
        };
      }
    }
    const sent = await servedWait(
      delivery,
      entry.c.provider,
      iface,
      entry.node === ctx.node ? ctx : undefined,
    );
    if (sent !== undefined) return { args: run.args, env: {}, waiting: sent };
    credentials[iface] = { ...need, password };
  }
  const served = [...templates, ...run.args].some(namesModuleMetrics)
    ? await metricsAddress(module, ctx)
    : undefined;
  const values = {
    module: module.name,
    dir: moduleHomePath(ctx.stateDir, module.name),
    metrics: served ?? module.metrics ?? DEFAULT_MODULE_METRICS,
    ...(ctx.scrapeTargets === undefined || ![...templates, ...run.args].some(namesMeshTargets)
      ? {}
      : {
          targets: await ctx.scrapeTargets.copyFor(
            module.name,
            moduleHomePath(ctx.stateDir, module.name),
            owner,
          ),
        }),
    ...(ctx.scrapeToken === undefined ? {} : { scrapeToken: ctx.scrapeToken }),
    files,
    needs: credentials,
  };
  const metrics = served === undefined ? {} : { metrics: `http://${served}/metrics` };
  const args = run.args.map((a) => renderRunTemplate(a, values));
  const env = Object.fromEntries([...run.env].map(([name, t]) => [name, renderRunTemplate(t, values)]));
  if (run.files.size === 0) return { args, env, ...metrics };
  const digest = createHash("sha256");
  const dir = dirname(renderedFilePath(ctx.stateDir, module.name, "x"));
  // The agent's directory with the module's group, as its credentials; each file the module's own.
  await ensureDir(
    dir,
    owner === undefined ? 0o700 : 0o750,
    owner && { uid: process.getuid?.() ?? 0, gid: owner.gid },
  );
  for (const [name, template] of [...run.files].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const text = renderRunTemplate(template, values);
    digest.update(`${name}\0${text}\0`);
    await writeFileAtomic(files[name] ?? join(dir, name), text, 0o600, owner);
  }
  return { args, env, digest: digest.digest("base64url"), ...metrics };
}

/**
 * Where an app that names `{module.metrics}` serves its metrics: the fleet's `metrics` as written,
 * or, for port 0 (or none), a port the agent picks once for it. An app binds what it is told and
 * says nothing back, so port 0 would be a port nobody knows.
 */
async function metricsAddress(module: DeliveredModule, ctx: LaunchContext): Promise<string> {
  const { host, port } = parseListenAddress(module.metrics ?? DEFAULT_MODULE_METRICS);
  const hostText = host.includes(":") ? `[${host}]` : host;
  if (port !== 0 || ctx.metricsPort === undefined) return `${hostText}:${port}`;
  return `${hostText}:${await ctx.metricsPort(module.name, host)}`;
}

/**
 * Why `command` cannot be started on this node, or undefined when it can: a path (with a `/`,
 * relative to `cwd`) that is not an executable file, or a name found in no directory of `path`.
 */
export async function commandProblem(
  command: string,
  cwd: string,
  path: string | undefined,
  node?: string,
): Promise<string | undefined> {
  const here = node === undefined ? "this node" : `node ${node}`;
  const executable = async (file: string): Promise<boolean> => {
    try {
      if (!(await stat(file)).isFile()) return false;
      await access(file, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  };
  if (command.includes("/")) {
    const file = isAbsolute(command) ? command : resolve(cwd, command);
    if (await executable(file)) return undefined;
    return `its command ${file} is not an executable file on ${here}: install it, or fix run.command in its manifest`;
  }
  const dirs = (path ?? "").split(delimiter).filter((d) => isAbsolute(d));
  for (const dir of dirs) if (await executable(join(dir, command))) return undefined;
  return (
    `its command ${command} is not found on ${here}'s PATH (${dirs.join(delimiter) || "empty"}): ` +
    `install it, or give run.command as an absolute path`
  );
}

/**
 * The variable holding `module`'s admin URL, read from where its fleet entry says: a file (0600,
 * a regular file, at most 4 KiB) as `ADMIN_URL_VARIABLE`, or a variable of the agent's under its
 * own name. Only a module that provides something on this node gets one.
 * @throws AdminUrlError when the module provides nothing here, or the URL cannot be had.
 */
export async function adminUrlOf(
  module: string,
  admin: AdminUrlSource,
  delivery: Delivery,
  ctx: LaunchContext,
): Promise<Record<string, string>> {
  const source = "file" in admin ? `the file ${admin.file}` : `the agent's variable ${admin.env}`;
  if (!delivery.plan.instances.some((i) => i.provider === module && i.node === ctx.node)) {
    throw new AdminUrlError(
      module,
      source,
      "is not handed over: it provides nothing on this node, and an admin URL never reaches a consumer",
    );
  }
  if ("env" in admin) {
    const value = ctx.baseEnv[admin.env];
    if (value === undefined || value === "") throw new AdminUrlError(module, source, "is not set");
    return { [admin.env]: value };
  }
  let text: string;
  try {
    const handle = await open(admin.file, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const st = await handle.stat();
      if (!st.isFile()) throw new AdminUrlError(module, source, "is not a regular file");
      if ((st.mode & 0o077) !== 0) {
        throw new AdminUrlError(
          module,
          source,
          `is readable by others (mode ${(st.mode & 0o777).toString(8)}, not 600)`,
        );
      }
      if (st.uid !== (process.getuid?.() ?? st.uid) && st.uid !== 0) {
        throw new AdminUrlError(module, source, `is owned by uid ${st.uid}, not by the agent's user or root`);
      }
      const buffer = Buffer.alloc(ADMIN_URL_MAX_BYTES + 1);
      const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
      if (bytesRead > ADMIN_URL_MAX_BYTES) {
        throw new AdminUrlError(module, source, `is larger than ${ADMIN_URL_MAX_BYTES} bytes`);
      }
      text = buffer.subarray(0, bytesRead).toString("utf8").trim();
    } finally {
      await handle.close();
    }
  } catch (err) {
    if (err instanceof AdminUrlError) throw err;
    throw new AdminUrlError(
      module,
      source,
      `cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`,
    );
  }
  if (text === "") throw new AdminUrlError(module, source, "is empty");
  return { [ADMIN_URL_VARIABLE]: text };
}
