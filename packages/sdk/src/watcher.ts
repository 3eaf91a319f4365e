import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";

/**
 * Watches files by watching their directories: a watch on a file itself goes silent after the first
 * atomic rename replaces it, which is exactly how the mesh writes contributions and secrets.
 */
export class FileWatcher {
  readonly #dirs = new Map<string, { watcher: FSWatcher | undefined; names: Set<string> }>();
  #closed = false;

  constructor(private readonly onChange: (path: string) => void) {}

  /** Watches exactly these files from now on (directories that no longer hold one are let go). */
  watchFiles(paths: Iterable<string>): void {
    if (this.#closed) return;
    const wanted = new Map<string, Set<string>>();
    for (const path of paths) {
      const dir = dirname(path);
      let names = wanted.get(dir);
      if (!names) wanted.set(dir, (names = new Set()));
      names.add(basename(path));
    }
    for (const [dir, entry] of this.#dirs) {
      if (!wanted.has(dir)) {
        entry.watcher?.close();
        this.#dirs.delete(dir);
      }
    }
    for (const [dir, names] of wanted) {
      const entry = this.#dirs.get(dir);
      if (entry?.watcher) {
        entry.names = names;
        continue;
      }
      // A directory not there yet is tried again on the next call; the periodic pass covers the gap.
      this.#dirs.set(dir, { watcher: this.#open(dir), names });
    }
  }

  #open(dir: string): FSWatcher | undefined {
    try {
      const watcher = watch(dir, { persistent: false }, (_event, name) => {
        const entry = this.#dirs.get(dir);
        if (!entry) return;
        const file = name === null ? null : String(name);
        if (file === null) {
          for (const n of entry.names) this.onChange(`${dir}/${n}`);
        } else if (entry.names.has(file)) {
          this.onChange(`${dir}/${file}`);
        }
      });
      watcher.on("error", () => {
        watcher.close();
        const entry = this.#dirs.get(dir);
        if (entry) entry.watcher = undefined;
      });
      return watcher;
    } catch {
      return undefined;
    }
  }

  /** Stops every watch. */
  close(): void {
    this.#closed = true;
    for (const entry of this.#dirs.values()) entry.watcher?.close();
    this.#dirs.clear();
  }
}
