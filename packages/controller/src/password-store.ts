// One password per (consumer, interface), minted once and kept only sealed to the controller's own
// key in the bus (so it survives a controller restart and can be sealed again for a node that
// enrolls later). The plaintext lives in this process's memory, the nodes' secret files and the
// backends; never in the bus, a file of the controller's, a log line or an error.
//
// A rotation is written down (`RestoreIntents`, a file of the controller's) before it is offered to
// the bus, and settled when the bus stores it: so a refused one that the bus commits late is undone
// even by a controller that was killed meanwhile and starts again.
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
import { RestoreIntents, type RestoreIntent, type SealedPassword } from "./restore-intents.ts";

export type { SealedPassword } from "./restore-intents.ts";

/**
 * The bus did not store a new password (JetStream has too few servers, or none, to store it now):
 * nothing changed, the old password stays in force, and asking again later works. The bus's own
 * words are kept as the cause only: they mean nothing to an operator.
 *
 * A write the bus did not confirm may still land later (its server had it in its log and commits
 * it once its peers are back). `restore` puts the old password back; the controller runs it until
 * the bus stores it, so that what the operator was told, nothing changed, comes true in the bus as
 * it already is in every node (the new password was never delivered). The store wrote that down
 * before the write, so a controller that starts over the same state directory does the same
 * (`PasswordStore.pendingRestores`).
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

/**
 * What is known of a kept password without opening it: the version it was minted as (a new version
 * at every rotation) and what travels with it. Enough to tell whether a delivery changed.
 */
export interface KeptVersion {
  /** Random, never derived from the password: what a delivery's fingerprint is made of. */
  readonly version: string;
  /**
   * 1 when it is for the consumer's second login (see `SealedPassword.slot`): a rotation puts the
   * new password on the login the old one is not on.
   */
  readonly slot?: 1 | undefined;
  /**
   * Minted by `mesh rotate --now` (a leaked password): no overlap, the provider ends the sessions
   * of the login once it has taken it. Kept in the bus with the password, so a take-over delivers it alike.
   */
  readonly cut?: true;
  /**
   * ISO 8601: when it was minted (absent from a record without a readable one). It travels to the
   * provider with the asked entry, which refuses to put back a password older than the one its
   * backend holds (a restore of an older backup) rather than undo a rotation silently.
   */
  readonly mintedAt?: string;
}

/** A kept password, opened. */
export interface KeptPassword extends KeptVersion {
  readonly password: string;
}

// A password this store holds: as the bus keeps it (sealed to the controller's key), and opened
// once something needed it in the clear. Opening one costs a public-key operation: a restart that
// republishes nothing opens none.
interface Held {
  /** The `secretKey`. */
  readonly key: string;
  readonly about: KeptVersion;
  readonly record: SealedPassword;
  opened?: KeptPassword;
}

/** A restore that waits: the old password of `consumer` for `interface` is to be put back. */
export interface PendingRestore {
  /** The `secretKey`. */
  readonly key: string;
  readonly consumer: string;
  readonly interface: string;
  /** ISO 8601: when the rotation it undoes was offered to the bus. */
  readonly since: string;
}

const parseSealed = (value: unknown, nested = false): SealedPassword => {
  const v = value as Partial<SealedPassword> | null;
  if (v?.v !== 1 || typeof v.sealed !== "string" || typeof v.version !== "string") {
    throw new Error("not a sealed password record");
  }
  const record = {
    v: 1,
    sealed: v.sealed,
    version: v.version,
    mintedAt: String(v.mintedAt),
    ...(v.slot === 1 ? { slot: 1 as const } : {}),
    ...(v.cut === true ? { cut: true as const } : {}),
  } as const;
  return v.replaces === undefined || nested ? record : { ...record, replaces: parseSealed(v.replaces, true) };
};

/** The later of two ISO 8601 times (either may be absent). */
function latest(a: string | undefined, b: string | undefined): string | undefined {
  if (a === undefined || b === undefined) return a ?? b;
  return Date.parse(a) >= Date.parse(b) ? a : b;
}

