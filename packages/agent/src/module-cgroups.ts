// Each module lives in a cgroup of its own, as a systemd unit or a kubelet pod does: its limits are
// the cgroup's, and stopping it ends every process in the cgroup, so nothing it started (a child
// that called setsid and emptied its environment) outlives it. cgroup v2 when /sys/fs/cgroup itself
// is cgroup2 (a systemd host: the agent works inside the cgroup its unit delegates to it); else the
// v1 pids, memory, cpu and freezer hierarchies, and a v2 mount beside them (/sys/fs/cgroup/unified)
// for membership and kill. Every cgroup of a mesh is named with its id (`mesh-<id>-<module>`, as
// its user), made in the agent's own cgroup of each hierarchy, so two meshes never share one and a
// start-up sweep finds what a killed run left of its own mesh alone.
//
// cgroupfs files are kernel memory: read and written synchronously, in microseconds.
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmdirSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import type { BusLogger } from "@mesh/bus";
import { formatSize, type EffectiveLimits } from "@mesh/manifest";
import { meshUserPrefix, moduleUserName } from "./module-users.ts";

/** Which cgroup interface bounds the modules: v2, v1, or none at all. */
export type CgroupVersion = "v1" | "v2";

/** One cgroup hierarchy the agent makes module cgroups in. */
export interface CgroupHierarchy {
  readonly version: CgroupVersion;
  /** Where it is mounted. */
  readonly mount: string;
  /** The directory this mesh's module cgroups are made in: the agent's own cgroup there. */
  readonly base: string;
  /** v1: the controllers mounted there of those the mesh uses; v2: those enabled below `base`. */
  readonly controllers: readonly string[];
}

/** What this machine's cgroup filesystems offer, as read from its mount table and `/proc/self/cgroup`. */
export interface CgroupLayout {
  /** `v2`: /sys/fs/cgroup is cgroup2; `v1`: v1 hierarchies bound, a v2 mount beside them only holds and kills. */
  readonly version: CgroupVersion | "none";
  readonly hierarchies: readonly CgroupHierarchy[];
  /** Why there is nothing to use, when there is not. */
  readonly why?: string;
}

/** The v1 controllers the mesh uses: limits (pids, memory, cpu) and a stop that nothing escapes (freezer). */
export const V1_CONTROLLERS = ["pids", "memory", "cpu", "freezer"] as const;
/** The v2 controllers the mesh enables for its modules. */
export const V2_CONTROLLERS = ["pids", "memory", "cpu"] as const;
/**
 * On cgroup v2 a cgroup whose children use controllers holds no process of its own: the agent (and
 * whatever of the mesh shares its cgroup) moves to this leaf of it first.
 */
export const AGENT_CGROUP = "mesh-agent";
/** The CFS period a cpu limit is a share of (100 ms, the kernel's default). */
const CPU_PERIOD_US = 100_000;
/** `<state>/cgroups.json`: the directories module cgroups were made in, for the next start's sweep. */
export const CGROUP_BASES_FILE = "cgroups.json";

/** A module's cgroup could not be made. */
export class CgroupError extends Error {
  override name = "CgroupError";
  constructor(
    readonly path: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`the cgroup ${path} cannot be made (${why})`, options);
  }
}

/** One line of the mount table: where, what filesystem, with which options. */
interface Mount {
  readonly point: string;
  readonly type: string;
  readonly options: readonly string[];
}

// `/proc/self/mountinfo`: "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer".
function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const dash = fields.indexOf("-");
    if (dash < 5) continue;
    const point = (fields[4] ?? "").replace(/\\([0-7]{3})/g, (_, oct: string) =>
      String.fromCharCode(parseInt(oct, 8)),
    );
    mounts.push({ point, type: fields[dash + 1] ?? "", options: (fields[dash + 3] ?? "").split(",") });
  }
  return mounts;
}

// `/proc/self/cgroup`: "4:memory:/a/b" per v1 hierarchy, "0::/a" for v2.
function parseSelfCgroup(text: string): { v1: Map<string, string>; v2: string | undefined } {
  const v1 = new Map<string, string>();
  let v2: string | undefined;
  for (const line of text.split("\n")) {
    const first = line.indexOf(":");
    const second = line.indexOf(":", first + 1);
    if (first < 0 || second < 0) continue;
    const controllers = line.slice(first + 1, second);
    const path = line.slice(second + 1);
    if (line.slice(0, first) === "0" && controllers === "") v2 = path;
    else for (const c of controllers.split(",")) v1.set(c, path);
  }
  return { v1, v2 };
}

