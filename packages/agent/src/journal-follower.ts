// From a provider's action journal to its module's ledger. A provider run by the agent appends each
// action (created, re-applied, retired, approved, deleted) as one JSON line to
// `<state>/modules/<module>/home/actions.jsonl`; the agent appends each new complete line to the
// module's ledger on the module's own ledger connection, and keeps how far it got in the module's
// snapshots, so a restarted agent neither appends a line twice nor skips one.
//
// The journal is in the module's own directory: the module may write anything there, backdated or
// in another's name. So each line is parsed at this boundary (`parseJournalLine`: bounded, of the
// harness's shape) and kept as what it is, that module's claim: `{kind: "action", by: {module,
// claim: true}, claim: {...}}`. Nothing of the line is at the entry's top level, where the mesh's
// own records say who asked; the time the bus stored it is the record's own.
import { LedgerEntryError, LedgerNotMadeError, type BusLogger, type ModuleLedger } from "@mesh/bus";
import {
  actionJournalPath,
  FileWatcher,
  JournalLineError,
  MAX_JOURNAL_LINE_BYTES,
  parseJournalLine,
} from "@mesh/sdk/provider";
import { openModuleFile } from "./safe-open.ts";

/** The snapshot key under which a module's ledger keeps how far its journal was appended. */
export const JOURNAL_SNAPSHOT_KEY = "journal";

/** How far a journal has been appended: which file (node and inode) and the byte offset after the last line. */
export interface JournalPosition {
  readonly node: string;
  readonly inode: number;
  readonly offset: number;
  /** When it was written (ISO 8601). */
  readonly at: string;
  /**
   * True while `offset` is inside a line longer than `MAX_JOURNAL_LINE_BYTES`: what follows, up to
   * its end, is skipped too, so the tail of an over-long line is never read as a line of its own.
   */
  readonly skipping?: true;
}

/** What a module's journal entry is in its ledger: the module's claim, its line as parsed. */
export type JournalClaimEntry = {
  readonly by: { readonly module: string; readonly claim: true };
  readonly claim: ReturnType<typeof parseJournalLine>;
};

/** Where a follower gets a module's ledger: `LedgerCredentials.writer`. */
export interface LedgerWriters {
  writer(module: string): Promise<ModuleLedger>;
}

/** What one follower follows. */
export interface JournalFollowerOptions {
  readonly node: string;
  readonly module: string;
  /** The journal (see `actionJournalPath`). */
  readonly file: string;
  readonly ledgers: LedgerWriters;
  readonly logger: BusLogger;
  /** How often it looks again without a change being seen, and retries what failed (5 s). */
  readonly retryMs?: number;
}

/** The most of a journal read in one go; the rest is read by the next pass. */
const READ_AT_MOST = 1 << 20;

/** The lines a pass skipped: how many, and the first one's place and why, said once at its end. */
interface Skipped {
  count: number;
  first: { readonly offset: number; readonly why: string } | undefined;
}

/**
 * Follows one module's action journal into its ledger, each line kept as the module's claim
 * (`JournalClaimEntry`). `start()` begins; each change of the file, and every `retryMs`, appends
 * what is new. A line the ledger cannot take for want of a credential or of the bus is kept and
 * tried again; a line that is not an action (not JSON, too long, of the wrong shape) is skipped,
 * and the lines a pass skipped are said once, in one line, at its end.
 */
export class JournalFollower {
  readonly #o: JournalFollowerOptions;
  readonly #watcher: FileWatcher;
  #timer: NodeJS.Timeout | undefined;
  #position: JournalPosition | undefined;
  #savedOffset: number | undefined;
  #running: Promise<void> = Promise.resolve();
  #queued = false;
  #said: string | undefined;
  #stopped = false;
  #appended = 0;

  constructor(options: JournalFollowerOptions) {
    this.#o = options;
    this.#watcher = new FileWatcher(() => void this.catchUp());
  }

  /** How many lines this follower has appended to the ledger since it started. */
  get appended(): number {
    return this.#appended;
  }

