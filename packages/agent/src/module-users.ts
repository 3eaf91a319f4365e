// Each module of a node runs as its own system user when the agent runs as root, so that no module
// can read another's secrets or the node's keys. Node has no getpwnam: users are made with
// `useradd` and read back with `getent passwd`; whether a user can reach a path is asked of the
// system itself, by a shell run as that user, so ACLs and mounts count as they do for the module.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { readFile } from "node:fs/promises";

/** The system user a module runs as. */
export interface ModuleUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

/** How the agent separates its modules: `strict` refuses what cannot be separated, `auto` runs it as the agent. */
export type IsolationMode = "strict" | "auto";

/** The isolation modes, as the `--isolation` flag takes them. */
export const ISOLATION_MODES: readonly IsolationMode[] = ["strict", "auto"];

/** The longest user name `useradd` takes on Debian, as logins are cut. */
export const USER_NAME_MAX = 32;
const HASH_CHARS = 8;

/**
 * The system user of `module` in the mesh `meshId` (see mesh-id.ts): `mesh-<id>-<module>`, or,
 * when that is longer than 32 characters, its first 23 characters, `-` and 8 hex characters of a
 * hash of the whole name (stable, so every start finds the same user; exactly 32, so it never
 * equals a written-out name). The module's cgroup has the same name.
 */
export function moduleUserName(meshId: string, module: string): string {
  const full = `${meshUserPrefix(meshId)}${module}`;
  if (full.length <= USER_NAME_MAX) return full;
  const hash = createHash("sha256").update(full).digest("hex").slice(0, HASH_CHARS);
  return `${full.slice(0, USER_NAME_MAX - 1 - HASH_CHARS)}-${hash}`;
}

/** `mesh-<id>-`: what every user (and cgroup) of the mesh `meshId` is named with. */
export function meshUserPrefix(meshId: string): string {
  return `mesh-${meshId}-`;
}

/**
 * The users in `/etc/passwd` named as the mesh `meshId`'s (`mesh-<id>-…`) that no module of
 * `modules` runs as: users of modules gone from this node. The mesh never removes a user (a
 * rollback must find the module's files owned as they were); an operator does, with `userdel`.
 */
export async function usersOfGoneModules(
  meshId: string,
  modules: readonly string[],
  passwd = "/etc/passwd",
): Promise<string[]> {
  let text: string;
  try {
    text = await readFile(passwd, "utf8");
  } catch {
    return [];
  }
  const prefix = meshUserPrefix(meshId);
  const current = new Set(modules.map((m) => moduleUserName(meshId, m)));
  return text
    .split("\n")
    .filter((line) => line.includes(":"))
    .map((line) => line.slice(0, line.indexOf(":")))
    .filter((name) => name.startsWith(prefix) && !current.has(name))
    .sort();
}

/** A module's system user could not be made or read back. */
export class ModuleUserError extends Error {
  override name = "ModuleUserError";
  constructor(
    readonly user: string,
    why: string,
  ) {
    super(
      `the system user ${user} could not be made or read (${why}): its module is not started; ` +
        `check that useradd and getent work on this machine (the agent must run as root to separate modules)`,
    );
  }
}

/** What running a command gave: its exit code (null when it could not run) and its output. */
interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function run(
  command: string,
  args: readonly string[],
  options: { uid?: number; gid?: number } = {},
  timeoutMs = 15_000,
): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(
      command,
      [...args],
      // A fixed PATH and nothing else: what decides is the system, not the agent's environment.
      { ...options, env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }, timeout: timeoutMs, encoding: "utf8" },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
        resolve({ code, stdout, stderr: stderr || (err !== null && code === null ? err.message : "") });
      },
    );
  });
}

/** A line of `getent passwd` as a user, or undefined when it is not one. */
function parsePasswdLine(line: string): ModuleUser | undefined {
  const fields = line.split(":");
  const uid = Number(fields[2]);
  const gid = Number(fields[3]);
  const name = fields[0] ?? "";
  if (
    name === "" ||
    fields[2] === "" ||
    fields[3] === "" ||
    !Number.isInteger(uid) ||
    !Number.isInteger(gid)
  ) {
    return undefined;
  }
  return { name, uid, gid };
}

/**
 * `getent passwd NAME…` in one call: the users of `names` the system knows (a name it does not
 * know is simply absent; getent then exits 2).
 * @throws ModuleUserError when getent fails otherwise or says what is not a user.
 */
