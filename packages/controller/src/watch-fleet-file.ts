// The fleet file is watched through its directory: editors and the mesh's own writers replace the
// file by renaming over it, and a watch on the file itself goes silent after the first rename.
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";
import type { BusLogger } from "@mesh/bus";

/** A running watch; `close()` ends it. */
export interface FleetFileWatch {
  close(): void;
}

// An editor saves in several steps (truncate, write, rename): wait for them to settle.
const SETTLE_MS = 200;

/**
 * Calls `onChange` (once per burst of changes) whenever the file at `path` is written, replaced,
 * created or removed. A watch that fails is said once to `log`.
 * @throws the file system's error when the file's directory cannot be watched.
 */
export function watchFleetFile(path: string, onChange: () => void, log: BusLogger): FleetFileWatch {
  const name = basename(path);
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(dirname(path), { persistent: false }, (_event, changed) => {
    if (changed !== null && changed !== name) return;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = undefined;
      onChange();
    }, SETTLE_MS);
  });
  watcher.on("error", (err) => {
    log.warn(
      `the fleet file ${path} is no longer watched (${err.message}): a change is read when the ` +
        `controller is restarted`,
    );
  });
  return {
    close() {
      if (timer !== undefined) clearTimeout(timer);
      watcher.close();
    },
  };
}
