// The rotations the bus refused and whose old password must stand, kept in one 0600 file of the
// controller's state directory, written (atomically) before the new password is offered to the
// bus. A write the bus refused may still be committed later (its server kept it in its log and
// commits it once its peers are back); the controller puts the old password back over it. Kept in
// memory only, that promise would die with the process: a controller killed before the bus could
// store again would leave the late password standing, and the next leader would deliver it,
// although the operator was told nothing changed. From this file, a restarted controller resumes.
//
// Each intent holds the old password sealed to the controller's own key, as the bus keeps it (the
// bus keeps no older copy once the late write lands), and the versions of the refused ones; never
// a password in the clear. Whoever can read this directory holds the key that opens it and the
// controller's bus key that reads the same sealed record from the bus: it adds no exposure.
import { rename } from "node:fs/promises";
import { join } from "node:path";
import { readFileIfExists, writeFileAtomic, type BusLogger } from "@mesh/bus";

/** The name of the restores file in the controller's state directory. */
export const RESTORES_FILE = "restores.json";

/** A password as the bus keeps it (and a restore intent its old one): sealed to the controller's key. */
export interface SealedPassword {
  readonly v: 1;
  readonly sealed: string;
  readonly version: string;
  /** ISO 8601. */
  readonly mintedAt: string;
  /** Minted by `mesh rotate --now`: the provider takes it without an overlap and ends the old sessions. */
  readonly cut?: true;
  /**
   * 1 when the password is for the consumer's second login, where its provider alternates logins
   * (each rotation flips it); absent for the first. Kept for every consumer: the delivery uses it
   * only where the provider alternates.
   */
  readonly slot?: 1;
  /**
   * Set on a rotation not confirmed yet: the password it replaces, which stays in force until the
   * controller that asked writes this record again without it, once the bus has stored it. A record
   * the bus commits late carries it, so any controller that leads next knows to put it back.
   */
  readonly replaces?: SealedPassword;
}

/** One rotation (or several in a row) the bus did not confirm: `kept` stands, whatever landed late. */
export interface RestoreIntent {
  readonly consumer: string;
  readonly interface: string;
  /** The password in force, which must stand unless a later rotation is stored. */
  readonly kept: SealedPassword;
  /** The versions offered to the bus and not confirmed: any of them found there is undone. */
  readonly refused: readonly string[];
  /** ISO 8601: when the first of them was offered. */
  readonly since: string;
}

interface RestoresFile {
  readonly v: 1;
  readonly restores: Record<string, RestoreIntent>;
}

const isIntent = (value: unknown): value is RestoreIntent => {
  const i = value as Partial<RestoreIntent> | null;
  return (
    typeof i?.consumer === "string" &&
    typeof i.interface === "string" &&
    i.kept?.v === 1 &&
    typeof i.kept.sealed === "string" &&
    typeof i.kept.version === "string" &&
    Array.isArray(i.refused) &&
    i.refused.every((r) => typeof r === "string") &&
    typeof i.since === "string"
  );
};

/** The restore intents of one controller, by `secretKey`, mirrored in its restores file. */
export class RestoreIntents {
  readonly #path: string | undefined;
  readonly #intents: Map<string, RestoreIntent>;
  // One write of the file at a time, each of the whole map as it is then.
  #writing: Promise<unknown> = Promise.resolve();

  private constructor(path: string | undefined, intents: Map<string, RestoreIntent>) {
    this.#path = path;
    this.#intents = intents;
  }

  /**
   * The intents kept in `<stateDir>/restores.json` (none when there is no such file). A file that
   * cannot be read as one is moved aside to `restores.json.unreadable` and said loudly: what it
   * promised cannot be kept, and it is not deleted.
   * @throws the file system's error when the file cannot be read or moved.
   */
  static async load(stateDir: string, log: BusLogger): Promise<RestoreIntents> {
    const path = join(stateDir, RESTORES_FILE);
    const text = await readFileIfExists(path);
    const intents = new Map<string, RestoreIntent>();
    if (text !== undefined) {
      let parsed: Partial<RestoresFile> | undefined;
      try {
        parsed = JSON.parse(text) as Partial<RestoresFile>;
      } catch {
        parsed = undefined;
      }
      const entries = parsed?.v === 1 && typeof parsed.restores === "object" ? parsed.restores : null;
      if (entries === null || !Object.values(entries).every(isIntent)) {
        await rename(path, `${path}.unreadable`);
        log.error(
          `${path} is not a restores file; moved to ${path}.unreadable: a rotation the bus refused ` +
            `before and committed late may stand (rotate it again to be sure)`,
        );
      } else {
        for (const [key, intent] of Object.entries(entries)) intents.set(key, intent);
      }
    }
    return new RestoreIntents(path, intents);
  }

  /** Intents kept in memory only (a store that no controller restarts over: tests, tools). */
  static inMemory(): RestoreIntents {
    return new RestoreIntents(undefined, new Map());
  }

  /** The intent kept for `key`, if any. */
  get(key: string): RestoreIntent | undefined {
    return this.#intents.get(key);
  }

  /** Every intent kept, by `secretKey`. */
  all(): [string, RestoreIntent][] {
    return [...this.#intents.entries()];
  }

  /**
   * Keeps `intent` for `key` (replacing the one before) and returns once it is on disk.
   * @throws FileWriteError when the file cannot be written (the intent is then not kept).
   */
  async record(key: string, intent: RestoreIntent): Promise<void> {
    const before = this.#intents.get(key);
    this.#intents.set(key, intent);
    try {
      await this.#save();
    } catch (err) {
      if (this.#intents.get(key) === intent) {
        if (before === undefined) this.#intents.delete(key);
        else this.#intents.set(key, before);
      }
      throw err;
    }
  }

  /**
   * Forgets the intent for `key` when it is still `intent` (a newer one replaced it otherwise), and
   * returns once the file says so.
   * @throws FileWriteError when the file cannot be written (the intent is then kept, in memory as
   * in the file, and settled again).
   */
  async clear(key: string, intent: RestoreIntent): Promise<void> {
    if (this.#intents.get(key) !== intent) return;
    this.#intents.delete(key);
    try {
      await this.#save();
    } catch (err) {
      if (!this.#intents.has(key)) this.#intents.set(key, intent);
      throw err;
    }
  }

  #save(): Promise<void> {
    const path = this.#path;
    if (path === undefined) return Promise.resolve();
    const write = this.#writing.then(() => {
      const file: RestoresFile = { v: 1, restores: Object.fromEntries(this.#intents) };
      return writeFileAtomic(path, `${JSON.stringify(file, null, 2)}\n`);
    });
    this.#writing = write.catch(() => undefined);
    return write.then(() => undefined);
  }
}
