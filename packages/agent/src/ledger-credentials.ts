// The ledger connections of the modules on this node. Each module's history and snapshots are
// written only on that module's own ledger connection, dialled from its credential in the agent's
// `ledgers` secret (`{ "<module>": { "jwt": "...", "seed": "SU..." } }`). The file is followed as it
// changes, with no restart: a credential that changes or goes closes that module's connection.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { connectBus, credsFor, ledgerInboxPrefix, ModuleLedger, type BusLogger } from "@mesh/bus";
import { FileWatcher } from "@mesh/sdk/provider";
import type { NatsConnection } from "@nats-io/transport-node";

/** The variable that moves the `ledgers` secret away from the agent's state directory. */
export const LEDGERS_FILE_ENV = "MESH_LEDGERS_FILE";

/**
 * Where the agent reads its `ledgers` secret: `$MESH_LEDGERS_FILE` when set, else `<stateDir>/ledgers`.
 */
export function ledgersFileOf(
  stateDir: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): string {
  const given = env[LEDGERS_FILE_ENV];
  return given !== undefined && given !== "" ? given : join(stateDir, "ledgers");
}

/** A module's ledger write was refused: the `ledgers` secret holds no credential for it. */
export class MissingLedgerCredentialError extends Error {
  override name = "MissingLedgerCredentialError";
  constructor(
    readonly module: string,
    readonly file: string,
    why: string | undefined,
  ) {
    super(
      `${module}'s ledger credential is missing from the agent's ledgers secret ${file}` +
        `${why !== undefined ? ` (${why})` : ""}: ${module}'s ledger is written only on its own ledger ` +
        `connection; the controller issues that credential with ${module}'s assignment to this node, ` +
        `and the agent writes it there when it applies its delivery. Nothing is written to ${module}'s ` +
        `ledger until it arrives`,
    );
  }
}

/** A module's ledger connection could not be opened from its credential. */
export class LedgerDialError extends Error {
  override name = "LedgerDialError";
  constructor(
    readonly module: string,
    options: { cause: unknown },
  ) {
    const cause = options.cause instanceof Error ? options.cause.message : String(options.cause);
    super(`${module}'s ledger connection could not be opened: ${cause}`, options);
  }
}

/** How a module's ledger connection is opened from its creds (tests may count or refuse dials). */
export type LedgerDial = (module: string, creds: Uint8Array) => Promise<NatsConnection>;

/** How to follow the `ledgers` secret. */
export interface LedgerCredentialsOptions {
  /** The `ledgers` secret (see `ledgersFileOf`). */
  readonly file: string;
  /** The bus's URLs, for `dial`'s default. */
  readonly servers: readonly string[];
  /** The mesh's bus CA (PEM) when the bus uses TLS, for `dial`'s default. */
  readonly ca?: string;
  readonly logger: BusLogger;
  /** Opens a module's ledger connection; default `connectBus` with the module's ledger inbox prefix. */
  readonly dial?: LedgerDial;
  /** How often the file is read again in case a change was not seen (30 s). */
  readonly rereadEveryMs?: number;
}

interface Credential {
  readonly jwt: string;
  readonly seed: string;
}

interface Open {
  readonly credential: Credential;
  readonly ledger: Promise<ModuleLedger>;
}

/**
 * The ledger connections of this node's modules, dialled from the `ledgers` secret the first time
 * each is asked for and closed when its credential changes or goes. Made by `followLedgerCredentials`.
 */
export class LedgerCredentials {
  readonly #o: LedgerCredentialsOptions;
  readonly #dial: LedgerDial;
  readonly #watcher: FileWatcher;
  readonly #timer: NodeJS.Timeout;
  #credentials = new Map<string, Credential>();
  /** Why the file could not be taken as it is, or why a module's entry was left out. */
  #why: string | undefined;
  #skipped = new Map<string, string>();
  /** Whether the file has been there once: before that, its absence is a first start, not a fault. */
  #seen = false;
  readonly #open = new Map<string, Open>();
  #reading: Promise<void> = Promise.resolve();
  #stopped = false;

  constructor(options: LedgerCredentialsOptions) {
    this.#o = options;
    this.#dial =
      options.dial ??
      ((module, creds) =>
        connectBus({
          servers: options.servers,
          creds,
          name: `${module} ledger`,
          inboxPrefix: ledgerInboxPrefix(module),
          log: options.logger,
          ...(options.ca !== undefined ? { ca: options.ca } : {}),
        }));
    this.#watcher = new FileWatcher(() => void this.reread());
    this.#watcher.watchFiles([options.file]);
    this.#timer = setInterval(() => void this.reread(), options.rereadEveryMs ?? 30_000);
    this.#timer.unref();
  }

  /** The file followed. */
  get file(): string {
    return this.#o.file;
  }

