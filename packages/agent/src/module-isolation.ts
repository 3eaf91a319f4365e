// Who each module of a node runs as, decided before its files are written and before it starts:
// its own system user when the agent runs as root and that user can reach everything the module
// needs; else (with `--isolation auto`, or when the agent is not root) the agent's own user, said
// in the module's status; else (strict) not at all, with the directory it cannot read named.
import { chmod, chown, lchown, lstat, mkdir, readdir } from "node:fs/promises";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { moduleDir, moduleHomePath, type DeliveredModule } from "@mesh/manifest";
import { manifestOf } from "./delivered-manifest.ts";
import type { BusLogger, FileOwner } from "@mesh/bus";
import type { Delivery } from "@mesh/manifest";
import {
  canSeparateModules,
  commandPathAs,
  firstUnreachable,
  ModuleUserError,
  ModuleUsers,
  ShellsAsUsers,
  type IsolationMode,
  type ModuleUser,
  type Reach,
} from "./module-users.ts";

/** How a module runs, as its status reports it. */
export interface ModuleIsolation {
  /** Whether it runs as its own user, apart from the agent and the other modules. */
  readonly isolated: boolean;
  /** The user it runs as (`mesh-notes`), or the agent's (`root`, or the agent's uid). */
  readonly user: string;
  /** Why it is not isolated (or not started), in words. */
  readonly reason?: string;
}

/** Who one module runs as: its own user, the agent's, or nobody (refused). */
export type ModuleIdentity =
  | { readonly kind: "own-user"; readonly user: ModuleUser; readonly isolation: ModuleIsolation }
  | { readonly kind: "agent-user"; readonly isolation: ModuleIsolation }
  | { readonly kind: "refused"; readonly reason: string; readonly isolation: ModuleIsolation };

/** The owner of what the agent writes for a module with `identity`: its user, or no change. */
export function ownerOf(identity: ModuleIdentity | undefined): FileOwner | undefined {
  return identity?.kind === "own-user" ? { uid: identity.user.uid, gid: identity.user.gid } : undefined;
}

/** A module's directory could not be made as the layout wants it. */
export class ModuleDirError extends Error {
  override name = "ModuleDirError";
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(
      `${path} is not a directory the agent can keep for its module (${why}): the module is not ` +
        `started; remove what is in its place`,
    );
  }
}

const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin";
/**
 * How many modules are decided at once: their checks, each a shell run as the module's user, go
 * in as few processes as they can (see ShellsAsUsers), so the more at once, the fewer spawns.
 */
const DECIDE_AT_ONCE = 64;
const AGENT_UID = (): number => process.getuid?.() ?? -1;
const AGENT_GID = (): number => process.getgid?.() ?? -1;

/**
 * Makes `dir` a directory (never through a symlink) with `mode`, owned by `owner` when given.
 * @throws ModuleDirError when something else is in its place.
 */
export async function ensureDir(dir: string, mode: number, owner?: FileOwner): Promise<void> {
  await mkdir(dir, { recursive: true, mode });
  const st = await lstat(dir);
  if (st.isSymbolicLink() || !st.isDirectory()) throw new ModuleDirError(dir, "it is not a directory");
  if (owner !== undefined && (st.uid !== owner.uid || st.gid !== owner.gid)) {
    await chown(dir, owner.uid, owner.gid);
  }
  if ((st.mode & 0o7777) !== mode) await chmod(dir, mode);
}

/**
 * Decides, for each module of a delivery, who it runs as, and makes its directories so:
 * `<state>/modules` 0711, `<state>/modules/<m>` 0750 root:<its group>, its home 0700 its own.
 */
export class ModuleIsolations {
  readonly #stateDir: string;
  readonly #mode: IsolationMode;
  readonly #logger: BusLogger;
  readonly #env: Readonly<Record<string, string | undefined>>;
  readonly #separate: boolean;
  readonly #users: ModuleUsers;
  readonly #said = new Set<string>();
  #current = new Map<string, ModuleIdentity>();

  constructor(options: {
    stateDir: string;
    /** The mesh id its users are named with (see mesh-id.ts). */
    meshId: string;
    mode: IsolationMode;
    logger: BusLogger;
    /** The agent's environment, for the PATH a bare command is looked up on. */
    env: Readonly<Record<string, string | undefined>>;
    /** Whether modules can run as other users (default: the agent runs as root). */
    separate?: boolean;
  }) {
    this.#stateDir = options.stateDir;
    this.#mode = options.mode;
    this.#logger = options.logger;
    this.#env = options.env;
    this.#separate = options.separate ?? canSeparateModules();
    this.#users = new ModuleUsers(options.meshId, options.stateDir);
  }

  /** Who `module` runs as, as last decided (undefined before its first delivery). */
  identity(module: string): ModuleIdentity | undefined {
    return this.#current.get(module);
  }

