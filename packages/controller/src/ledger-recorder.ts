// What the controller itself writes to module ledgers: the rotations it carries, and the tool calls
// it relayed that no agent recorded (no agent answered, the node was not enrolled, the agent refused
// the call before running it, or could not write its entry). The controller's connection may write
// every module's history; these are the mesh's records, as the agent's tool entries are.
import {
  ensureLedger,
  LedgerEntryError,
  LedgerWriteError,
  ModuleLedger,
  type BusLogger,
  type LedgerKind,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";

/** How long the controller waits for the ledger to take an entry before answering without it. */
export const RECORD_TIMEOUT_MS = 10_000;

/** Where the controller appends its own records; `LedgerRecorder` is the real one. */
export interface LedgerRecords {
  /**
   * Appends `entry` to `module`'s history as `kind`. Answers undefined once it is stored, else why
   * it is not, in words for the operator. Never throws.
   */
  record(module: string, kind: LedgerKind, entry: object): Promise<string | undefined>;
}

/** How `LedgerRecorder` writes. */
export interface LedgerRecorderOptions {
  /** How long one record may take (default `RECORD_TIMEOUT_MS`). */
  readonly timeoutMs?: number;
  /** Makes a module's ledger when it is not there yet (default `ensureLedger`). */
  readonly ensure?: (nc: NatsConnection, module: string) => Promise<void>;
}

/**
 * Appends the controller's records to module ledgers over the controller's own connection. A
 * module's ledger is made first when it is not there yet (a call refused because the module's node
 * has not enrolled comes before anything else made it).
 */
export class LedgerRecorder implements LedgerRecords {
  // Each borrows the controller's connection and is never closed: closing one would close it.
  readonly #ledgers = new Map<string, Promise<ModuleLedger>>();
  readonly #timeoutMs: number;
  readonly #ensure: NonNullable<LedgerRecorderOptions["ensure"]>;

  constructor(
    private readonly nc: NatsConnection,
    private readonly logger: BusLogger,
    options: LedgerRecorderOptions = {},
  ) {
    this.#timeoutMs = options.timeoutMs ?? RECORD_TIMEOUT_MS;
    this.#ensure = options.ensure ?? ((nc, module) => ensureLedger(nc, module));
  }

  async record(module: string, kind: LedgerKind, entry: object): Promise<string | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the ledger did not take it within ${Math.round(this.#timeoutMs / 1000)} s`)),
        this.#timeoutMs,
      );
    });
    try {
      await Promise.race([this.#append(module, kind, entry), timeout]);
      return undefined;
    } catch (err) {
      // The bus's own words: the module's-connection advice of LedgerWriteError is not the controller's.
      const cause = err instanceof LedgerWriteError && err.cause instanceof Error ? err.cause : err;
      const why =
        `the ${kind} entry was not written to ${module}'s ledger ` +
        `(${cause instanceof Error ? cause.message : String(cause)}): check that the bus is up ` +
        `(\`mesh status\` says what waits for it)`;
      this.logger.warn(why);
      return why;
    } finally {
      clearTimeout(timer);
    }
  }

  async #append(module: string, kind: LedgerKind, entry: object): Promise<void> {
    const ledger = await this.#ledger(module);
    try {
      await ledger.append(kind, entry);
    } catch (err) {
      // An answer holding something password-like is refused: the record is kept without it.
      if (!(err instanceof LedgerEntryError) || !("answer" in entry)) throw err;
      await ledger.append(kind, { ...entry, answer: { omitted: err.message } });
    }
  }

  // Made once per module and controller; a failed making is tried again at the next record.
  #ledger(module: string): Promise<ModuleLedger> {
    let ledger = this.#ledgers.get(module);
    if (ledger === undefined) {
      const making = (async () => {
        const made = new ModuleLedger(this.nc, module);
        await this.#ensure(this.nc, module);
        return made;
      })();
      making.catch(() => {
        if (this.#ledgers.get(module) === making) this.#ledgers.delete(module);
      });
      ledger = making;
      this.#ledgers.set(module, ledger);
    }
    return ledger;
  }
}