async function lookUp(names: readonly string[]): Promise<Map<string, ModuleUser>> {
  const found = new Map<string, ModuleUser>();
  if (names.length === 0) return found;
  const got = await run("getent", ["passwd", ...names]);
  if (got.code !== 0 && got.code !== 2) {
    throw new ModuleUserError(names[0] as string, `getent exited ${got.code}: ${got.stderr.trim()}`);
  }
  for (const line of got.stdout.split("\n")) {
    if (line.trim() === "") continue;
    const user = parsePasswdLine(line.trim());
    if (user === undefined)
      throw new ModuleUserError(names[0] as string, `getent said ${JSON.stringify(line.trim())}`);
    if (names.includes(user.name)) found.set(user.name, user);
  }
  return found;
}

/**
 * The system users of one node's modules: made once when missing (`useradd --system
 * --no-create-home --shell /usr/sbin/nologin`, "already exists" counting as success, since another
 * agent may make it at the same moment), then read back and kept. Calls are serialized.
 */
export class ModuleUsers {
  readonly #meshId: string;
  readonly #stateDir: string;
  readonly #known = new Map<string, ModuleUser>();
  #queue: Promise<unknown> = Promise.resolve();

  /**
   * The users of the mesh `meshId` (see mesh-id.ts) whose node state is `stateDir`: each user's
   * comment names it (`mesh module notes of /var/lib/mesh/nodes/node-1`), so an operator can tell
   * which state a user serves, and whether that state is still there.
   */
  constructor(meshId: string, stateDir: string) {
    this.#meshId = meshId;
    this.#stateDir = stateDir;
  }

  /**
   * The user of `module`, made when missing.
   * @throws ModuleUserError when it cannot be made or read back.
   */
  async ensure(module: string): Promise<ModuleUser> {
    const got = (await this.ensureAll([module])).get(module);
    if (got instanceof ModuleUserError) throw got;
    return got as ModuleUser;
  }