/**
 * Where the modules' cgroups go on this machine, read from `mountinfo` and `selfCgroup` (the texts
 * of `/proc/self/mountinfo` and `/proc/self/cgroup`). `root` is where cgroups are mounted
 * (`/sys/fs/cgroup`): v2 when it is cgroup2 itself. Pure: nothing is made.
 */
export function cgroupLayout(mountinfo: string, selfCgroup: string, root = "/sys/fs/cgroup"): CgroupLayout {
  const mounts = parseMountinfo(mountinfo);
  const self = parseSelfCgroup(selfCgroup);
  const v2Mounts = mounts.filter((m) => m.type === "cgroup2");
  const v2Base = (mount: string): string => {
    const own = self.v2 ?? "/";
    // The agent moved itself into its leaf on an earlier start: the cgroup it works in is the parent.
    return under(mount, basename(own) === AGENT_CGROUP ? dirname(own) : own);
  };
  const main = v2Mounts.find((m) => m.point === root);
  if (main !== undefined) {
    return {
      version: "v2",
      hierarchies: [{ version: "v2", mount: main.point, base: v2Base(main.point), controllers: [] }],
    };
  }
  const v1: CgroupHierarchy[] = [];
  for (const m of mounts) {
    if (m.type !== "cgroup") continue;
    const controllers = V1_CONTROLLERS.filter((c) => m.options.includes(c));
    if (controllers.length === 0 || v1.some((h) => h.mount === m.point)) continue;
    const own = self.v1.get(controllers[0] as string) ?? "/";
    v1.push({ version: "v1", mount: m.point, base: under(m.point, own), controllers });
  }
  const beside = v2Mounts[0];
  const membership =
    beside === undefined
      ? []
      : [{ version: "v2" as const, mount: beside.point, base: v2Base(beside.point), controllers: [] }];
  if (v1.length > 0) return { version: "v1", hierarchies: [...v1, ...membership] };
  if (membership.length > 0) return { version: "v2", hierarchies: membership };
  return { version: "none", hierarchies: [], why: "no cgroup hierarchy is mounted" };
}

// `mount` and a cgroup's path in it, without a trailing slash for the root cgroup.
const under = (mount: string, path: string): string => join(mount, path).replace(/(.)\/+$/, "$1");

/** How often each limit a module reaches has been reached, by its cgroup's own counters. */
export interface LimitCounters {
  /** Processes the kernel killed for want of memory under its limit. */
  readonly oomKills: number;
  /** Forks refused at its pids limit. */
  readonly pidsMax: number;
}

const readText = (path: string): string | undefined => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

// "oom_kill 3" out of a flat-keyed file (memory.events, memory.oom_control, pids.events).
const counterOf = (text: string | undefined, key: string): number => {
  const m = text === undefined ? null : new RegExp(`^${key} (\\d+)$`, "m").exec(text);
  return m === null ? 0 : Number(m[1]);
};

const pidsOf = (path: string): number[] =>
  (readText(path) ?? "")
    .split("\n")
    .filter((l) => /^\d+$/.test(l))
    .map(Number);

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One module's cgroup: a directory of that name in each hierarchy. What each directory can do is
 * read from the files it has (`cgroup.kill`, `freezer.state`, `pids.max`, `memory.max`, …), so a
 * cgroup left by another run, or on a hierarchy this start does not use, is handled all the same.
 */
export class ModuleCgroup {
  /** `mesh-<id>-<module>`, as the module's user. */
  readonly name: string;
  /** Its directory in each hierarchy. */
  readonly paths: readonly string[];

  constructor(name: string, paths: readonly string[]) {
    this.name = name;
    this.paths = paths;
  }

