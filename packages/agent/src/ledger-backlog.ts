// Ledger entries the agent could not append when they were made: the module's ledger not made yet
// (the controller makes it beside the module's credentials, in the background), its credential not
// come, or the bus away. Each waits here, in memory and in order, and is appended once the module's
// ledger takes it, with the id it was first tried with: one that did land before (an append whose
// answer was lost) is stored once. A tool's answer never waits for this.
import { LedgerEntryError, type BusLogger, type LedgerKind } from "@mesh/bus";

/** A module's ledger as the backlog writes it (`ModuleLedger`, or a test's). */
export interface BacklogLedger {
  append(kind: LedgerKind, entry: object, options?: { readonly id?: string }): Promise<number>;
}

/** How a backlog reaches the ledgers and waits between tries. */
export interface LedgerBacklogOptions {
  /** The module's ledger, on its own ledger connection (`LedgerCredentials.writer`). */
  ledger(module: string): Promise<BacklogLedger>;
  readonly logger: BusLogger;
  /** The first wait after a failed try (default 1 s), doubled each time up to `maxDelayMs`. */
  readonly firstDelayMs?: number;
  /** The longest wait between tries (default 15 s). */
  readonly maxDelayMs?: number;
  /** The most entries one module may have waiting (default 1,000); more are refused. */
  readonly maxPerModule?: number;
}

interface Entry {
  readonly kind: LedgerKind;
  readonly entry: object;
  readonly id: string;
}

interface Queue {
  readonly entries: Entry[];
  delayMs: number;
  timer: NodeJS.Timeout | undefined;
  running: Promise<void> | undefined;
  said: string | undefined;
}

/** The entries waiting for their module's ledger, per module. */
export class LedgerBacklog {
  readonly #o: LedgerBacklogOptions;
  readonly #queues = new Map<string, Queue>();
  #stopped = false;

  constructor(options: LedgerBacklogOptions) {
    this.#o = options;
  }

  /**
   * Keeps `entry` for `module`'s ledger, after those already waiting, and tries to append them soon.
   * @returns false when it is not kept: the backlog is stopped, or the module has `maxPerModule` waiting.
   */
  add(module: string, kind: LedgerKind, entry: object, id: string): boolean {
    if (this.#stopped) return false;
    let queue = this.#queues.get(module);
    if (queue === undefined) {
      queue = {
        entries: [],
        delayMs: this.#o.firstDelayMs ?? 1_000,
        timer: undefined,
        running: undefined,
        said: undefined,
      };
      this.#queues.set(module, queue);
    }
    if (queue.entries.length >= (this.#o.maxPerModule ?? 1_000)) return false;
    queue.entries.push({ kind, entry, id });
    if (queue.timer === undefined && queue.running === undefined) this.#schedule(module, queue);
    return true;
  }

  /** How many entries wait for `module`'s ledger. */
  waiting(module: string): number {
    return this.#queues.get(module)?.entries.length ?? 0;
  }

  /** Tries `module`'s waiting entries now; resolves when that try is over. Never rejects. */
  async flush(module: string): Promise<void> {
    const queue = this.#queues.get(module);
    if (queue === undefined) return;
    if (queue.running !== undefined) return queue.running;
    clearTimeout(queue.timer);
    queue.timer = undefined;
    return this.#run(module, queue);
  }

  /** Stops trying; says how many entries were left unwritten (they are lost). Idempotent. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    const running: Promise<void>[] = [];
    for (const [module, queue] of this.#queues) {
      clearTimeout(queue.timer);
      if (queue.running !== undefined) running.push(queue.running);
      if (queue.entries.length > 0)
        this.#o.logger.warn(
          `${queue.entries.length} entr${queue.entries.length === 1 ? "y" : "ies"} for ${module}'s ledger ` +
            `could not be written before the agent stopped: ${module}'s ledger does not have them`,
        );
    }
    await Promise.all(running);
  }

  #schedule(module: string, queue: Queue): void {
    // The first try at once: the entry was just refused, but the next one may be the ledger made.
    const delay = queue.said === undefined ? 0 : queue.delayMs;
    if (queue.said !== undefined) queue.delayMs = Math.min(this.#o.maxDelayMs ?? 15_000, queue.delayMs * 2);
    queue.timer = setTimeout(() => {
      queue.timer = undefined;
      void this.#run(module, queue);
    }, delay);
    queue.timer.unref?.();
  }

  #run(module: string, queue: Queue): Promise<void> {
    const running = this.#drain(module, queue).finally(() => {
      queue.running = undefined;
      if (this.#stopped) return;
      if (queue.entries.length > 0) this.#schedule(module, queue);
      else this.#queues.delete(module);
    });
    queue.running = running;
    return running;
  }

  async #drain(module: string, queue: Queue): Promise<void> {
    const { logger } = this.#o;
    let appended = 0;
    while (!this.#stopped && queue.entries.length > 0) {
      const next = queue.entries[0] as Entry;
      try {
        const ledger = await this.#o.ledger(module);
        await ledger.append(next.kind, next.entry, { id: next.id });
        appended++;
      } catch (err) {
        if (err instanceof LedgerEntryError) {
          // Refused for what it holds: it never will be taken; the rest go on.
          logger.warn(`${err.message}; the entry that waited for ${module}'s ledger is dropped`);
        } else {
          const why = err instanceof Error ? err.message : String(err);
          if (queue.said === undefined) {
            logger.info(
              `${queue.entries.length} entr${queue.entries.length === 1 ? "y waits" : "ies wait"} for ` +
                `${module}'s ledger (${why}); appended once it takes them`,
            );
          }
          queue.said = why;
          return;
        }
      }
      queue.entries.shift();
    }
    if (appended > 0 && queue.said !== undefined) {
      logger.info(
        `${module}'s ledger took the ${appended} entr${appended === 1 ? "y" : "ies"} that waited for it`,
      );
      queue.said = undefined;
      queue.delayMs = this.#o.firstDelayMs ?? 1_000;
    }
  }
}