/** Now, as ISO 8601; or just after `after` when this clock is not past it yet. */
function mintTime(after?: string): string {
  const now = Date.now();
  const floor = after === undefined ? Number.NaN : Date.parse(after) + 1;
  return new Date(Number.isNaN(floor) ? now : Math.max(now, floor)).toISOString();
}

// What a record says of its password, without opening it.
function aboutRecord(record: SealedPassword): KeptVersion {
  return {
    version: record.version,
    ...(record.slot === 1 ? { slot: 1 as const } : {}),
    ...(Number.isNaN(Date.parse(record.mintedAt)) ? {} : { mintedAt: record.mintedAt }),
    ...(record.cut === true ? { cut: true as const } : {}),
  };
}

// A record as it stands for its password: without the one an unconfirmed rotation replaces.
function standing(record: SealedPassword): SealedPassword {
  const { replaces: _replaces, ...rest } = record;
  return rest;
}

// Reading or minting a large fleet's passwords one at a time would be slow; all at once would
// flood the bus.
const CONCURRENCY = 32;

// From this many passwords to read, the whole bucket is read in one pass rather than one key at a
// time (each read is a round trip, and its cost in the client adds up over a large fleet).
const READ_ALL_FROM = CONCURRENCY;

/** The controller's passwords: minted on first need, kept sealed, rotated on request. */
export class PasswordStore {
  readonly #state: BusState<SealedPassword>;
  readonly #keys: NodeKeys;
  readonly #log: BusLogger;
  readonly #restores: RestoreIntents;
  readonly #kept = new Map<string, Held>();
  // Opens under way, so that two deliveries needing the same password open it (or replace it) once.
  readonly #opening = new Map<Held, Promise<KeptPassword>>();
  #minted = 0;

  private constructor(
    state: BusState<SealedPassword>,
    keys: NodeKeys,
    log: BusLogger,
    restores: RestoreIntents,
  ) {
    this.#state = state;
    this.#keys = keys;
    this.#log = log;
    this.#restores = restores;
  }

  /**
   * Opens (creating when needed) the sealed-passwords bucket, sealing to and opening with `keys`;
   * `restores` are the controller's restore intents (`RestoreIntents.load` of its state directory;
   * in memory only when not given).
   * @throws StateOpenError when the bucket cannot be opened.
   */
  static async open(
    nc: NatsConnection,
    keys: NodeKeys,
    log: BusLogger,
    restores: RestoreIntents = RestoreIntents.inMemory(),
  ): Promise<PasswordStore> {
    const state = await openState<SealedPassword>(nc, SEALED_PASSWORDS_BUCKET, {
      parse: (value) => parseSealed(value),
    });
    return PasswordStore.over(state, keys, log, restores);
  }

  /**
   * The passwords kept in `state` (the sealed-passwords bucket `open` opens), with the restore
   * intents `restores` (in memory only when not given).
   */
  static over(
    state: BusState<SealedPassword>,
    keys: NodeKeys,
    log: BusLogger,
    restores: RestoreIntents = RestoreIntents.inMemory(),
  ): PasswordStore {
    return new PasswordStore(state, keys, log, restores);
  }