  /** Starts following: a pass now, then on each change of the file and every `retryMs`. */
  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#watcher.watchFiles([this.#o.file]);
    this.#timer = setInterval(() => {
      // The module's directory may have been made since: watch it now if it was not there.
      this.#watcher.watchFiles([this.#o.file]);
      void this.catchUp();
    }, this.#o.retryMs ?? 5_000);
    this.#timer.unref();
    void this.catchUp();
  }

  /**
   * Appends what the journal holds beyond the last line appended; resolves when done (or when
   * the ledger cannot be written now: that is said and retried later). Never rejects.
   */
  catchUp(): Promise<void> {
    // One pass at a time; a change during a pass asks for one more after it, not one each.
    if (this.#queued) return this.#running;
    this.#queued = true;
    this.#running = this.#running.then(() => {
      this.#queued = false;
      return this.#pass().catch((err: unknown) => this.#say(err));
    });
    return this.#running;
  }

  /** Stops following; a pass under way finishes first. Idempotent. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    this.#watcher.close();
    await this.#running;
  }

  async #pass(): Promise<void> {
    if (this.#stopped) return;
    const { module, node, file } = this.#o;
    let size: number;
    let inode: number;
    try {
      // The journal is in the module's own directory: never through a link it planted, only its own file.
      const handle = await openModuleFile(file);
      const st = await handle.stat().finally(() => handle.close());
      size = st.size;
      inode = st.ino;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return; // nothing journalled yet
      throw err;
    }
    const ledger = await this.#o.ledgers.writer(module);
    if (this.#position === undefined) {
      const stored = positionOf(await ledger.readSnapshot(JOURNAL_SNAPSHOT_KEY));
      this.#position = stored ?? { node, inode, offset: 0, at: new Date().toISOString() };
      this.#savedOffset = stored?.offset;
    }
    let position = this.#position;
    // Another node's journal, or a new file here, or one cut short: its lines were never appended.
    if (position.node !== node || position.inode !== inode || position.offset > size) {
      position = { node, inode, offset: 0, at: new Date().toISOString() };
    }
    this.#position = position;
    if (this.#savedOffset !== position.offset) await this.#save(ledger, position);

    const skipped: Skipped = { count: 0, first: undefined };
    try {
      while (!this.#stopped && position.offset < size) {
        const from = position.offset;
        const chunk = await readSome(file, from, Math.min(size - from, READ_AT_MOST));
        if (chunk.length === 0) return;
        if (position.skipping === true) {
          // The rest of an over-long line: up to its end, and nothing of it read as a line.
          const end = chunk.indexOf(0x0a);
          position = this.#advance(position, end < 0 ? from + chunk.length : from + end + 1, end < 0);
          await this.#save(ledger, position);
          continue;
        }
        let start = 0;
        for (let stop = chunk.indexOf(0x0a); stop >= 0 && !this.#stopped; stop = chunk.indexOf(0x0a, start)) {
          const lineAt = from + start;
          if (stop - start > MAX_JOURNAL_LINE_BYTES) {
            this.#skip(
              skipped,
              lineAt,
              `it is longer than the ${MAX_JOURNAL_LINE_BYTES} bytes an action takes`,
            );
          } else {
            const text = chunk.subarray(start, stop).toString("utf8").trim();
            if (text !== "") await this.#appendLine(ledger, text, lineAt, skipped);
          }
          position = this.#advance(position, from + stop + 1);
          start = stop + 1;
        }
        if (this.#stopped) break;
        if (chunk.length - start > MAX_JOURNAL_LINE_BYTES) {
          // No end in sight within the bound: not an action, however it ends.
          this.#skip(
            skipped,
            from + start,
            `it is longer than the ${MAX_JOURNAL_LINE_BYTES} bytes an action takes`,
          );
          position = this.#advance(position, from + chunk.length, true);
        } else if (start === 0) {
          return; // a line still being written
        }
        // Saved once per chunk, not per line: a line appended again after a crash carries the same
        // message id and the ledger stores it once (its duplicate window is a day). A pass that
        // failed mid-chunk saves the position it reached at the start of the next one.
        await this.#save(ledger, position);
      }
    } finally {
      this.#saySkipped(skipped);
    }
    if (this.#said !== undefined) {
      this.#o.logger.info(`${module}'s action journal is appended to its ledger again`);
      this.#said = undefined;
    }
  }

  async #appendLine(ledger: ModuleLedger, text: string, at: number, skipped: Skipped): Promise<void> {
    const { module, node } = this.#o;
    let entry: JournalClaimEntry;
    try {
      entry = { by: { module, claim: true }, claim: parseJournalLine(text) };
    } catch (err) {
      if (!(err instanceof JournalLineError)) throw err;
      this.#skip(skipped, at, err.message);
      return;
    }
    try {
      // The id names this very line, so appending it again after a crash stores it once.
      await ledger.append("action", entry, { id: `journal.${node}.${this.#position?.inode ?? 0}.${at}` });
      this.#appended++;
    } catch (err) {
      if (!(err instanceof LedgerEntryError)) throw err;
      this.#skip(skipped, at, err.message);
    }
  }

  #skip(skipped: Skipped, offset: number, why: string): void {
    skipped.count++;
    skipped.first ??= { offset, why };
  }

  // One line for all a pass skipped: a module writing garbage fills its own journal, not the log.
  #saySkipped(skipped: Skipped): void {
    if (skipped.first === undefined) return;
    const { module, file, logger } = this.#o;
    const others = skipped.count - 1;
    logger.warn(
      `${module}'s action journal ${file} has a line at offset ${skipped.first.offset} that is not an ` +
        `action (${skipped.first.why})` +
        (others > 0 ? `, and ${others} more line${others === 1 ? "" : "s"} that are not` : "") +
        `: skipped, kept out of ${module}'s ledger`,
    );
  }

  #advance(from: JournalPosition, offset: number, skipping = false): JournalPosition {
    const { skipping: _was, ...rest } = from;
    const position: JournalPosition = {
      ...rest,
      offset,
      at: new Date().toISOString(),
      ...(skipping ? { skipping: true as const } : {}),
    };
    this.#position = position;
    return position;
  }

  async #save(ledger: ModuleLedger, position: JournalPosition): Promise<void> {
    await ledger.snapshot(JOURNAL_SNAPSHOT_KEY, position);
    this.#savedOffset = position.offset;
  }

  #say(err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    if (why === this.#said) return;
    this.#said = why;
    const said = `${this.#o.module}'s actions are not appended to its ledger for now (${why}); they stay in ${this.#o.file} and are appended once it can be written`;
    // A ledger still being made (beside a module just added) is waited for, not a fault.
    if (err instanceof LedgerNotMadeError) this.#o.logger.info(said);
    else this.#o.logger.warn(said);
  }
}

/** What a set of followers needs. */
export interface JournalFollowersOptions {
  readonly node: string;
  /** The node's state directory: each module's journal is `actionJournalPath(stateDir, module)`. */
  readonly stateDir: string;
  readonly ledgers: LedgerWriters;
  readonly logger: BusLogger;
  readonly retryMs?: number;
  /** The modules the node runs now, asked every `retryMs` (else only `follow` says which). */
  readonly modules?: () => Iterable<string>;
}

