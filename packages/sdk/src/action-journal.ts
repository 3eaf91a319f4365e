// The action log of a provider run by the agent: one JSON line per action, appended and synced to a
// file beside the module's other files. The agent follows that file into the module's ledger, so
// what the loop did survives the provider, the agent and the bus being away, in that order.
import { mkdir, open, type FileHandle } from "node:fs/promises";
import { dirname, join } from "node:path";
import { moduleHomePath } from "@mesh/manifest";
import type { ActionEntry, ActionLog, Logger } from "./collaborators.ts";

/**
 * `<state>/modules/<module>/home/actions.jsonl` (in the module's own writable directory): where a
 * provider run by the agent journals its actions.
 * @throws StateDirError for a state directory that is not absolute; InvalidNameError for a bad module name.
 */
export function actionJournalPath(stateDir: string, module: string): string {
  return join(moduleHomePath(stateDir, module), "actions.jsonl");
}

/**
 * An `ActionLog` that appends each entry as one JSON line to `path` (created 0600 with its
 * directory when missing; each line synced to disk before the next). `append` never throws into
 * the loop: a failure is said to the logger once, and again only when the reason changes.
 */
export class ActionJournal implements ActionLog {
  #writing: Promise<void> = Promise.resolve();
  #failing: string | undefined;

  constructor(
    readonly path: string,
    private readonly logger: Logger,
  ) {}

  append(entry: ActionEntry): void {
    let line: string;
    try {
      line = `${JSON.stringify(entry)}\n`;
    } catch (err) {
      this.#failed(err);
      return;
    }
    this.#writing = this.#writing.then(() => this.#write(line));
  }

  /** Resolves once every entry appended so far is on disk (or has failed and been said). */
  flush(): Promise<void> {
    return this.#writing;
  }

  async #write(line: string): Promise<void> {
    try {
      // One write of a whole line in append mode: a reader never sees half a line followed by another.
      const file = await this.#open();
      try {
        await file.write(line);
        await file.sync();
      } finally {
        await file.close();
      }
      if (this.#failing !== undefined) {
        this.logger.info(`the action journal ${this.path} is written again`);
        this.#failing = undefined;
      }
    } catch (err) {
      this.#failed(err);
    }
  }

  /** The journal opened to append; its directory is made only when it is missing, not at every line. */
  async #open(): Promise<FileHandle> {
    try {
      return await open(this.path, "a", 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      await mkdir(dirname(this.path), { recursive: true, mode: 0o700 });
      return await open(this.path, "a", 0o600);
    }
  }

  #failed(err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    if (why === this.#failing) return;
    this.#failing = why;
    this.logger.error(
      `an action could not be written to the action journal ${this.path} (${why}): it is missing ` +
        `from the module's ledger; check that the directory exists and is writable by this process`,
    );
  }
}
