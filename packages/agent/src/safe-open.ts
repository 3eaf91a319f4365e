// What the agent opens in a place a module can write (the module's home: its metrics URL, its action
// journal, its control socket) may have been put there by the module to trick the agent, which runs
// as root: a symlink to the node's keys, a FIFO that blocks, a device. So it is opened with
// O_NOFOLLOW and O_NONBLOCK and taken only when it is a regular file (or a socket) owned by the user
// that owns the module's home, the one the agent made for that module.
import { constants, closeSync, fstatSync, lstatSync, openSync, type Stats } from "node:fs";
import { lstat, open, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";

/** A file in a module's writable directory that the agent refuses to open. */
export class UnsafeModuleFileError extends Error {
  override name = "UnsafeModuleFileError";
  constructor(
    readonly path: string,
    readonly rule: string,
  ) {
    super(`${path} is refused: ${rule}; the agent opens only what the module itself wrote there`);
  }
}

const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

function isMissing(err: unknown): boolean {
  return (err as NodeJS.ErrnoException).code === "ENOENT";
}

// The owner every file in `path`'s directory must have: that directory's own, checked to be a
// directory and not a link (its parent is the agent's, so the module cannot swap it).
function homeOwner(st: Stats, path: string): number {
  if (st.isSymbolicLink() || !st.isDirectory()) {
    throw new UnsafeModuleFileError(dirname(path), "it is not a directory (a symlink is never followed)");
  }
  return st.uid;
}

function checkOpened(st: Stats, path: string, owner: number): void {
  if (!st.isFile()) throw new UnsafeModuleFileError(path, "it is not a regular file");
  if (st.uid !== owner) {
    throw new UnsafeModuleFileError(
      path,
      `it is owned by uid ${st.uid}, not by the module's user (uid ${owner})`,
    );
  }
}

function refusal(err: unknown, path: string): unknown {
  const code = (err as NodeJS.ErrnoException).code;
  // O_NOFOLLOW on a symlink fails with ELOOP.
  if (code === "ELOOP")
    return new UnsafeModuleFileError(path, "it is a symlink, and a symlink is never followed");
  return err;
}

/**
 * Opens `path`, a file in a module's writable directory, to read: never through a symlink, never a
 * FIFO or device, only a regular file owned by the owner of its directory.
 * @throws UnsafeModuleFileError for anything else; the file system's error (ENOENT when missing).
 */
export async function openModuleFile(path: string): Promise<FileHandle> {
  const owner = homeOwner(await lstat(dirname(path)), path);
  let handle: FileHandle;
  try {
    handle = await open(path, READ_FLAGS);
  } catch (err) {
    throw refusal(err, path);
  }
  try {
    checkOpened(await handle.stat(), path, owner);
    return handle;
  } catch (err) {
    await handle.close();
    throw err;
  }
}

/**
 * `openModuleFile` for synchronous callers: returns the file descriptor, which the caller closes.
 * @throws UnsafeModuleFileError; the file system's error (ENOENT when missing).
 */
export function openModuleFileSync(path: string): number {
  const owner = homeOwner(lstatSync(dirname(path)), path);
  let fd: number;
  try {
    fd = openSync(path, READ_FLAGS);
  } catch (err) {
    throw refusal(err, path);
  }
  try {
    checkOpened(fstatSync(fd), path, owner);
    return fd;
  } catch (err) {
    closeSync(fd);
    throw err;
  }
}

/**
 * Checks that `path`, a control socket in a module's writable directory, is a socket (not a
 * symlink to another module's socket) owned by the owner of its directory. Undefined when there is
 * no such file.
 * @throws UnsafeModuleFileError when it is anything else.
 */
export async function checkModuleSocket(path: string): Promise<"missing" | "socket"> {
  let owner: number;
  let st: Stats;
  try {
    owner = homeOwner(await lstat(dirname(path)), path);
    st = await lstat(path);
  } catch (err) {
    if (isMissing(err)) return "missing";
    throw err;
  }
  if (st.isSymbolicLink())
    throw new UnsafeModuleFileError(path, "it is a symlink, and a symlink is never followed");
  if (!st.isSocket()) throw new UnsafeModuleFileError(path, "it is not a socket");
  if (st.uid !== owner) {
    throw new UnsafeModuleFileError(
      path,
      `it is owned by uid ${st.uid}, not by the module's user (uid ${owner})`,
    );
  }
  return "socket";
}