  /**
   * The users of `modules`, each made when missing: the ones not known yet are looked up in one
   * call, the missing ones made one after another (useradd locks the user database), then read
   * back in one call. A user that cannot be made or read is its module's error, not the others'.
   */
  ensureAll(modules: readonly string[]): Promise<Map<string, ModuleUser | ModuleUserError>> {
    const next = this.#queue.then(() => this.#ensureAll(modules));
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #ensureAll(modules: readonly string[]): Promise<Map<string, ModuleUser | ModuleUserError>> {
    const nameOf = new Map(modules.map((m) => [m, moduleUserName(this.#meshId, m)] as const));
    const unknown = [...new Set(nameOf.values())].filter((name) => !this.#known.has(name));
    const failed = new Map<string, ModuleUserError>();
    const keep = (users: Map<string, ModuleUser>): void => {
      for (const [name, user] of users) this.#known.set(name, user);
    };
    const lookUpEach = async (names: readonly string[]): Promise<void> => {
      try {
        keep(await lookUp(names));
      } catch (err) {
        for (const name of names) failed.set(name, err as ModuleUserError);
      }
    };
    await lookUpEach(unknown);
    const missing: [module: string, name: string][] = [];
    for (const [module, name] of nameOf) {
      if (this.#known.has(name) || failed.has(name) || missing.some(([, n]) => n === name)) continue;
      missing.push([module, name]);
    }
    const made: string[] = [];
    const ran = await addUsers(
      missing.map(([module, name]) => ({ name, comment: moduleUserComment(module, this.#stateDir) })),
    );
    for (const [i, [, name]] of missing.entries()) {
      const one = ran[i] as Ran;
      // 9: the name is taken (by another agent just now): that user is the one.
      if (one.code !== 0 && one.code !== 9) {
        failed.set(name, new ModuleUserError(name, `useradd exited ${one.code}: ${one.stderr.trim()}`));
      } else made.push(name);
    }
    await lookUpEach(made);
    const result = new Map<string, ModuleUser | ModuleUserError>();
    for (const [module, name] of nameOf) {
      result.set(
        module,
        this.#known.get(name) ??
          failed.get(name) ??
          new ModuleUserError(name, "getent does not know it after useradd"),
      );
    }
    return result;
  }
}

const USERADD_FLAGS =
  "--system --no-create-home --user-group --home-dir /nonexistent --shell /usr/sbin/nologin";
/** How long one useradd may take (it waits up to 15 s for the user database's lock). */
const USERADD_MOST_MS = 15_000;

/**
 * Makes each user of `users` with useradd, one after another (useradd locks the user database),
 * all from one shell: a process spawned by the agent costs it tens of milliseconds of its own
 * (the fork of a large process), a useradd run by a small shell almost nothing.
 * @returns each one's exit code and what it said, in order (code null: it was not run).
 */
async function addUsers(users: readonly { name: string; comment: string }[]): Promise<Ran[]> {
  if (users.length === 0) return [];
  const script = [
    'while [ "$#" -gt 1 ]; do',
    `  err=$(useradd ${USERADD_FLAGS} --comment "$1" "$2" 2>&1 >/dev/null); rc=$?`,
    "  printf '%s %s\\n' \"$rc\" \"$(printf %s \"$err\" | tr '\\n' ' ')\"",
    "  shift 2",
    "done",
  ].join("\n");
  const got = await run(
    "/bin/sh",
    ["-c", script, "sh", ...users.flatMap((u) => [u.comment, u.name])],
    {},
    USERADD_MOST_MS * users.length,
  );
  const lines = got.stdout.split("\n");
  return users.map((_, i) => {
    const line = lines[i];
    if (line === undefined || line === "") {
      return { code: null, stdout: "", stderr: got.stderr || `the shell running useradd exited ${got.code}` };
    }
    const space = line.indexOf(" ");
    return { code: Number(line.slice(0, space)), stdout: "", stderr: line.slice(space + 1) };
  });
}

/**
 * A module user's comment (its GECOS field): `mesh module <module> of <state directory>`, with
 * what /etc/passwd cannot hold (`:`, a newline) replaced.
 */
export function moduleUserComment(module: string, stateDir: string): string {
  return `mesh module ${module} of ${stateDir}`.replace(/[:\n\r]/g, "?");
}

/** Whether this agent can run modules as other users: it runs as root. */
export function canSeparateModules(): boolean {
  return process.getuid?.() === 0;
}

/** One thing a module's user must be able to do for the module to run. */
export interface Reach {
  /** `read`: list and enter a directory (or read a file); `enter`: traverse; `run`: execute; `write`. */
  readonly need: "read" | "enter" | "run" | "write";
  readonly path: string;
  /** What the path is to the module, for the message: "its manifest directory". */
  readonly what: string;
}

/** A path a module's user cannot reach as it must. */
export interface Unreachable extends Reach {
  /** In words: "user mesh-notes cannot read its manifest directory /root/mesh/notes". */
  readonly why: string;
}

const TESTS: Record<Reach["need"], string> = {
  read: 'test -r "$p" && { test ! -d "$p" || test -x "$p"; }',
  enter: 'test -x "$p"',
  run: 'test -f "$p" && test -x "$p"',
  write: 'test -w "$p" && test -x "$p"',
};

/**
 * The first of `reaches` that `user` cannot do, asked of a shell run as that user (so every
 * ancestor directory, ACL and mount counts), or undefined when it can do them all.
 */
export async function firstUnreachable(
  user: ModuleUser,
  reaches: readonly Reach[],
  shells: ShellsAsUsers = ONE_BY_ONE,
): Promise<Unreachable | undefined> {
  if (reaches.length === 0) return undefined;
  const script = reaches.map((r, i) => `p=$${i + 1}; ${TESTS[r.need]} || { echo ${i}; exit 0; }`).join("\n");
  const got = await shells.run(
    user,
    script,
    reaches.map((r) => r.path),
  );
  if (got.code !== 0) {
    const first = reaches[0] as Reach;
    return {
      ...first,
      why: `user ${user.name} cannot be checked (${got.stderr.trim() || `exit ${got.code}`})`,
    };
  }
  const failed = got.stdout.trim();
  if (failed === "") return undefined;
  const reach = reaches[Number(failed)] as Reach;
  const verb = { read: "read", enter: "enter", run: "run", write: "write to" }[reach.need];
  return { ...reach, why: `user ${user.name} cannot ${verb} ${reach.what} ${reach.path}` };
}

/**
 * Where a bare command (`node`) is found on `path` as `user` sees it, or undefined when nowhere.
 */
export async function commandPathAs(
  user: ModuleUser,
  command: string,
  path: string,
  shells: ShellsAsUsers = ONE_BY_ONE,
): Promise<string | undefined> {
  const got = await shells.run(user, 'PATH=$1; command -v "$2"', [path, command]);
  const found = got.stdout.trim();
  return got.code === 0 && found.startsWith("/") ? found : undefined;
}

/** A shell script to run as a module's user, with its positional arguments ($1…). */
interface AsUser {
  readonly user: ModuleUser;
  readonly script: string;
  readonly args: readonly string[];
}

function runOne(r: AsUser): Promise<Ran> {
  return run("/bin/sh", ["-c", r.script, "sh", ...r.args], { uid: r.user.uid, gid: r.user.gid });
}

// Each script as its user (setpriv, no supplementary groups, as the agent's own spawn does), one
// after another in one root shell; what each wrote to stdout and stderr comes back in hex, one
// line each. 127: setpriv is not there.
const BATCH_SCRIPT = [
  "command -v setpriv >/dev/null 2>&1 || exit 127",
  "e=$(mktemp) || exit 126",
  "trap 'rm -f \"$e\"' EXIT",
  'while [ "$#" -gt 2 ]; do',
  '  out=$(setpriv --reuid="$1" --regid="$2" --clear-groups -- /bin/sh -c "$3" 2>"$e"); rc=$?',
  '  printf \'%s %s %s\\n\' "$rc" "$(printf %s "$out" | od -An -v -tx1 | tr -d \' \\n\')" "$(od -An -v -tx1 <"$e" | tr -d \' \\n\')"',
  "  shift 3",
  "done",
].join("\n");

function shellQuote(arg: string): string {
  return `'${arg.replaceAll("'", "'\\''")}'`;
}

async function runBatch(batch: readonly AsUser[]): Promise<Ran[]> {
  if (batch.length === 1) return [await runOne(batch[0] as AsUser)];
  const args = batch.flatMap((r) => [
    String(r.user.uid),
    String(r.user.gid),
    `set -- ${r.args.map(shellQuote).join(" ")}\n${r.script}`,
  ]);
  const got = await run("/bin/sh", ["-c", BATCH_SCRIPT, "sh", ...args], {}, 15_000 + 1_000 * batch.length);
  if (got.code === 127 && got.stdout === "") {
    // No setpriv here: each as a process of the agent's own, as before.
    const ran: Ran[] = [];
    for (const r of batch) ran.push(await runOne(r));
    return ran;
  }
  const lines = got.stdout.split("\n");
  const text = (hex: string | undefined): string => Buffer.from(hex ?? "", "hex").toString("utf8");
  return batch.map((_, i) => {
    const line = lines[i];
    if (line === undefined || line === "") {
      return { code: null, stdout: "", stderr: got.stderr || `the checking shell exited ${got.code}` };
    }
    const [code, out, err] = line.split(" ");
    return { code: Number(code), stdout: text(out), stderr: text(err) };
  });
}

/**
 * Runs shell scripts as modules' users. What is asked while a run is under way (and in the same
 * turn as the first ask) goes in one process, so a hundred modules' checks cost the agent a few
 * spawns rather than a hundred: each spawn forks the agent, tens of milliseconds of its time on a
 * loaded node, during which it does nothing else.
 */
export class ShellsAsUsers {
  readonly #batched: boolean;
  #waiting: { ask: AsUser; resolve: (ran: Ran) => void }[] = [];
  #running = false;

  /** `batched`: false runs each script as a process of its own, at once. */
  constructor(batched = true) {
    this.#batched = batched;
  }

  /** Runs `script` with `args` as `user`; its exit code (null: it could not run) and output. */
  run(user: ModuleUser, script: string, args: readonly string[]): Promise<Ran> {
    const ask = { user, script, args };
    if (!this.#batched) return runOne(ask);
    return new Promise((resolve) => {
      this.#waiting.push({ ask, resolve });
      if (this.#running) return;
      this.#running = true;
      setImmediate(() => void this.#drain());
    });
  }

  async #drain(): Promise<void> {
    while (this.#waiting.length > 0) {
      const batch = this.#waiting;
      this.#waiting = [];
      const ran = await runBatch(batch.map((w) => w.ask)).catch((err: unknown) =>
        batch.map(() => ({
          code: null,
          stdout: "",
          stderr: err instanceof Error ? err.message : String(err),
        })),
      );
      batch.forEach((w, i) => w.resolve(ran[i] as Ran));
    }
    this.#running = false;
  }
}

const ONE_BY_ONE = new ShellsAsUsers(false);