/** One `JournalFollower` for each module the node runs, started and stopped as that set changes. */
export class JournalFollowers {
  readonly #o: JournalFollowersOptions;
  readonly #followers = new Map<string, JournalFollower>();
  readonly #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(options: JournalFollowersOptions) {
    this.#o = options;
    const { modules } = options;
    if (modules !== undefined) {
      this.#timer = setInterval(() => this.follow(modules()), options.retryMs ?? 5_000);
      this.#timer.unref();
    }
  }

  /** Follows exactly these modules' journals from now on. A name that is not a module name is ignored. */
  follow(modules: Iterable<string>): void {
    if (this.#stopped) return;
    const wanted = new Set(modules);
    for (const [module, follower] of this.#followers) {
      if (wanted.has(module)) continue;
      this.#followers.delete(module);
      void follower.stop();
    }
    for (const module of wanted) {
      if (this.#followers.has(module)) continue;
      let file: string;
      try {
        file = actionJournalPath(this.#o.stateDir, module);
      } catch {
        continue;
      }
      const { node, ledgers, logger, retryMs } = this.#o;
      const follower = new JournalFollower({
        node,
        module,
        file,
        ledgers,
        logger,
        ...(retryMs ? { retryMs } : {}),
      });
      this.#followers.set(module, follower);
      follower.start();
    }
  }

  /** The modules followed now. */
  modules(): string[] {
    return [...this.#followers.keys()].sort();
  }

  /** Stops every follower. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    const followers = [...this.#followers.values()];
    this.#followers.clear();
    await Promise.all(followers.map((f) => f.stop()));
  }
}

async function readSome(file: string, offset: number, length: number): Promise<Buffer> {
  const handle = await openModuleFile(file);
  try {
    const buffer = Buffer.alloc(length);
    const { bytesRead } = await handle.read(buffer, 0, length, offset);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

function positionOf(value: unknown): JournalPosition | undefined {
  if (value === null || typeof value !== "object") return undefined;
  const { node, inode, offset, at, skipping } = value as Record<string, unknown>;
  if (typeof node !== "string" || typeof inode !== "number" || typeof offset !== "number") return undefined;
  if (!Number.isInteger(offset) || offset < 0) return undefined;
  return {
    node,
    inode,
    offset,
    at: typeof at === "string" ? at : "",
    ...(skipping === true ? { skipping: true as const } : {}),
  };
}
