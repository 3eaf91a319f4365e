// One mesh per state directory. Node has no flock: the lock is a file, `<dir>/lock`, holding the
// PID and start time (`/proc/<pid>/stat` field 22) of the process that holds it. It is made whole
// and then linked into place, which fails when the file exists: two starts never both hold it. A
// lock whose process is gone, or whose PID now names another process (its start time differs), is
// stale: the next start takes it over and says so.
import { randomBytes } from "node:crypto";
import { link, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { processStartTime } from "./process-records.ts";

/** What the lock file holds. */
interface LockContents {
  readonly pid: number;
  readonly start: number;
  /** What holds it: `mesh up`, `mesh agent`. */
  readonly who: string;
  /** ISO 8601. */
  readonly since: string;
}

/** A state directory's lock, held by this process. */
export interface StateLock {
  /** `<dir>/lock`. */
  readonly path: string;
  /** The stale lock taken over, when there was one: what held it and why it no longer does. */
  readonly tookOver?: { readonly pid: number; readonly who: string; readonly why: string };
  /** Gives the lock up (only while this process holds it). Safe to call twice. */
  release(): Promise<void>;
}

/** Another live process holds the state directory's lock. */
export class StateLockedError extends Error {
  override name = "StateLockedError";
  constructor(
    readonly dir: string,
    readonly pid: number,
    readonly who: string,
  ) {
    super(
      `the state directory ${dir} is in use by ${who} (pid ${pid}): one mesh per state directory; ` +
        `stop that one first, or give this one another --state`,
    );
  }
}

/** `<dir>/lock`. */
export function stateLockPath(dir: string): string {
  return join(dir, "lock");
}

function parse(text: string): LockContents | undefined {
  try {
    const raw = JSON.parse(text) as Partial<LockContents> | null;
    if (!Number.isInteger(raw?.pid) || !Number.isInteger(raw?.start)) return undefined;
    return {
      pid: raw!.pid!,
      start: raw!.start!,
      who: String(raw!.who ?? "a mesh"),
      since: String(raw!.since),
    };
  } catch {
    return undefined;
  }
}

/** Why a lock no longer holds, or undefined when its process still runs. */
function staleness(held: LockContents | undefined): string | undefined {
  if (held === undefined) return "its lock file cannot be read";
  const start = processStartTime(held.pid);
  if (start === undefined) return `pid ${held.pid} is gone`;
  if (start !== held.start) return `pid ${held.pid} is now another process`;
  return undefined;
}

/**
 * Takes the lock of state directory `dir` (made 0700 when missing) for this process, `who` naming
 * it (`mesh up`). A stale lock is taken over (`tookOver` says whose).
 * @throws StateLockedError when a live process holds it.
 */
export async function lockStateDir(dir: string, who: string): Promise<StateLock> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const path = stateLockPath(dir);
  const start = processStartTime(process.pid);
  if (start === undefined)
    throw new Error(`cannot read /proc/${process.pid}/stat: the state lock needs /proc`);
  const mine: LockContents = { pid: process.pid, start, who, since: new Date().toISOString() };
  const text = `${JSON.stringify(mine)}\n`;
  let tookOver: StateLock["tookOver"];
  // Bounded: each turn either takes the lock, refuses, or removes one stale lock.
  for (let attempt = 0; attempt < 5; attempt++) {
    const temp = join(dir, `.lock.${randomBytes(6).toString("hex")}.tmp`);
    // Root's alone, like everything of the mesh's in a state directory that modules may traverse.
    await writeFile(temp, text, { mode: 0o600 });
    try {
      await link(temp, path);
      await rm(temp, { force: true });
      return {
        path,
        ...(tookOver === undefined ? {} : { tookOver }),
        release: async () => {
          const now = parse(await readFile(path, "utf8").catch(() => ""));
          if (now?.pid === mine.pid && now.start === mine.start) await rm(path, { force: true });
        },
      };
    } catch (err) {
      await rm(temp, { force: true });
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const seen = await readFile(path, "utf8").catch(() => undefined);
    if (seen === undefined) continue; // released meanwhile
    const held = parse(seen);
    // A file still being written by a start racing this one is not stale: it is read again.
    if (held === undefined && attempt < 2) {
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    const why = staleness(held);
    if (why === undefined) throw new StateLockedError(dir, held!.pid, held!.who);
    // Moved aside, then checked: a start that took it over meanwhile gets its lock back.
    const aside = join(dir, `.lock.stale.${randomBytes(6).toString("hex")}`);
    try {
      await rename(path, aside);
    } catch {
      continue;
    }
    const moved = await readFile(aside, "utf8").catch(() => "");
    if (moved !== seen) {
      await link(aside, path).catch(() => undefined);
      await rm(aside, { force: true });
      continue;
    }
    await rm(aside, { force: true });
    tookOver = { pid: held?.pid ?? 0, who: held?.who ?? "a mesh", why };
  }
  throw new Error(`could not take the lock ${path}: it changed hands on every try; try again`);
}