  /** The modules the file holds a credential for now. */
  modules(): string[] {
    return [...this.#credentials.keys()].sort();
  }

  /**
   * Reads the file again now and takes it as it is (the watcher does this on every change).
   * Resolves once read; never rejects.
   */
  reread(): Promise<void> {
    const next = this.#reading.then(() => this.#read());
    this.#reading = next;
    return next;
  }

  /**
   * `module`'s ledger, on its own ledger connection: the one already open, or one dialled now from
   * its credential. The file is read again first when it holds none for the module.
   * @throws MissingLedgerCredentialError when the file holds no credential for `module`;
   * LedgerDialError when the connection cannot be opened; Error after `stop()`.
   */
  async writer(module: string): Promise<ModuleLedger> {
    if (this.#stopped)
      throw new Error(`the agent's ledger connections are stopped; ${module}'s ledger is not written`);
    let credential = this.#credentials.get(module);
    if (credential === undefined) {
      await this.reread();
      credential = this.#credentials.get(module);
    }
    if (credential === undefined) {
      throw new MissingLedgerCredentialError(module, this.#o.file, this.#skipped.get(module) ?? this.#why);
    }
    const open = this.#open.get(module);
    if (open !== undefined && open.credential === credential) {
      const ledger = await open.ledger.catch(() => undefined);
      if (ledger !== undefined && !ledger.isClosed) return ledger;
      if (this.#open.get(module) === open) this.#open.delete(module);
    }
    const dialling = this.#open.get(module);
    if (dialling !== undefined && dialling.credential === credential) return dialling.ledger;
    const ledger = this.#connect(module, credential);
    const entry = { credential, ledger };
    this.#open.set(module, entry);
    ledger.catch(() => {
      if (this.#open.get(module) === entry) this.#open.delete(module);
    });
    return ledger;
  }

  /** Stops following the file and closes every ledger connection. Idempotent. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#watcher.close();
    clearInterval(this.#timer);
    await this.#reading;
    const open = [...this.#open.values()];
    this.#open.clear();
    await Promise.all(open.map((o) => closeLater(o.ledger)));
  }

  async #connect(module: string, credential: Credential): Promise<ModuleLedger> {
    let nc: NatsConnection;
    try {
      nc = await this.#dial(module, credsFor(credential.jwt, credential.seed));
    } catch (err) {
      throw new LedgerDialError(module, { cause: err });
    }
    return new ModuleLedger(nc, module);
  }

  async #read(): Promise<void> {
    if (this.#stopped) return;
    const file = this.#o.file;
    let why: string | undefined;
    let parsed: unknown = {};
    let absent = false;
    try {
      const text = await readFile(file, "utf8");
      this.#seen = true;
      if (text.trim() === "") why = `the file ${file} is empty`;
      else parsed = JSON.parse(text);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") {
        absent = true;
        why = `the file ${file} is not there yet`;
      } else if (err instanceof SyntaxError) why = `the file ${file} is not JSON`;
      else why = `the file ${file} cannot be read (${code ?? (err as Error).message})`;
    }
    const credentials = new Map<string, Credential>();
    const skipped = new Map<string, string>();
    if (why === undefined) {
      if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
        why = `the file ${file} is not a map of module to credential`;
      } else {
        for (const [module, value] of Object.entries(parsed)) {
          const credential = credentialOf(value);
          if (credential !== undefined) credentials.set(module, credential);
          else skipped.set(module, `its entry in ${file} is not {"jwt", "seed"}`);
        }
      }
    }
    // A credential that did not change keeps its object, so an open connection is kept with it.
    for (const [module, credential] of credentials) {
      const before = this.#credentials.get(module);
      if (before !== undefined && before.jwt === credential.jwt && before.seed === credential.seed) {
        credentials.set(module, before);
      }
    }
    const closing: Promise<ModuleLedger>[] = [];
    for (const [module, open] of this.#open) {
      if (credentials.get(module) !== open.credential) {
        this.#open.delete(module);
        closing.push(open.ledger);
      }
    }
    const saidBefore = this.#why;
    this.#credentials = credentials;
    this.#skipped = skipped;
    this.#why = why;
    await Promise.all(closing.map(closeLater));
    if (why !== undefined && why !== saidBefore && absent && !this.#seen) {
      // Every first start: the controller's first delivery writes it within seconds.
      this.#o.logger.info(
        `the agent's ledger credentials ${file} are not there yet: the agent writes them from the ` +
          `controller's first delivery; no module's ledger is written until then`,
      );
    } else if (why !== undefined && why !== saidBefore) {
      this.#o.logger.warn(
        `the agent's ledger credentials cannot be read: ${why}; no module's ledger is written until they can ` +
          `(the agent writes this file from the controller's deliveries)`,
      );
    } else if (why === undefined && saidBefore !== undefined) {
      this.#o.logger.info(
        `the agent's ledger credentials in ${file} are readable again (${credentials.size} module(s))`,
      );
    }
  }
}

/**
 * Reads the `ledgers` secret at `options.file` and follows it from now on.
 * @throws nothing: an unreadable file is said to the logger and read again when it changes.
 */
export async function followLedgerCredentials(options: LedgerCredentialsOptions): Promise<LedgerCredentials> {
  const credentials = new LedgerCredentials(options);
  await credentials.reread();
  return credentials;
}

function credentialOf(value: unknown): Credential | undefined {
  if (value === null || typeof value !== "object") return undefined;
  const { jwt, seed } = value as { jwt?: unknown; seed?: unknown };
  if (typeof jwt !== "string" || typeof seed !== "string" || jwt === "" || seed === "") return undefined;
  return { jwt, seed };
}

async function closeLater(ledger: Promise<ModuleLedger>): Promise<void> {
  const opened = await ledger.catch(() => undefined);
  await opened?.close();
}