  /**
   * The restores that wait, written down by this controller (or by the one it started over): each
   * is to be settled with `restore`, and until then the old password is the one this store hands
   * out, whatever the bus holds.
   */
  pendingRestores(): PendingRestore[] {
    return this.#restores
      .all()
      .map(([key, i]) => ({ key, consumer: i.consumer, interface: i.interface, since: i.since }));
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
   * memory (the whole bucket in one pass when there are many), each missing one minted and kept.
   * Kept ones are not opened, save one: when it cannot be opened with this controller's key (its key
   * file was replaced or lost), none read here can, and each is opened and replaced now, as a
   * delivery would have to. A few at a time, so that a large fleet's first start or a restart does
   * not wait on one bus round trip after another, nor floods the bus.
   * @throws the bus's error when the bucket cannot be read or written.
   */
  async ensureAll(
    wanted: readonly { readonly consumer: string; readonly interface: string }[],
  ): Promise<void> {
    const missing = wanted.filter((w) => !this.#kept.has(secretKey(w.consumer, w.interface)));
    if (missing.length === 0) return;
    const stored = missing.length >= READ_ALL_FROM ? await this.#state.values() : undefined;
    const read: Held[] = [];
    const unkept: typeof missing = [];
    await inParallel(missing, async (w) => {
      const key = secretKey(w.consumer, w.interface);
      if (this.#kept.has(key)) return;
      const held = await this.#read(key, w.consumer, w.interface, stored);
      if (held === undefined) unkept.push(w);
      else read.push(held);
    });
    // The oldest first: one sealed to a key this controller no longer has is older than any it sealed.
    // (A record without a readable mint time is from before they were kept: older than any.)
    const minted = (h: Held): number => Date.parse(h.record.mintedAt) || Number.NEGATIVE_INFINITY;
    const probe = read.reduce<Held | undefined>(
      (oldest, h) => (oldest === undefined || minted(h) < minted(oldest) ? h : oldest),
      undefined,
    );
    if (probe !== undefined && (await this.#open(probe)).version !== probe.about.version) {
      await inParallel(read, (h) => this.#open(h));
    }
    await inParallel(unkept, async (w) => {
      const key = secretKey(w.consumer, w.interface);
      if (!this.#kept.has(key)) await this.#mint(key, "first needed");
    });
  }

  /**
   * The password of `consumer` for `iface`, opened: the kept one, else a newly minted one (kept
   * sealed in the bus before it is returned, so it is never handed out and then forgotten). A kept
   * one that cannot be opened with this controller's key is replaced by a new one.
   * @throws the bus's error when the bucket cannot be read or written.
   */
  async ensure(consumer: string, iface: string): Promise<KeptPassword> {
    return this.#open(await this.#held(consumer, iface));
  }

  /**
   * What `ensure` would return but the password itself, without opening it (a kept one is opened
   * only when it is needed in the clear: a delivery that changed). Minted when missing.
   * @throws the bus's error when the bucket cannot be read or written.
   */
  async ensureVersion(consumer: string, iface: string): Promise<KeptVersion> {
    const held = await this.#held(consumer, iface);
    return held.opened ?? held.about;
  }

  /**
   * What `ensureVersion` returns, when this store holds the password already (no bus, no wait);
   * undefined when it does not.
   */
  heldVersion(consumer: string, iface: string): KeptVersion | undefined {
    const held = this.#kept.get(secretKey(consumer, iface));
    return held === undefined ? undefined : (held.opened ?? held.about);
  }

  async #held(consumer: string, iface: string): Promise<Held> {
    const key = secretKey(consumer, iface);
    const held = this.#kept.get(key) ?? (await this.#read(key, consumer, iface));
    return held ?? this.#mint(key, "first needed");
  }

  // Opens a held password; one that cannot be opened with this controller's key is replaced.
  #open(held: Held): Promise<KeptPassword> {
    if (held.opened !== undefined) return Promise.resolve(held.opened);
    let opening = this.#opening.get(held);
    if (opening === undefined) {
      opening = this.#opened(held).finally(() => this.#opening.delete(held));
      this.#opening.set(held, opening);
    }
    return opening;
  }

  async #opened(held: Held): Promise<KeptPassword> {
    const { key } = held;
    let password: string;
    try {
      password = await unseal(held.record.sealed, this.#keys);
    } catch {
      this.#log.warn(
        `the kept password of ${key} cannot be opened with this controller's key (its key file was ` +
          `replaced or lost): a new password is minted, and the provider applies it (no data is lost)`,
      );
      const replaced = this.#kept.get(key);
      // Replaced meanwhile (rotated): that one stands.
      if (replaced !== undefined && replaced !== held) return this.#open(replaced);
      return (await this.#mint(key, "first needed")).opened as KeptPassword;
    }
    held.opened = { password, ...held.about };
    return held.opened;
  }

  /**
   * Replaces the password of `consumer` for `iface` with a new one, kept sealed before it is
   * returned. The provider applies it when the nodes have it. Before the bus is asked, the old
   * password is written down as the one to put back should the bus not confirm. With `after` (ISO
   * 8601), it is minted later than that, whatever this machine's clock says: it must be newer than
   * the one a backend holds.
   * @throws BusCannotStoreError when the bus does not store it: the old password stays;
   * FileWriteError when the restores file cannot be written (nothing was offered to the bus).
   */
  async rotate(
    consumer: string,
    iface: string,
    options: { cut?: boolean; after?: string } = {},
  ): Promise<KeptPassword> {
    const key = secretKey(consumer, iface);
    const held = this.#kept.get(key);
    const old = held?.about;
    const kept: KeptPassword = {
      password: mintPassword(),
      version: randomUUID(),
      ...(old?.slot === 1 ? {} : { slot: 1 as const }),
      // Never before the password it replaces: a provider takes only a newer one.
      mintedAt: mintTime(latest(options.after, old?.mintedAt)),
      ...(options.cut === true ? { cut: true as const } : {}),
    };
    const intent = held === undefined ? undefined : await this.#intend(key, consumer, iface, held, kept);
    const record = await this.#record(kept);
    try {
      if (intent === undefined) await this.#state.put(key, record);
      else {
        // Offered first as unconfirmed, naming the password it replaces: should the bus commit it
        // late, a standby on another machine (which has no restores file of this one) knows to
        // put the old one back. Confirmed by the same write without it, on the revision stored.
        const revision = await this.#state.put(key, { ...record, replaces: intent.kept });
        await this.#state.update(key, record, revision);
      }
    } catch (err) {
      // Memory and every node still hold the old password; the bus may yet commit the new one,
      // and is put back (by `restore`, run until stored, or by the next controller from the file).
      throw new BusCannotStoreError(`${consumer}'s ${iface}`, () => this.restore(key), { cause: err });
    }
    this.#kept.set(key, { key, about: aboutRecord(record), record, opened: kept });
    this.#minted++;
    this.#log.info(`minted a new password for ${key} (rotated on request)`);
    // Stored, it stands: over the old one and over every refused one before it (those the bus
    // committed late come before it in the bus's log).
    if (intent !== undefined) {
      await this.#restores.clear(key, intent).catch((err: unknown) => {
        this.#log.warn(
          `the new password for ${key} is stored, but ${(err as Error).message}: a controller that ` +
            `starts over this state directory puts the old one back (one more rotation, nothing lost)`,
        );
      });
    }
    return kept;
  }

