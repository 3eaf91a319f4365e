// A module's own copy of the scrape targets file. The controller keeps that file in the mesh's state,
// where no module may read (a module reads nothing of the mesh's but its own). A module whose
// templates name `{mesh.targets}` is given a copy in its own directory, owned by its user, and the
// copy follows the file: looked at every second, written atomically only when it changed, so a
// reader such as Prometheus's file_sd never sees half a file.
import { join } from "node:path";
import { readFileIfExists, writeFileAtomic, type FileOwner } from "@mesh/bus";

/** What a copy is made from: an empty list until the controller wrote the file. */
const NONE = "[]\n";

interface Copy {
  readonly path: string;
  readonly owner: FileOwner | undefined;
  written: string | undefined;
}

/** The copies of one scrape targets file, one per module that names it. */
export class ScrapeTargetsCopies {
  readonly #source: string;
  readonly #copies = new Map<string, Copy>();
  readonly #timer: ReturnType<typeof setInterval>;
  #refreshing: Promise<void> = Promise.resolve();

  /** Follows `source` every `everyMs` (default 1 s) until `stop()`. */
  constructor(source: string, everyMs = 1_000) {
    this.#source = source;
    this.#timer = setInterval(() => void this.refresh(), everyMs);
    this.#timer.unref();
  }

  /**
   * The copy `module` reads, in its directory `home`, written (owned by `owner`) before this
   * resolves, and kept up to date after.
   * @throws FileWriteError when it cannot be written.
   */
  async copyFor(module: string, home: string, owner: FileOwner | undefined): Promise<string> {
    const path = join(home, "scrape-targets.json");
    const copy: Copy = { path, owner, written: undefined };
    this.#copies.set(module, copy);
    const text = (await readFileIfExists(this.#source)) ?? NONE;
    await writeFileAtomic(path, text, 0o600, owner);
    copy.written = text;
    return path;
  }

  /** Writes every copy whose text is not the file's now; one that cannot be written is tried again next time. */
  refresh(): Promise<void> {
    this.#refreshing = this.#refreshing.then(async () => {
      if (this.#copies.size === 0) return;
      const text = (await readFileIfExists(this.#source).catch(() => undefined)) ?? NONE;
      for (const copy of this.#copies.values()) {
        if (copy.written === text) continue;
        try {
          await writeFileAtomic(copy.path, text, 0o600, copy.owner);
          copy.written = text;
        } catch {
          // Tried again at the next look; the module keeps reading the last copy meanwhile.
        }
      }
    });
    return this.#refreshing;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
