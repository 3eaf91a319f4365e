// The modules' ledgers: one history stream and one snapshots bucket every module shares (each module
// below subjects and keys of its own), made once when the controller starts leading, apart from its
// one-change-at-a-time queue. JetStream may take tens of seconds to place a stream while a server of
// the cluster is down (or its meta leader is being elected again): neither a module's start, nor a
// change, a rotation or a join token waits for that, and once the shared ledger is there a new
// module's ledger is there too, with no stream to make. Until then it is tried again, `mesh status`
// lists it, and the nodes keep what is to be written to their modules' ledgers. Once made, the
// ledgers of an older mesh (a stream and a bucket per module) are copied into it, in the background
// (`migrateLedgers`). A node's deliveries bucket not made yet is made here too. What was made with
// fewer copies than asked is raised once the servers are back.
import {
  belowReplicas,
  clusterSize,
  ensureLedger,
  sharedLedgerMade,
  raiseReplicas,
  replicasFor,
  type BusLogger,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";
import type { WaitingWrite } from "./pending-writes.ts";

/** How `ModuleLedgers` makes ledgers and waits between tries. */
export interface ModuleLedgersOptions {
  readonly nc: NatsConnection;
  readonly logger: BusLogger;
  /**
   * Makes the shared ledger, asked for `module`, the first module whose ledger was asked for
   * (default: `ensureLedger`, which makes the shared one).
   */
  readonly ensure?: (
    nc: NatsConnection,
    module: string,
    options?: { readonly timeoutMs?: number },
  ) => Promise<void>;
  /** Whether the shared ledger is there already, asked once before it is made (default: `sharedLedgerMade`). */
  readonly made?: (nc: NatsConnection) => Promise<boolean>;
  /**
   * Copies an older mesh's ledgers into the shared one once it is made (default: nothing), tried
   * again until it has run through: it must be safe to run again (`migrateLedgers` is).
   */
  readonly migrate?: () => Promise<unknown>;
  /** The longest one try may take before the next is scheduled (default 60 s). */
  readonly tryBoundMs?: number;
  /** The first wait after a failed try (default 500 ms), doubled each time up to `maxDelayMs`. */
  readonly firstDelayMs?: number;
  /** The longest wait between tries (default 4 s). */
  readonly maxDelayMs?: number;
}

interface Making {
  readonly what: string;
  readonly since: number;
  attempts: number;
  error: string;
  nextAt: number;
  delayMs: number;
  timer: NodeJS.Timeout | undefined;
}

const RAISE = " raise";
const SHARED = " shared";
const MIGRATE = " migrate";

/** How long the first try at a module's ledger waits for each answer (later ones: `ensureLedger`'s own). */
const FIRST_TRY_MS = 8_000;

/** The ledgers made (or being made) for the modules the controller issues credentials for. */
export class ModuleLedgers {
  readonly #o: ModuleLedgersOptions;
  readonly #ensure: NonNullable<ModuleLedgersOptions["ensure"]>;
  readonly #made = new Set<string>();
  readonly #making = new Map<string, Making>();
  readonly #listeners: ((module: string) => void)[] = [];
  /** The modules asked for before the shared ledger was known to be made. */
  readonly #asked = new Set<string>();
  #listing: Promise<void> | undefined;
  #listed = false;
  #shared = false;
  #migrated = false;
  #closed = false;

  constructor(options: ModuleLedgersOptions) {
    this.#o = options;
    this.#ensure = options.ensure ?? ensureLedger;
  }

  /**
   * Makes `module`'s ledger in the background unless it is known to be there, and returns at once:
   * nothing waits for it (the module's credentials are issued beside it, and what its node is to
   * write waits on the node). Once the shared ledger is made, every module's is: it is made once,
   * and `whenMade` tells of each module asked for before.
   */
  make(module: string): void {
    if (this.#made.has(module) || this.#closed) return;
    if (this.#shared) {
      this.#made.add(module);
      return;
    }
    this.#asked.add(module);
    this.prepare();
  }

  /**
   * Makes the shared ledger in the background, when it is not known to be there (a controller that
   * starts leading asks this before any module), then copies an older mesh's ledgers into it.
   */
  prepare(): void {
    if (this.#shared || this.#closed) return;
    if (!this.#listed) {
      this.#list();
      return;
    }
    if (this.#making.has(SHARED)) return;
    this.#start(
      SHARED,
      "the ledger every module shares (the nodes keep their modules' entries until it is made)",
      async (tries) => {
        // Asked again sooner the first time: just after a server of the cluster went down, JetStream
        // may lose the request (the next one, a few seconds later, is made in one or two).
        const first = [...this.#asked][0] ?? "mesh";
        await this.#ensure(this.#o.nc, first, tries === 1 ? { timeoutMs: FIRST_TRY_MS } : {});
        this.#madeShared();
        // Made with fewer copies than asked (a server was down): raised once they are back.
        if ((await belowReplicas(this.#o.nc).catch(() => [])).length > 0) this.raiseLater();
      },
    );
  }

  // The shared ledger is there: so is every module's asked for, and an older mesh's are copied.
  #madeShared(): void {
    if (this.#shared) return;
    this.#shared = true;
    const asked = [...this.#asked];
    this.#asked.clear();
    for (const module of asked) {
      this.#made.add(module);
      for (const listener of this.#listeners) listener(module);
    }
    this.#migrate();
  }

  // Copies an older mesh's ledgers into the shared one, tried again until it has run through.
  #migrate(): void {
    const migrate = this.#o.migrate;
    if (migrate === undefined || this.#migrated || this.#making.has(MIGRATE) || this.#closed) return;
    this.#start(MIGRATE, "the copy of an older mesh's ledgers into the shared one", async () => {
      await migrate();
      this.#migrated = true;
    });
  }

  /** Whether `module`'s ledger is known to be made. */
  isMade(module: string): boolean {
    return this.#made.has(module);
  }

  /**
   * Makes `node`'s deliveries bucket with `open` in the background, tried again until made: a node
   * not enrolled yet needs it only when it enrolls (which makes it, if it is still not there).
   */
  nodeBucket(node: string, open: () => Promise<unknown>): void {
    const key = `node ${node}`;
    if (this.#made.has(key) || this.#making.has(key) || this.#closed) return;
    this.#start(key, `node ${node}'s deliveries bucket`, async () => {
      await open();
      this.#made.add(key);
      if ((await belowReplicas(this.#o.nc).catch(() => [])).length > 0) this.raiseLater();
    });
  }

  /** Calls `listener` with each module whose ledger is made after it was asked for. */
  whenMade(listener: (module: string) => void): void {
    this.#listeners.push(listener);
  }

  /** Raises every stream with fewer copies than asked, trying again until none is left (servers back). */
  raiseLater(): void {
    if (this.#making.has(RAISE) || this.#closed) return;
    this.#start(RAISE, "the copies of streams made while a bus server was down", async () => {
      const up = clusterSize(this.#o.nc);
      const asked = replicasFor(this.#o.nc);
      // Nothing to ask of JetStream until the servers are back.
      if (up < asked) throw new Error(`${up} of the ${asked} bus servers that keep a copy are up`);
      await raiseReplicas(this.#o.nc, this.#o.logger);
      const left = await belowReplicas(this.#o.nc);
      if (left.length > 0) throw new Error(`${left.length} stream(s) have fewer copies than asked`);
    });
  }

  // Whether the shared ledger is there already, asked once (bounded as a first try is): an answer
  // that fails leaves it to be made (making one that is there finds it made).
  #list(): void {
    if (this.#listing !== undefined) return;
    const made = this.#o.made ?? sharedLedgerMade;
    this.#listing = bounded(made(this.#o.nc), FIRST_TRY_MS)
      .catch(() => false)
      .then((there) => {
        this.#listed = true;
        if (this.#closed) return;
        if (there) this.#madeShared();
        else this.prepare();
      });
  }

  /** What waits to be made, oldest first, as `mesh status` lists it. */
  waiting(): WaitingWrite[] {
    return [...this.#making.values()]
      .sort((a, b) => a.since - b.since)
      .map((m) => ({
        what: m.what,
        since: new Date(m.since).toISOString(),
        attempts: m.attempts,
        error: m.error,
        nextAt: new Date(m.nextAt).toISOString(),
      }));
  }

  /** Stops making: nothing is tried again (a controller that stands by or stops). Idempotent. */
  close(): void {
    this.#closed = true;
    for (const m of this.#making.values()) clearTimeout(m.timer);
    this.#making.clear();
    this.#asked.clear();
  }

  /**
   * Makes again after `close` (a controller that leads again in the same term, nobody having led
   * meanwhile): what it knew was made stands; what was being made is asked for again.
   */
  reopen(): void {
    this.#closed = false;
    if (this.#listed && !this.#shared) this.prepare();
    if (this.#shared) this.#migrate();
  }

  #start(key: string, what: string, attempt: (tries: number) => Promise<void>): void {
    const now = Date.now();
    const making: Making = {
      what,
      since: now,
      attempts: 0,
      error: "being made",
      nextAt: now,
      delayMs: this.#o.firstDelayMs ?? 500,
      timer: undefined,
    };
    this.#making.set(key, making);
    const run = async (): Promise<void> => {
      if (this.#closed || this.#making.get(key) !== making) return;
      making.attempts += 1;
      try {
        await bounded(attempt(making.attempts), this.#o.tryBoundMs ?? 60_000);
      } catch (err) {
        if (this.#closed || this.#making.get(key) !== making) return;
        making.error = (err as Error).message;
        if (making.attempts === 1)
          this.#o.logger.warn(`${what} could not be made yet (${making.error}); it is tried again`);
        making.nextAt = Date.now() + making.delayMs;
        making.timer = setTimeout(() => void run(), making.delayMs);
        making.timer.unref?.();
        making.delayMs = Math.min(this.#o.maxDelayMs ?? 4_000, making.delayMs * 2);
        return;
      }
      this.#making.delete(key);
      if (making.attempts > 1 || Date.now() - making.since > 5_000) {
        const waited = Math.round((Date.now() - making.since) / 1000);
        this.#o.logger.info(
          `made ${what} after ${making.attempts} tr${making.attempts === 1 ? "y" : "ies"} (${waited} s)`,
        );
      }
    };
    void run();
  }
}

// `promise`, or a rejection after `ms` (the promise itself goes on: a late success is harmless,
// since making a ledger again finds it made).
function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no answer from the bus within ${Math.round(ms / 1000)} s`)),
      ms,
    );
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
