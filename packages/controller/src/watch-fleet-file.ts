// The fleet file is watched through its directory: editors and the mesh's own writers replace the
// file by renaming over it, and a watch on the file itself goes silent after the first rename.
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";
import type { BusLogger } from "@mesh/bus";

/** A running watch; `close()` ends it. */
export interface FleetFileWatch {
  close(): void;
}

// A file renamed over the fleet file (the mesh's own writers, most editors) is whole the moment it
// appears, and that is the only event it raises: it is read after a short quiet spell, enough to fold
// a few renames in a row into one reading. A file written in place (truncate, then write, perhaps in
// several steps; or created, then written) raises "change" events, and may be half written until
// they stop: once one is seen, the burst waits for a longer quiet spell.
const RENAMED_SETTLE_MS = 25;
const WRITTEN_SETTLE_MS = 200;

/**
 * Calls `onChange` (once per burst of changes) whenever the file at `path` is written, replaced,
 * created or removed. A watch that fails is said once to `log`.
 * @throws the file system's error when the file's directory cannot be watched.
 */
export function watchFleetFile(path: string, onChange: () => void, log: BusLogger): FleetFileWatch {
  const name = basename(path);
  let timer: NodeJS.Timeout | undefined;
  let written = false;
  const watcher: FSWatcher = watch(dirname(path), { persistent: false }, (event, changed) => {
    if (changed !== null && changed !== name) return;
    // An event without the name cannot say how the file changed: treat it as a write.
    if (event === "change" || changed === null) written = true;
    if (timer !== undefined) clearTimeout(timer);
    timer = setTimeout(
      () => {
        timer = undefined;
        written = false;
        onChange();
      },
      written ? WRITTEN_SETTLE_MS : RENAMED_SETTLE_MS,
    );
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
