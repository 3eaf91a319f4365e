// Every file the mesh writes (the controller's keys, a node's secrets, contributions and credential
// files) is written whole or not at all (temp file, fsync, rename), so whoever reads it at any moment
// sees the old contents or the new, never half of each; and a file already holding the same bytes is
// left alone, so a restarted agent touches nothing.
import { randomBytes } from "node:crypto";
import { lstat, mkdir, open, readFile, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/** What `writeFileAtomic` did: wrote the file, or found it already as asked. */
export type WriteOutcome = "written" | "unchanged";

/** A file the mesh could not write; the old file, when there was one, is left as it was. */
export class FileWriteError extends Error {
  override name = "FileWriteError";
  constructor(
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    const code = (options?.cause as NodeJS.ErrnoException | undefined)?.code;
    super(
      `could not write ${path}${code === undefined ? "" : ` (${code})`}: the previous file, if any, is ` +
        `unchanged; check that the state directory is writable and the disk not full`,
      options,
    );
  }
}

/** Who a written file belongs to: the module that reads it (the agent runs as root). */
export interface FileOwner {
  readonly uid: number;
  readonly gid: number;
}

/**
 * Writes `data` to `path` atomically with `mode` (0600 unless told: most of what the mesh keeps is
 * secret; the parent directories are made 0700), unless
 * the file already holds exactly `data` with exactly `mode` (and `owner`, when given).
 * With `owner`, the file is handed to that user through its open handle before the rename, so it
 * is never in place with another owner; a file with another owner counts as changed.
 * @throws FileWriteError when the file cannot be written.
 */
export async function writeFileAtomic(
  path: string,
  data: string,
  mode = 0o600,
  owner?: FileOwner,
): Promise<WriteOutcome> {
  const bytes = Buffer.from(data, "utf8");
  if (await holds(path, bytes, mode, owner)) return "unchanged";
  const temp = join(dirname(path), `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const handle = await open(temp, "wx", mode);
    try {
      await handle.writeFile(bytes);
      // The umask may have narrowed the mode open() was given, and a wider one must never stay.
      await handle.chmod(mode);
      if (owner !== undefined) await handle.chown(owner.uid, owner.gid);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
    await syncDir(dirname(path));
  } catch (err) {
    await rm(temp, { force: true });
    throw new FileWriteError(path, { cause: err });
  }
  return "written";
}

async function holds(path: string, bytes: Buffer, mode: number, owner?: FileOwner): Promise<boolean> {
  try {
    // lstat: a symlink in the file's place is never taken for the file; the rename replaces it.
    const st = await lstat(path);
    if (!st.isFile() || (st.mode & 0o777) !== mode || st.size !== bytes.length) return false;
    if (owner !== undefined && (st.uid !== owner.uid || st.gid !== owner.gid)) return false;
    return (await readFile(path)).equals(bytes);
  } catch {
    return false;
  }
}

// The rename is durable only once the directory entry is on disk too.
async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } catch {
    // Some filesystems refuse fsync on a directory; the rename itself has happened.
  } finally {
    await handle.close();
  }
}

/**
 * The text of `path`, or undefined when there is no such file yet (the first start of whoever keeps it).
 * @throws the file system's error for anything but a missing file.
 */
export async function readFileIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}