  /**
   * Makes its directory in each hierarchy (one there already is kept).
   * @throws CgroupError when one cannot be made.
   */
  make(): void {
    for (const path of this.paths) {
      try {
        mkdirSync(path);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== "EEXIST") throw new CgroupError(path, code ?? String(err), { cause: err });
      }
    }
  }

  /**
   * Sets `limits` (null: no bound) wherever a controller for each is there.
   * @returns the limits that could not be set, in words (`memory 64M: no memory controller`).
   */
  limit(limits: EffectiveLimits): string[] {
    const unset: string[] = [];
    const tried = (what: string, value: number | null, done: boolean): void => {
      if (!done && value !== null) unset.push(what);
    };
    tried(`pids ${limits.pids}`, limits.pids, this.#write("pids.max", String(limits.pids ?? "max")));
    tried(`memory ${formatSize(limits.memory ?? 0)}`, limits.memory, this.#memory(limits.memory));
    tried(`cpu ${limits.cpu}`, limits.cpu, this.#cpu(limits.cpu));
    return unset;
  }

  /** The `cgroup.procs` file of each directory: a process that writes its PID to each joins it. */
  joinFiles(): string[] {
    return this.paths.map((p) => join(p, "cgroup.procs"));
  }

  /** Moves process `pid` into it. @throws the filesystem's error when a hierarchy refuses. */
  join(pid: number): void {
    for (const file of this.joinFiles()) writeFileSync(file, String(pid));
  }

  /** Every process in it, in any hierarchy. */
  members(): number[] {
    return [...new Set(this.paths.flatMap((p) => pidsOf(join(p, "cgroup.procs"))))].sort((a, b) => a - b);
  }

  /** Its counters of limits reached (zero where a controller is not there). */
  counters(): LimitCounters {
    let oomKills = 0;
    let pidsMax = 0;
    for (const p of this.paths) {
      oomKills = Math.max(
        oomKills,
        counterOf(readText(join(p, "memory.events")), "oom_kill"),
        counterOf(readText(join(p, "memory.oom_control")), "oom_kill"),
      );
      pidsMax = Math.max(pidsMax, counterOf(readText(join(p, "pids.events")), "max"));
    }
    return { oomKills, pidsMax };
  }

  /**
   * Ends every process in it and waits (up to `waitMs`) until none is left: v2's `cgroup.kill`,
   * which no fork escapes; on v1 the freezer holds them all still while each gets SIGKILL, then
   * thaws them to die; where neither is there, SIGKILL to each member until none is left.
   * @returns the PIDs still in it after `waitMs` (none, but for a process stuck in the kernel).
   */
  async kill(waitMs = 5_000): Promise<number[]> {
    if (this.members().length === 0) return [];
    for (const p of this.paths) if (existsSync(join(p, "cgroup.kill"))) this.#writeTo(p, "cgroup.kill", "1");
    for (const p of this.paths) {
      if (!existsSync(join(p, "freezer.state"))) continue;
      if (!this.#writeTo(p, "freezer.state", "FROZEN")) continue;
      try {
        for (let i = 0; i < 50 && readText(join(p, "freezer.state"))?.trim() !== "FROZEN"; i++)
          await sleep(10);
        for (const pid of pidsOf(join(p, "cgroup.procs"))) killPid(pid);
      } finally {
        this.#writeTo(p, "freezer.state", "THAWED");
      }
    }
    const deadline = Date.now() + waitMs;
    for (;;) {
      const left = this.members();
      if (left.length === 0 || Date.now() >= deadline) return left;
      for (const pid of left) killPid(pid);
      await sleep(20);
    }
  }

  /** Removes its directories; false when one still holds a process (it stays). */
  remove(): boolean {
    let removed = true;
    for (const path of this.paths) {
      try {
        rmdirSync(path);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOENT") removed = false;
      }
    }
    return removed;
  }

  // v1 keeps memory+swap at or above memory: lowered, memory goes first; raised, memory+swap does.
  // With a bound, swap counts in it (v1) or is none (v2), so the bound is one the module cannot
  // swap its way past.
  #memory(bytes: number | null): boolean {
    const v2 = this.#write("memory.max", String(bytes ?? "max"));
    if (v2) this.#write("memory.swap.max", bytes === null ? "max" : "0");
    const limit = this.paths.find((p) => existsSync(join(p, "memory.limit_in_bytes")));
    if (limit === undefined) return v2;
    const target = bytes ?? -1;
    const now = Number(readText(join(limit, "memory.limit_in_bytes")) ?? "-1");
    const lowering = target !== -1 && target < now;
    const memsw = existsSync(join(limit, "memory.memsw.limit_in_bytes"));
    if (!lowering && memsw) this.#writeTo(limit, "memory.memsw.limit_in_bytes", String(target));
    const done = this.#writeTo(limit, "memory.limit_in_bytes", String(target));
    if (lowering && memsw) this.#writeTo(limit, "memory.memsw.limit_in_bytes", String(target));
    return done || v2;
  }

  #cpu(cpus: number | null): boolean {
    const quota = cpus === null ? undefined : Math.max(1_000, Math.round(cpus * CPU_PERIOD_US));
    const v2 = this.#write("cpu.max", `${quota ?? "max"} ${CPU_PERIOD_US}`);
    const v1 = this.paths.find((p) => existsSync(join(p, "cpu.cfs_quota_us")));
    if (v1 === undefined) return v2;
    this.#writeTo(v1, "cpu.cfs_period_us", String(CPU_PERIOD_US));
    return this.#writeTo(v1, "cpu.cfs_quota_us", String(quota ?? -1)) || v2;
  }

  // Writes `value` to `file` in each directory that has it: whether any took it.
  #write(file: string, value: string): boolean {
    let done = false;
    for (const p of this.paths) if (existsSync(join(p, file))) done = this.#writeTo(p, file, value) || done;
    return done;
  }

  #writeTo(dir: string, file: string, value: string): boolean {
    try {
      writeFileSync(join(dir, file), value);
      return true;
    } catch {
      return false;
    }
  }
}