  /**
   * Decides who each module of `delivery` runs as, making its user and directories.
   * @returns the identity of each delivered module, by name.
   */
  async resolve(delivery: Delivery): Promise<ReadonlyMap<string, ModuleIdentity>> {
    const decided = new Map<string, ModuleIdentity>();
    const separate = this.#separate;
    if (!separate && delivery.modules.length > 0) {
      this.#sayOnce(
        "not-root",
        "warn",
        `the agent does not run as root, so it cannot separate its modules: each runs as the agent's own user`,
      );
    }
    await ensureDir(join(this.#stateDir, "modules"), 0o711);
    // Every user at once (one look-up, the missing made in turn by one shell), then each module's
    // reach checked by a shell run as its user, the checks asked together run in one process.
    const users = separate ? await this.#users.ensureAll(delivery.modules.map((m) => m.name)) : undefined;
    const shells = new ShellsAsUsers();
    const decideOne = async (module: DeliveredModule): Promise<void> => {
      let identity: ModuleIdentity;
      try {
        identity = separate
          ? await this.#decide(module, users?.get(module.name), shells)
          : agentUser("the agent does not run as root");
        if (identity.kind !== "own-user") await this.#prepare(module.name, undefined);
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        identity = { kind: "refused", reason, isolation: { isolated: false, user: "", reason } };
      }
      decided.set(module.name, identity);
    };
    const queue = [...delivery.modules];
    const worker = async (): Promise<void> => {
      for (let module = queue.shift(); module !== undefined; module = queue.shift()) await decideOne(module);
    };
    await Promise.all(Array.from({ length: Math.min(DECIDE_AT_ONCE, queue.length) }, worker));
    // Kept and said in the delivery's order, whatever order the checks ended in.
    const ordered = new Map<string, ModuleIdentity>();
    for (const module of delivery.modules) {
      const identity = decided.get(module.name);
      if (identity === undefined) continue;
      ordered.set(module.name, identity);
      this.#say(module.name, identity);
    }
    this.#current = ordered;
    return ordered;
  }

  async #decide(
    delivered: DeliveredModule,
    made: ModuleUser | ModuleUserError | undefined,
    shells: ShellsAsUsers,
  ): Promise<ModuleIdentity> {
    const module = delivered.name;
    const user = made ?? (await this.#users.ensure(module).catch((err: unknown) => err as Error));
    if (user instanceof Error) {
      if (!(user instanceof ModuleUserError) || this.#mode === "strict") throw user;
      return agentUser(user.message);
    }
    const reaches = await this.#reaches(delivered, user, shells);
    // Ran as the agent's user before, for want of a reach it may still lack: checked first without
    // handing its directories to its user, so that a module that still cannot be separated keeps
    // one owner of its home (handed over and taken back, the agent refused the module's own files
    // in between). Only when nothing but those directories could be lacking is it prepared.
    if (this.#current.get(module)?.kind === "agent-user" && this.#mode === "auto") {
      const before = await firstUnreachable(user, this.#unprepared(module, reaches), shells);
      if (before !== undefined) {
        return agentUser(`${before.why}, so it runs as the agent's user (--isolation auto)`);
      }
    }
    await this.#prepare(module, user);
    const unreachable = await firstUnreachable(user, reaches, shells);
    if (unreachable === undefined) {
      return { kind: "own-user", user, isolation: { isolated: true, user: user.name } };
    }
    if (this.#mode === "auto") {
      return agentUser(`${unreachable.why}, so it runs as the agent's user (--isolation auto)`);
    }
    const reason =
      `${unreachable.why}: module ${module} is not started; make that directory readable by ` +
      `${user.name} (or other users), or start the agent with --isolation auto to run it as the agent's user`;
    return { kind: "refused", reason, isolation: { isolated: false, user: user.name, reason } };
  }

  // Everything the module's user must reach: its manifest directory, its command, its own files.
  async #reaches(delivered: DeliveredModule, user: ModuleUser, shells: ShellsAsUsers): Promise<Reach[]> {
    const module = delivered.name;
    const cwd = dirname(delivered.manifest);
    const reaches: Reach[] = [
      { need: "read", path: cwd, what: "its manifest directory" },
      { need: "enter", path: moduleDir(this.#stateDir, module), what: "its directory" },
      { need: "write", path: moduleHomePath(this.#stateDir, module), what: "its home" },
    ];
    const run = await manifestOf(delivered).then(
      (m) => m.run,
      () => undefined, // the launch says an unreadable manifest
    );
    if (run === undefined) return reaches;
    if (run.command.includes("/")) {
      const command = isAbsolute(run.command) ? run.command : resolve(cwd, run.command);
      reaches.push({ need: "run", path: command, what: "its command" });
      reaches.push({ need: "read", path: dirname(command), what: "its command's directory" });
    } else {
      const found = await commandPathAs(user, run.command, this.#env["PATH"] ?? DEFAULT_PATH, shells);
      // Not found on its PATH: the same "cannot run" as a path it cannot reach.
      reaches.push({ need: "run", path: found ?? run.command, what: "its command" });
    }
    return reaches;
  }

  // What the module's user must reach that does not hang on the agent preparing its directories:
  // the directory its own is made in (every ancestor counts) instead of its own, and not its home.
  #unprepared(module: string, reaches: readonly Reach[]): Reach[] {
    const dir = moduleDir(this.#stateDir, module);
    return reaches
      .filter((r) => r.path !== moduleHomePath(this.#stateDir, module))
      .map((r) =>
        r.path === dir ? { ...r, path: dirname(dir), what: "the directory of its directory" } : r,
      );
  }

  // The module's directory is the agent's; its home is the module's (or the agent's, when it runs as the agent).
  async #prepare(module: string, user: ModuleUser | undefined): Promise<void> {
    const dir = moduleDir(this.#stateDir, module);
    const group = user === undefined ? undefined : { uid: AGENT_UID(), gid: user.gid };
    await ensureDir(dir, 0o750, group);
    const home = user === undefined ? agentOwner() : { uid: user.uid, gid: user.gid };
    if (user !== undefined) await this.#handOver(module, user);
    await ensureDir(moduleHomePath(this.#stateDir, module), 0o700, home);
  }

  // A module that ran as another user of its own before (`mesh-<module>`, of a mesh before ids)
  // finds its files as they were: everything of its directory that user or group owned is handed
  // to its user now. A home the agent owned (the module ran as the agent) is left as it was.
  async #handOver(module: string, user: ModuleUser): Promise<void> {
    const st = await lstat(moduleHomePath(this.#stateDir, module)).catch(() => undefined);
    if (st === undefined || !st.isDirectory() || st.uid === user.uid || st.uid === AGENT_UID()) return;
    const from = { uid: st.uid, gid: st.gid };
    const count = await handOver(moduleDir(this.#stateDir, module), from, { uid: user.uid, gid: user.gid });
    this.#logger.info(
      `${module} now runs as ${user.name}: ${count} of its files owned by uid ${from.uid} or gid ${from.gid} ` +
        `(its user before) are handed to it; that user stays (the mesh removes no user)`,
    );
  }

  #say(module: string, identity: ModuleIdentity): void {
    const key = `${module} ${identity.kind} ${identity.isolation.reason ?? ""}`;
    if (identity.kind === "own-user")
      this.#sayOnce(key, "info", `${module} runs as its own user ${identity.user.name}`);
    else if (identity.kind === "refused") this.#sayOnce(key, "error", identity.reason);
    else if (identity.isolation.reason !== "the agent does not run as root") {
      this.#sayOnce(key, "warn", `${module} is not isolated: ${identity.isolation.reason ?? ""}`);
    }
  }

  #sayOnce(key: string, level: "info" | "warn" | "error", message: string): void {
    if (this.#said.has(key)) return;
    this.#said.add(key);
    this.#logger[level](message);
  }
}

/**
 * Gives `to` what `from` owns under `dir` (`dir` itself included), user and group each on its own
 * (a file of root and `from`'s group keeps root): never through a symlink (a link itself is
 * changed, not what it names). At most `most` entries are looked at.
 * @returns how many entries were changed.
 */
export async function handOver(
  dir: string,
  from: FileOwner,
  to: FileOwner,
  most = 1_000_000,
): Promise<number> {
  let seen = 0;
  let changed = 0;
  const visit = async (path: string): Promise<void> => {
    if (++seen > most) return;
    const st = await lstat(path).catch(() => undefined);
    if (st === undefined) return;
    const uid = st.uid === from.uid ? to.uid : st.uid;
    const gid = st.gid === from.gid ? to.gid : st.gid;
    if (uid !== st.uid || gid !== st.gid) {
      await lchown(path, uid, gid).catch(() => undefined);
      changed++;
    }
    if (!st.isDirectory()) return;
    const entries = await readdir(path).catch(() => [] as string[]);
    for (const entry of entries) await visit(join(path, entry));
  };
  await visit(dir);
  return changed;
}

function agentOwner(): FileOwner | undefined {
  return AGENT_UID() < 0 ? undefined : { uid: AGENT_UID(), gid: AGENT_GID() };
}

function agentUser(reason: string): ModuleIdentity {
  const uid = AGENT_UID();
  return {
    kind: "agent-user",
    isolation: { isolated: false, user: uid === 0 ? "root" : `uid ${uid}`, reason },
  };
}
