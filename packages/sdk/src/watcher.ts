import { watch, type FSWatcher } from "node:fs";
import { basename, dirname } from "node:path";

/** The name a `FileWatcher` reports a change of `path` by (its directory, a slash, its name). */
export function watchKey(path: string): string {
  return `${dirname(path)}/${basename(path)}`;
}

/** What tells a harness of file changes: a `FileWatcher`, or a stand-in in a test. */
export interface FileWatch {
  /** Watches exactly these files from now on. */
  watchFiles(paths: Iterable<string>): void;
  /** Whether a change of `path` (as `watchKey` names it) is reported: its directory is watched now. */
  watching(path: string): boolean;
  /**
   * Opens again the watches that broke or could not be opened, and returns the files under each
   * one that opened now: a change to them may have gone unreported.
   */
  reopen(): string[];
  /** The watched files whose directory has no working watch: their changes are not reported. */
  unwatched(): string[];
  close(): void;
}

/**
 * Watches files by watching their directories: a watch on a file itself goes silent after the first
 * atomic rename replaces it, which is exactly how the mesh writes contributions and secrets.
 */
export class FileWatcher implements FileWatch {
  readonly #dirs = new Map<string, { watcher: FSWatcher | undefined; names: Set<string> }>();
  #closed = false;
  /** How many directories are without a working watch. */
  #broken = 0;

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
      // A directory not there yet is tried again by `reopen`; the caller reads its files meanwhile.
      this.#dirs.set(dir, { watcher: this.#open(dir), names });
    }
    this.#count();
  }

  watching(path: string): boolean {
    return this.#dirs.get(dirname(path))?.watcher !== undefined;
  }

  reopen(): string[] {
    if (this.#broken === 0 || this.#closed) return [];
    const opened: string[] = [];
    for (const [dir, entry] of this.#dirs) {
      if (entry.watcher) continue;
      entry.watcher = this.#open(dir);
      if (entry.watcher) for (const n of entry.names) opened.push(`${dir}/${n}`);
    }
    this.#count();
    return opened;
  }

  unwatched(): string[] {
    if (this.#broken === 0) return [];
    const paths: string[] = [];
    for (const [dir, entry] of this.#dirs) {
      if (!entry.watcher) for (const n of entry.names) paths.push(`${dir}/${n}`);
    }
    return paths;
  }

  #count(): void {
    let broken = 0;
    for (const entry of this.#dirs.values()) if (!entry.watcher) broken++;
    this.#broken = broken;
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
        if (entry?.watcher !== watcher) return;
        entry.watcher = undefined;
        this.#broken++;
        // Whatever changed since is no longer reported: each of its files counts as changed.
        for (const n of entry.names) this.onChange(`${dir}/${n}`);
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