function killPid(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // gone meanwhile
  }
}

/** How a module's command is started inside its cgroup. */
export interface ConfinedCommand {
  readonly command: string;
  readonly args: readonly string[];
  /**
   * The process joins as it starts, before it runs anything of the module's, as root (its user is
   * taken after): true. False: without setpriv, it runs as its user at once and is moved in as soon
   * as it has a PID (what it forks in that instant stays out).
   */
  readonly joinsFirst: boolean;
}

// Writes its own PID to each cgroup.procs named before `--`, then execs the rest: the module's
// command, or setpriv dropping to the module's user and then its command. Exit 125: not joined.
const JOIN_SCRIPT =
  'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do echo "$$" > "$1" || exit 125; shift; done; shift; exec "$@"';

/** What `ModuleCgroups.open` is told. */
export interface ModuleCgroupsOptions {
  /** The mesh id every cgroup of this mesh is named with (see mesh-id.ts). */
  readonly meshId: string;
  /** The node's state directory: the hierarchies used are kept there for the next start's sweep. */
  readonly stateDir: string;
  readonly logger: BusLogger;
  /** The layout to use (tests); read from /proc when absent. */
  readonly layout?: CgroupLayout;
  /** Whether the agent can make cgroups (default: it runs as root). */
  readonly privileged?: boolean;
}

/**
 * The cgroups of one node's modules: where they are made, the command that starts a module in
 * its own, and the sweep of what a killed run left. Made by `open`.
 */
export class ModuleCgroups {
  readonly #meshId: string;
  readonly #hierarchies: readonly CgroupHierarchy[];
  readonly #version: CgroupVersion | "none";
  readonly #why: string | undefined;
  readonly #setpriv: string | undefined;
  readonly #earlierBases: readonly string[];

  private constructor(
    meshId: string,
    version: CgroupVersion | "none",
    hierarchies: readonly CgroupHierarchy[],
    why: string | undefined,
    earlierBases: readonly string[],
  ) {
    this.#meshId = meshId;
    this.#version = hierarchies.length === 0 ? "none" : version;
    this.#hierarchies = hierarchies;
    this.#why = why;
    this.#setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
    this.#earlierBases = earlierBases;
  }