  /**
   * Settles the restore written down for `key`: when the bus holds one of the refused passwords
   * (committed late), nothing, or the old one, the old one is stored there (compare-and-set on the
   * revision read, so one that lands meanwhile is seen on the next try); when it holds another (a
   * later rotation stored, by this controller or another leader), that one stands. Either way the
   * intent is then forgotten. Nothing to do when none waits; idempotent.
   * @throws the bus's error when the bus cannot read or store it now (try again); StaleRevisionError
   * when the key changed between the read and the write; FileWriteError when the restores file
   * cannot be written.
   */
  async restore(key: string): Promise<void> {
    const intent = this.#restores.get(key);
    if (intent === undefined) return;
    let entry: { readonly revision: number; readonly value: SealedPassword } | undefined;
    try {
      entry = await this.#state.entry(key);
    } catch (err) {
      // A damaged record is no later rotation: the old password goes over it.
      if (!(err instanceof StateValueError)) throw err;
      entry = undefined;
    }
    if (entry === undefined || this.#mustYield(intent, entry.value.version)) {
      await this.#state.update(key, intent.kept, entry?.revision ?? 0);
      this.#log.info(`the password of ${key} is the one before the rotation the bus did not confirm`);
    } else {
      this.#log.info(`the password of ${key} was rotated since, and stored: that one stands`);
    }
    await this.#restores.clear(key, intent);
  }

