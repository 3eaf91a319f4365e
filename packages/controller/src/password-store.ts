// One password per (consumer, interface), minted once and kept only sealed to the controller's own
// key in the bus (so it survives a controller restart and can be sealed again for a node that
// enrolls later). The plaintext lives in this process's memory, the nodes' secret files and the
// backends; never in the bus, a file of the controller's, a log line or an error.
import { randomUUID } from "node:crypto";
import {
  mintPassword,
  openState,
  seal,
  SEALED_PASSWORDS_BUCKET,
  StateValueError,
  unseal,
  type BusLogger,
  type BusState,
  type NodeKeys,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";
import { secretKey } from "@mesh/manifest";

/**
 * The bus did not store a new password (JetStream has too few servers, or none, to store it now):
 * nothing changed, the old password stays in force, and asking again later works. The bus's own
 * words are kept as the cause only: they mean nothing to an operator.
 *
 * A write the bus did not confirm may still land later (its server had it in its log and commits
 * it once its peers are back). `restore` puts the old password back; the controller runs it until
 * the bus stores it, so that what the operator was told, nothing changed, comes true in the bus as
 * it already is in every node (the new password was never delivered).
 */
export class BusCannotStoreError extends Error {
  override name = "BusCannotStoreError";
  constructor(
    /** What was to be stored (`<consumer>/<interface>`'s new password). */
    readonly what: string,
    /** Puts the kept password back in the bus, over a new one that landed late; idempotent. */
    readonly restore: () => Promise<void>,
    options?: { cause?: unknown },
  ) {
    super(`the bus cannot store it now; nothing changed, try again (${what} was not rotated)`, options);
  }
}

/** A kept password and the version it was minted as (a new version at every rotation). */
export interface KeptPassword {
  readonly password: string;
  /** Random, never derived from the password: what a delivery's fingerprint is made of. */
  readonly version: string;
}

/** A password as the bus keeps it: sealed to the controller's key. */
export interface SealedPassword {
  readonly v: 1;
  readonly sealed: string;
  readonly version: string;
  /** ISO 8601. */
  readonly mintedAt: string;
}

const parseSealed = (value: unknown): SealedPassword => {
  const v = value as Partial<SealedPassword> | null;
  if (v?.v !== 1 || typeof v.sealed !== "string" || typeof v.version !== "string") {
    throw new Error("not a sealed password record");
  }
  return { v: 1, sealed: v.sealed, version: v.version, mintedAt: String(v.mintedAt) };
};

// Reading or minting a large fleet's passwords one at a time would be slow; all at once would
// flood the bus.
const CONCURRENCY = 32;

/** The controller's passwords: minted on first need, kept sealed, rotated on request. */
export class PasswordStore {
  readonly #state: BusState<SealedPassword>;
  readonly #keys: NodeKeys;
  readonly #log: BusLogger;
  readonly #kept = new Map<string, KeptPassword>();
  #minted = 0;

  private constructor(state: BusState<SealedPassword>, keys: NodeKeys, log: BusLogger) {
    this.#state = state;
    this.#keys = keys;
    this.#log = log;
  }

  /**
   * Opens (creating when needed) the sealed-passwords bucket, sealing to and opening with `keys`.
   * @throws StateOpenError when the bucket cannot be opened.
   */
  static async open(nc: NatsConnection, keys: NodeKeys, log: BusLogger): Promise<PasswordStore> {
    const state = await openState<SealedPassword>(nc, SEALED_PASSWORDS_BUCKET, { parse: parseSealed });
    return PasswordStore.over(state, keys, log);
  }

  /** The passwords kept in `state` (the sealed-passwords bucket `open` opens). */
  static over(state: BusState<SealedPassword>, keys: NodeKeys, log: BusLogger): PasswordStore {
    return new PasswordStore(state, keys, log);
  }

  /** How many passwords this process has minted (first mints, rotations, and replacements). */
  get minted(): number {
    return this.#minted;
  }

  /**
   * The `secretKey` of every password kept, for consumers the fleet names now or named before.
   * @throws the bus's error when the bucket cannot be read.
   */
  keys(): Promise<string[]> {
    return this.#state.keys();
  }

  /**
   * Makes sure every (consumer, interface) of `wanted` has a password: each kept one is read into
   * memory, each missing one minted and kept. A few at a time, so that a large fleet's first start
   * or a restart does not wait on one bus round trip after another, nor floods the bus.
   * @throws the bus's error when the bucket cannot be read or written.
   */
  async ensureAll(
    wanted: readonly { readonly consumer: string; readonly interface: string }[],
  ): Promise<void> {
    const missing = wanted.filter((w) => !this.#kept.has(secretKey(w.consumer, w.interface)));
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < missing.length) {
        const w = missing[next++];
        if (w !== undefined) await this.ensure(w.consumer, w.interface);
      }
    };
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, missing.length) }, worker));
  }

  /**
   * The password of `consumer` for `iface`: the kept one, else a newly minted one (kept sealed in
   * the bus before it is returned, so it is never handed out and then forgotten).
   * @throws the bus's error when the bucket cannot be read or written.
   */
  async ensure(consumer: string, iface: string): Promise<KeptPassword> {
    const key = secretKey(consumer, iface);
    const kept = this.#kept.get(key) ?? (await this.#read(key));
    return kept ?? this.#mint(key, "first needed");
  }

  /**
   * Replaces the password of `consumer` for `iface` with a new one, kept sealed before it is
   * returned. The provider applies it when the nodes have it.
   * @throws BusCannotStoreError when the bus does not store it: the old password stays.
   */
  async rotate(consumer: string, iface: string): Promise<KeptPassword> {
    const key = secretKey(consumer, iface);
    const old = this.#kept.get(key);
    try {
      return await this.#mint(key, "rotated on request");
    } catch (err) {
      // #mint keeps the new password in memory only once the bus has stored it, so memory and
      // every node still hold the old one; the bus may yet commit the new one, and is put back.
      const restore = async (): Promise<void> => {
        // A later rotation that the bus stored replaced the old password: nothing to put back.
        if (old === undefined || this.#kept.get(key) !== old) return;
        await this.#state.put(key, await this.#record(old));
      };
      throw new BusCannotStoreError(`${consumer}'s ${iface}`, restore, { cause: err });
    }
  }

  async #record(kept: KeptPassword): Promise<SealedPassword> {
    return {
      v: 1,
      sealed: await seal(kept.password, this.#keys.publicKey),
      version: kept.version,
      mintedAt: new Date().toISOString(),
    };
  }

  async #read(key: string): Promise<KeptPassword | undefined> {
    let record: SealedPassword | undefined;
    try {
      record = await this.#state.get(key);
    } catch (err) {
      // A bus that does not answer now is not a damaged record: minting would rotate a password
      // nobody asked to rotate. The caller's change fails and is tried again.
      if (!(err instanceof StateValueError)) throw err;
      // A damaged record holds nothing usable: say so and mint a new one (a rotation, no data lost).
      this.#log.warn(`${err.message}; a new password is minted for ${key}`);
      return undefined;
    }
    if (record === undefined) return undefined;
    let password: string;
    try {
      password = await unseal(record.sealed, this.#keys);
    } catch {
      this.#log.warn(
        `the kept password of ${key} cannot be opened with this controller's key (its key file was ` +
          `replaced or lost): a new password is minted, and the provider applies it (no data is lost)`,
      );
      return undefined;
    }
    const kept = { password, version: record.version };
    this.#kept.set(key, kept);
    return kept;
  }

  async #mint(key: string, why: string): Promise<KeptPassword> {
    const kept: KeptPassword = { password: mintPassword(), version: randomUUID() };
    await this.#state.put(key, await this.#record(kept));
    this.#kept.set(key, kept);
    this.#minted++;
    // A fleet's first start mints one per consumer: only the unusual mints are worth a line each.
    if (why !== "first needed") this.#log.info(`minted a new password for ${key} (${why})`);
    return kept;
  }
}