  /**
   * Finds the hierarchies to use (none when the agent is not root or nothing is mounted), on v2
   * moves the mesh's own processes to their leaf and enables the pids, memory and cpu controllers
   * for the modules where it can, and notes where it works for the next start's sweep. Says once
   * what it uses, and what it cannot bound.
   */
  static open(options: ModuleCgroupsOptions): ModuleCgroups {
    const { meshId, stateDir, logger } = options;
    const record = join(stateDir, CGROUP_BASES_FILE);
    const earlier = readBases(record);
    if (!(options.privileged ?? process.getuid?.() === 0)) {
      const none = new ModuleCgroups(meshId, "none", [], "the agent does not run as root", earlier);
      logger.warn(`modules run without cgroups, so without limits: ${none.#why ?? ""}`);
      return none;
    }
    const layout =
      options.layout ??
      cgroupLayout(readText("/proc/self/mountinfo") ?? "", readText("/proc/self/cgroup") ?? "");
    const usable: CgroupHierarchy[] = [];
    const notes: string[] = [];
    for (const h of layout.hierarchies) {
      try {
        accessSync(h.base, constants.W_OK);
      } catch (err) {
        notes.push(`${h.base} is not writable (${(err as NodeJS.ErrnoException).code ?? "error"})`);
        continue;
      }
      usable.push(h.version === "v2" && layout.version === "v2" ? delegate(h, notes) : h);
    }
    const why = layout.why ?? (notes.length > 0 ? notes.join("; ") : "no cgroup hierarchy can be written");
    const cgroups = new ModuleCgroups(meshId, layout.version, usable, why, earlier);
    if (!cgroups.available) {
      logger.warn(`modules run without cgroups, so without limits: ${why}`);
      return cgroups;
    }
    try {
      const bases = [...new Set([...usable.map((h) => h.base), ...earlier])].filter((b) => existsSync(b));
      writeBases(record, bases);
    } catch (err) {
      logger.warn(
        `${record} cannot be written (${(err as Error).message}): a later start finds this run's ` +
          `cgroups only where it runs itself`,
      );
    }
    logger.info(`each module runs in a cgroup of its own: ${cgroups.describe()}`);
    const bounds = new Set(usable.flatMap((h) => h.controllers));
    const lacking = ["pids", "memory", "cpu"].filter((c) => !bounds.has(c));
    if (lacking.length > 0 || notes.length > 0) {
      logger.warn(
        `modules run without ${lacking.length > 0 ? `a ${lacking.join(", ")} limit` : "some of their cgroups"}` +
          `${notes.length > 0 ? ` (${notes.join("; ")})` : ""}: ` +
          (layout.version === "v2"
            ? "run the mesh as a systemd service with Delegate=yes (see deploy/systemd) to have them"
            : "mount those cgroup controllers to have them"),
      );
    }
    return cgroups;
  }

  /** Whether modules get cgroups at all. */
  get available(): boolean {
    return this.#hierarchies.length > 0;
  }

  /** v2, v1, or none. */
  get version(): CgroupVersion | "none" {
    return this.#version;
  }

  /** Why modules get no cgroup, when they do not. */
  get why(): string | undefined {
    return this.available ? undefined : this.#why;
  }

  /** The hierarchies in use. */
  get hierarchies(): readonly CgroupHierarchy[] {
    return this.#hierarchies;
  }

  /** In words: `v1 (pids, memory, cpu, freezer) under /sys/fs/cgroup/pids/…; v2 … (holds and kills)`. */
  describe(): string {
    if (!this.available) return `none (${this.#why ?? "unknown"})`;
    return this.#hierarchies
      .map(
        (h) =>
          `${h.version} ${h.base}` +
          (h.controllers.length > 0 ? ` (${h.controllers.join(", ")})` : " (holds and kills)"),
      )
      .join("; ");
  }