  // Writes down, before the bus is asked, that `old` stands unless `next` is stored. A rotation
  // refused before and not settled yet keeps its old password and adds the new refused version.
  async #intend(
    key: string,
    consumer: string,
    iface: string,
    old: Held,
    next: KeptPassword,
  ): Promise<RestoreIntent> {
    const before = this.#restores.get(key);
    const intent: RestoreIntent =
      before !== undefined && before.kept.version === old.about.version
        ? { ...before, refused: [...before.refused, next.version] }
        : {
            consumer,
            interface: iface,
            // As the bus keeps it: put back as it was, not sealed again.
            kept: old.record,
            refused: [next.version],
            since: new Date().toISOString(),
          };
    await this.#restores.record(key, intent);
    return intent;
  }

  // Whether a password found in the bus is one a written-down restore undoes: a refused one that
  // landed late, or the old one itself (written again to settle the log).
  #mustYield(intent: RestoreIntent, version: string): boolean {
    return version === intent.kept.version || intent.refused.includes(version);
  }

  async #record(kept: KeptPassword): Promise<SealedPassword> {
    return {
      v: 1,
      sealed: await seal(kept.password, this.#keys.publicKey),
      version: kept.version,
      mintedAt: kept.mintedAt ?? new Date().toISOString(),
      ...(kept.slot === 1 ? { slot: 1 as const } : {}),
      ...(kept.cut === true ? { cut: true as const } : {}),
    };
  }

  // The password kept for `key`, not opened: from `stored` (the whole bucket, read before) when
  // given, else read from the bus; undefined when none is kept (or it is damaged: one is minted).
  async #read(
    key: string,
    consumer: string,
    iface: string,
    stored?: ReadonlyMap<string, SealedPassword | StateValueError>,
  ): Promise<Held | undefined> {
    let intent = this.#restores.get(key);
    let record: SealedPassword | undefined;
    try {
      const value = stored === undefined ? await this.#state.get(key) : stored.get(key);
      if (value instanceof StateValueError) throw value;
      record = value;
    } catch (err) {
      if (intent === undefined) {
        // A bus that does not answer now is not a damaged record: minting would rotate a password
        // nobody asked to rotate. The caller's change fails and is tried again.
        if (!(err instanceof StateValueError)) throw err;
        // A damaged record holds nothing usable: say so and mint a new one (a rotation, no data lost).
        this.#log.warn(`${err.message}; a new password is minted for ${key}`);
        return undefined;
      }
      record = undefined;
    }
    if (intent === undefined && record?.replaces !== undefined) {
      // A rotation no controller confirmed (one that asked was killed, or stood by, before it could
      // write it again): the password it replaces is in force; written down, and put back.
      intent = {
        consumer,
        interface: iface,
        kept: record.replaces,
        refused: [record.version],
        since: new Date().toISOString(),
      };
      await this.#restores.record(key, intent).catch((err: unknown) => {
        this.#log.warn(
          `the password of ${key} is a rotation nobody confirmed: the one it replaces is used, but ` +
            `${(err as Error).message}`,
        );
      });
    }
    // A refused rotation that landed late is not the password in force: the old one written down
    // is (and is put back by the restore that waits).
    if (intent !== undefined && (record === undefined || intent.refused.includes(record.version))) {
      record = intent.kept;
    }
    if (record === undefined) return undefined;
    // Read meanwhile by another caller (or minted): that one stands, so that it is opened once.
    const already = this.#kept.get(key);
    if (already !== undefined) return already;
    const held: Held = { key, about: aboutRecord(record), record: standing(record) };
    this.#kept.set(key, held);
    return held;
  }

  async #mint(key: string, why: string): Promise<Held> {
    const kept: KeptPassword = { password: mintPassword(), version: randomUUID(), mintedAt: mintTime() };
    const record = await this.#record(kept);
    await this.#state.put(key, record);
    const held: Held = { key, about: aboutRecord(record), record, opened: kept };
    this.#kept.set(key, held);
    this.#minted++;
    // A fleet's first start mints one per consumer: only the unusual mints are worth a line each.
    if (why !== "first needed") this.#log.info(`minted a new password for ${key} (${why})`);
    return held;
  }
}

// Runs `work` over `items`, CONCURRENCY at a time.
async function inParallel<T>(items: readonly T[], work: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await work(item);
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, items.length) }, worker));
}
