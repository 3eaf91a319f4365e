import { close, constants, fstat, open, read, type Stats } from "node:fs";
import { realpath } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, resolve, sep } from "node:path";

/** The largest secret file read, in bytes: a password, never a document. */
export const MAX_SECRET_BYTES = 4096;

// The callback API, wrapped by hand: a pass reads every consumer's secret, and fs/promises' FileHandle
// costs over twice as much per file (measured: 100,000 files in 2 s against 5 s).
function openFile(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => open(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

function fstatFile(fd: number): Promise<Stats> {
  return new Promise((resolve, reject) => fstat(fd, (err, stats) => (err ? reject(err) : resolve(stats))));
}

function readAt(
  fd: number,
  buffer: Buffer,
  offset: number,
  length: number,
  position: number,
): Promise<number> {
  return new Promise((resolve, reject) =>
    read(fd, buffer, offset, length, position, (err, bytesRead) => (err ? reject(err) : resolve(bytesRead))),
  );
}

/** Reads at most `size` bytes of `fd` from its start. */
async function readUpTo(fd: number, size: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(size);
  let length = 0;
  while (length < size) {
    const bytesRead = await readAt(fd, buffer, length, size - length, length);
    if (bytesRead === 0) break;
    length += bytesRead;
  }
  return buffer.subarray(0, length);
}

/** The longest secret path looked at; a longer one is refused before the filesystem is asked. */
const MAX_SECRET_PATH = 4096;

// Non-blocking, so a FIFO never holds the pass; no-follow, so a symlink is never read through;
// no controlling terminal, whatever the file turns out to be.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW | constants.O_NOCTTY;

/** A consumer's secret file could not give a password. Never "no password": the consumer waits. */
export class SecretUnreadableError extends Error {
  override name = "SecretUnreadableError";
  /**
   * True when the file is there but breaks the rule (outside the directory, not a regular file, too
   * large): no race that time will clear. False when it is missing, unreadable or empty.
   */
  readonly breaksRule: boolean;
  constructor(
    readonly path: string,
    reason: string,
    options?: { cause?: unknown; breaksRule?: boolean },
  ) {
    super(`secret file ${path} ${reason}`, options);
    this.breaksRule = options?.breaksRule ?? false;
  }
}

/**
 * The directory a provider reads consumers' secrets from, and the rule it reads them by: a secret
 * is a regular file the mesh wrote under it (judged by the real path of the file's directory, so no
 * symlinked directory leads out), opened without following a symlink and without blocking, checked
 * with `fstat` as it was opened, and at most `MAX_SECRET_BYTES`. Anything else (`/etc/shadow`, a
 * FIFO, a device, a directory, a symlink, a large file) is refused, naming the path and the rule.
 */
export class SecretsDirectory {
  #real: Promise<string> | undefined;
  readonly #dirs = new Map<string, Promise<string>>();

  /** @param path the directory; resolved with `realpath` when first read from. */
  constructor(readonly path: string) {}

  /**
   * Forgets every real path resolved so far: a pass calls it first, so a directory moved or
   * replaced since the last pass is judged as it is now. Within one pass the directories are
   * resolved once each.
   */
  refresh(): void {
    this.#real = undefined;
    this.#dirs.clear();
  }

  /**
   * Whether `secret` names a file under this directory as written (no filesystem is asked, so a
   * symlink may still lead out: `read` judges by the real path).
   */
  mayHold(secret: string): boolean {
    return isAbsolute(secret) && isWithin(resolve(secret), resolve(this.path));
  }

  /**
   * Reads a password from `secret`: exactly the file, less one trailing newline.
   * @throws SecretUnreadableError when the file is not a regular file under this directory, is
   *   larger than `MAX_SECRET_BYTES`, cannot be read, or is empty.
   */
  async read(secret: string): Promise<string> {
    const rule = `a secret is read only from a regular file of at most ${MAX_SECRET_BYTES} bytes under ${this.path}`;
    if (secret.length > MAX_SECRET_PATH) {
      throw refusal(
        `${secret.slice(0, 64)}…`,
        `is a path longer than ${MAX_SECRET_PATH} characters: ${rule}`,
      );
    }
    if (!isAbsolute(secret)) throw refusal(secret, `is not an absolute path: ${rule}`);
    if (secret.includes("\0")) throw refusal(secret, `holds a NUL character: ${rule}`);

    let root: string;
    try {
      root = await (this.#real ??= realpath(this.path));
    } catch (err) {
      this.#real = undefined;
      throw new SecretUnreadableError(
        secret,
        `cannot be checked: the secrets directory ${this.path} ${describeCode(err)}`,
        { cause: err },
      );
    }
    const dir = dirname(secret);
    let realDir: string;
    try {
      let resolving = this.#dirs.get(dir);
      if (resolving === undefined) this.#dirs.set(dir, (resolving = realpath(dir)));
      realDir = await resolving;
    } catch (err) {
      this.#dirs.delete(dir);
      throw new SecretUnreadableError(secret, `cannot be found: its directory ${dir} ${describeCode(err)}`, {
        cause: err,
      });
    }
    if (!isWithin(realDir, root)) {
      throw refusal(secret, `is outside the secrets directory (its directory is really ${realDir}): ${rule}`);
    }
    const name = basename(secret);
    if (name === "" || name === "." || name === "..") {
      throw refusal(secret, `does not name a file: ${rule}`);
    }
    const real = join(realDir, name);

    let fd: number;
    try {
      fd = await openFile(real, OPEN_FLAGS);
    } catch (err) {
      if (isCode(err, "ELOOP")) throw refusal(secret, `is a symbolic link: ${rule}`);
      throw new SecretUnreadableError(secret, describeMissing(err), { cause: err });
    }
    let raw: Buffer;
    try {
      // Judged by what was opened, not by a look at the path before: nothing can be swapped in between.
      const stats = await fstatFile(fd);
      refuseUnlessSmallRegular(secret, stats, rule);
      // One byte more than fstat said, so a file that grew since is seen; then, read again in full,
      // one byte more than allowed, so one that grew too large is refused. A secret is a few dozen
      // bytes: a pass reading thousands allocates that, not 4 KiB each.
      raw = await readUpTo(fd, stats.size + 1);
      if (raw.length > stats.size) raw = await readUpTo(fd, MAX_SECRET_BYTES + 1);
      if (raw.length > MAX_SECRET_BYTES) {
        throw refusal(secret, `is larger than ${MAX_SECRET_BYTES} bytes: ${rule}`);
      }
    } catch (err) {
      if (err instanceof SecretUnreadableError) throw err;
      throw new SecretUnreadableError(secret, `cannot be read (${codeOf(err)})`, { cause: err });
    } finally {
      close(fd, () => undefined);
    }
    const text = raw.toString("utf8");
    const password = text.endsWith("\r\n")
      ? text.slice(0, -2)
      : text.endsWith("\n")
        ? text.slice(0, -1)
        : text;
    if (password === "") throw new SecretUnreadableError(secret, "is empty");
    return password;
  }
}

/**
 * Reads a password from its secret file under `secretsDir`, by the rule of `SecretsDirectory`.
 * @throws SecretUnreadableError when the file breaks the rule, cannot be read, or is empty.
 */
export function readSecret(path: string, secretsDir: string): Promise<string> {
  return new SecretsDirectory(secretsDir).read(path);
}

function refuseUnlessSmallRegular(secret: string, stats: Stats, rule: string): void {
  if (!stats.isFile()) throw refusal(secret, `is ${kindOf(stats)}, not a regular file: ${rule}`);
  if (stats.size > MAX_SECRET_BYTES) {
    throw refusal(secret, `is ${stats.size} bytes, larger than ${MAX_SECRET_BYTES}: ${rule}`);
  }
}

function refusal(secret: string, reason: string): SecretUnreadableError {
  return new SecretUnreadableError(secret, reason, { breaksRule: true });
}

function kindOf(stats: Stats): string {
  if (stats.isSymbolicLink()) return "a symbolic link";
  if (stats.isDirectory()) return "a directory";
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isCharacterDevice()) return "a character device";
  if (stats.isBlockDevice()) return "a block device";
  if (stats.isSocket()) return "a socket";
  return "not a regular file";
}

function isWithin(dir: string, root: string): boolean {
  if (dir === root) return true;
  return dir.startsWith(root.endsWith(sep) ? root : `${root}${sep}`);
}

function describeMissing(err: unknown): string {
  return isCode(err, "ENOENT") ? "does not exist" : `cannot be read (${codeOf(err)})`;
}

function describeCode(err: unknown): string {
  if (isCode(err, "ENOENT")) return "does not exist";
  if (isCode(err, "ENOTDIR")) return "is not a directory";
  return `cannot be resolved (${codeOf(err)})`;
}

function codeOf(err: unknown): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code ?? (err instanceof Error ? err.message : String(err));
}

function isCode(err: unknown, code: string): boolean {
  return typeof err === "object" && err !== null && (err as { code?: unknown }).code === code;
}