  /** The cgroup of `module` (not made yet: `make` it), or undefined when modules get none. */
  forModule(module: string): ModuleCgroup | undefined {
    if (!this.available) return undefined;
    const name = moduleUserName(this.#meshId, module);
    return new ModuleCgroup(
      name,
      this.#hierarchies.map((h) => join(h.base, name)),
    );
  }

  /**
   * The command that starts `command args` inside `cgroup`: a shell that writes its own PID to
   * each hierarchy's `cgroup.procs` while still root, then execs the command, through `setpriv`
   * to `user` when given (the module's own, dropping every supplementary group as a spawn with
   * uid and gid does). The PID is the module's from the start, so records and signals hold.
   */
  confine(
    cgroup: ModuleCgroup,
    command: string,
    args: readonly string[],
    user?: { readonly uid: number; readonly gid: number },
  ): ConfinedCommand {
    if (user !== undefined && this.#setpriv === undefined) {
      return { command, args, joinsFirst: false };
    }
    const drop =
      user === undefined
        ? []
        : [this.#setpriv as string, `--reuid=${user.uid}`, `--regid=${user.gid}`, "--clear-groups", "--"];
    return {
      command: "/bin/sh",
      args: ["-c", JOIN_SCRIPT, "mesh-join", ...cgroup.joinFiles(), "--", ...drop, command, ...args],
      joinsFirst: true,
    };
  }

  /**
   * Ends every process in every cgroup of this mesh (named `mesh-<id>-…`) in the hierarchies used
   * now and those a run before recorded, and removes those cgroups: what a killed agent left.
   * Another mesh's cgroups are never touched.
   * @returns each cgroup swept, with the processes it still held.
   */
  async sweep(): Promise<{ readonly name: string; readonly killed: number }[]> {
    const prefix = meshUserPrefix(this.#meshId);
    const bases = [...new Set([...this.#hierarchies.map((h) => h.base), ...this.#earlierBases])];
    const byName = new Map<string, string[]>();
    for (const base of bases) {
      let entries: string[];
      try {
        entries = readdirSync(base);
      } catch {
        continue;
      }
      for (const name of entries) {
        if (!name.startsWith(prefix)) continue;
        byName.set(name, [...(byName.get(name) ?? []), join(base, name)]);
      }
    }
    const swept: { name: string; killed: number }[] = [];
    for (const [name, paths] of [...byName].sort(([a], [b]) => (a < b ? -1 : 1))) {
      const cgroup = new ModuleCgroup(name, paths);
      const killed = cgroup.members().length;
      await cgroup.kill();
      cgroup.remove();
      swept.push({ name, killed });
    }
    return swept;
  }
}

// Enables the mesh's controllers below `h.base` (v2): first moving every process there to the
// leaf AGENT_CGROUP, as a cgroup whose children use controllers may hold none itself. Only the
// mesh's own processes are moved: a cgroup shared with others (a login session) is not the mesh's
// to rearrange, and its modules there are held and killed, not bounded.
function delegate(h: CgroupHierarchy, notes: string[]): CgroupHierarchy {
  const words = (file: string): string[] => (readText(join(h.base, file)) ?? "").trim().split(/\s+/);
  const available = words("cgroup.controllers");
  const wanted = V2_CONTROLLERS.filter((c) => available.includes(c));
  if (wanted.length === 0) {
    notes.push(`no pids, memory or cpu controller is delegated to ${h.base}`);
    return h;
  }
  const enabled = (): string[] => wanted.filter((c) => words("cgroup.subtree_control").includes(c));
  if (enabled().length === wanted.length) return { ...h, controllers: wanted };
  if (h.base !== h.mount) {
    const members = pidsOf(join(h.base, "cgroup.procs"));
    const foreign = members.filter((pid) => !isOwnProcess(pid));
    if (foreign.length > 0) {
      notes.push(`${h.base} holds ${foreign.length} process(es) not the mesh's (pid ${foreign[0]})`);
      return h;
    }
    try {
      mkdirSync(join(h.base, AGENT_CGROUP), { recursive: true });
      for (const pid of members) writeFileSync(join(h.base, AGENT_CGROUP, "cgroup.procs"), String(pid));
    } catch (err) {
      notes.push(`the mesh cannot move to ${join(h.base, AGENT_CGROUP)} (${(err as Error).message})`);
      return h;
    }
  }
  for (const c of wanted) {
    try {
      writeFileSync(join(h.base, "cgroup.subtree_control"), `+${c}`);
    } catch (err) {
      notes.push(`the ${c} controller cannot be enabled in ${h.base} (${(err as Error).message})`);
    }
  }
  return { ...h, controllers: enabled() };
}

// Whether `pid` is this process or one it started (its parent chain reaches this process).
function isOwnProcess(pid: number): boolean {
  let at = pid;
  for (let i = 0; i < 64 && at > 1; i++) {
    if (at === process.pid) return true;
    const stat = readText(`/proc/${at}/stat`);
    if (stat === undefined) return false;
    at = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  }
  return false;
}

function readBases(path: string): string[] {
  try {
    const value = JSON.parse(readFileSync(path, "utf8")) as { bases?: unknown };
    return Array.isArray(value.bases)
      ? value.bases.filter((b): b is string => typeof b === "string" && b.startsWith("/sys/fs/cgroup"))
      : [];
  } catch {
    return [];
  }
}

// Whole or not at all: a temp file renamed over it.
function writeBases(path: string, bases: readonly string[]): void {
  const temp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  writeFileSync(temp, `${JSON.stringify({ bases }, null, 2)}\n`, { mode: 0o600 });
  renameSync(temp, path);
}
