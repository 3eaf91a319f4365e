// The action log of a provider run by the agent: one JSON line per action, appended and synced to a
// file beside the module's other files. The agent follows that file into the module's ledger, so
// what the loop did survives the provider, the agent and the bus being away, in that order.
// The file is the module's own: whatever it holds is what the module says, so the agent reads each
// line through `parseJournalLine` and keeps it in the ledger as the module's claim, never as a record.
import { mkdir, open, type FileHandle } from "node:fs/promises";
import { dirname, join } from "node:path";
import { z } from "zod";
import { moduleHomePath } from "@mesh/manifest";
import type { ActionEntry, ActionKind, ActionLog, Logger } from "./collaborators.ts";

/** Every action the harness journals, in the order a consumer meets them. */
export const ACTION_KINDS: readonly ActionKind[] = [
  "created",
  "re-applied",
  "retired",
  "approved",
  "deleted",
  "rotation-add",
  "rotation-deliver",
  "rotation-drain",
  "rotation-remove",
  "sessions-ended",
];

/** The longest journal line read as an action (64 KiB): the harness writes a few hundred bytes. */
export const MAX_JOURNAL_LINE_BYTES = 64 * 1024;

/** The longest `why` kept from a journal line; a longer one is clipped, not refused. */
export const MAX_JOURNAL_WHY_CHARS = 2_000;

/** A journal line that is not an action as the harness writes one; the message says what is wrong. */
export class JournalLineError extends Error {
  override name = "JournalLineError";
}

// A name (a login, an interface, who): printable, as short as the mesh's own names, never a control
// character that would repaint a terminal showing it.
const journalName = (field: string) =>
  z
    .string({ error: `"${field}" must be text` })
    .min(1, { error: `"${field}" is empty` })
    .max(256, { error: `"${field}" is longer than 256 characters` })
    .regex(/^[^\p{Cc}]+$/u, { error: `"${field}" holds a control character` });

const journalLineSchema = z.object({
  action: z.enum(ACTION_KINDS as [ActionKind, ...ActionKind[]], {
    error: `"action" must be one of ${ACTION_KINDS.join(", ")}`,
  }),
  login: journalName("login"),
  interface: journalName("interface"),
  who: journalName("who"),
  at: z
    .string({ error: `"at" must be an ISO 8601 time` })
    .max(64, { error: `"at" must be an ISO 8601 time` })
    .refine((at) => Number.isFinite(Date.parse(at)), { error: `"at" must be an ISO 8601 time` }),
  // Clipped, its control characters (a driver's message may span lines) made spaces.
  why: z
    .string({ error: `"why" must be text` })
    .transform((why) => why.replace(/\p{Cc}+/gu, " ").slice(0, MAX_JOURNAL_WHY_CHARS)),
  freedBytes: z
    .number({ error: `"freedBytes" must be a whole number of bytes` })
    .int({ error: `"freedBytes" must be a whole number of bytes` })
    .nonnegative({ error: `"freedBytes" must be a whole number of bytes` })
    .max(Number.MAX_SAFE_INTEGER)
    .optional(),
});

/**
 * One line of an action journal read as the action it says, in the shape the harness writes:
 * JSON of at most `MAX_JOURNAL_LINE_BYTES`, an action of `ACTION_KINDS`, printable names, a time
 * that parses. Fields it does not know are dropped; a long `why` is clipped. What it answers is
 * still only what the module says: the reader keeps it as the module's claim.
 * @throws JournalLineError naming what is wrong with the line (never quoting it).
 */
export function parseJournalLine(line: string): ActionEntry {
  const bytes = Buffer.byteLength(line);
  if (bytes > MAX_JOURNAL_LINE_BYTES) {
    throw new JournalLineError(
      `it is ${bytes} bytes, more than the ${MAX_JOURNAL_LINE_BYTES} an action takes`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    throw new JournalLineError("it is not JSON");
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new JournalLineError("it is not a JSON object");
  }
  const parsed = journalLineSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const field = issue?.path[0];
    const missing = issue?.code === "invalid_type" && field !== undefined && !(String(field) in raw);
    throw new JournalLineError(
      missing ? `"${String(field)}" is missing` : (issue?.message ?? "it is not an action"),
    );
  }
  const { freedBytes, ...entry } = parsed.data;
  return freedBytes === undefined ? entry : { ...entry, freedBytes };
}

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
