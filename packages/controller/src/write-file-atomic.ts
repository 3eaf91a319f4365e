// Every file the controller keeps is written whole or not at all: a crash mid-write must never
// leave a half-written key file that a restart would then refuse (or, worse, half-read).
import { randomBytes } from "node:crypto";
import { mkdir, open, rename, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";

/**
 * Writes `text` to `path` atomically (temp file in the same directory, fsync, rename, fsync of the
 * directory), with `mode` (0600 by default: what the controller keeps is secret).
 * @throws the file system's error when the directory cannot be made or written.
 */
export async function writeFileAtomic(path: string, text: string, mode = 0o600): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const temp = join(dir, `.${basename(path)}.${randomBytes(6).toString("hex")}.tmp`);
  try {
    const file = await open(temp, "wx", mode);
    try {
      await file.writeFile(text);
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(temp, path);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
  // The rename itself is durable only once the directory is synced.
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
