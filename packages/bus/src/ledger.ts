// Each module's ledger: its history, JSON entries appended to the one JetStream stream every
// module's history shares (each module below subjects of its own), and its snapshots, keys of the
// one KV bucket they share (each module below a key prefix of its own). The controller (which may do
// anything) makes both once, when it starts, and reads a module's history for `mesh ledger` by its
// subjects; everything a module's ledger holds is written on that module's own ledger connection,
// whose credential names only that module's subjects and keys, so one module cannot read or write
// another's. One stream and one bucket rather than two per module: on a cluster each stream is a
// raft group, and making one may take tens of seconds while a server is down.
import { Kvm, type KV } from "@nats-io/kv";
import {
  DeliverPolicy,
  DiscardPolicy,
  jetstream,
  JetStreamApiCodes,
  JetStreamApiError,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
  type JsMsg,
} from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { isTooFewPeers } from "./bus-replicas.ts";
import { placeableReplicas } from "./replica-count.ts";
import { closeBus } from "./connect-bus.ts";
import {
  ALL_LEDGER_SUBJECTS,
  LEDGER_SNAPSHOTS_BUCKET,
  LEDGER_STREAM,
  ledgerSnapshotKey,
  ledgerSubject,
  ledgerSubjectParts,
  ledgerSubjects,
  type LedgerKind,
} from "./ledger-subjects.ts";
import { InvalidStateKeyError, openState, StateValueError } from "./state.ts";
import { kvStreamName } from "./subjects.ts";

/** One entry of a module's history as it was stored. */
export interface LedgerRecord {
  /**
   * Its place in the shared history stream (the stream's sequence): it grows with each of the
   * module's entries, though not by one, since every module's entries share the stream.
   */
  readonly seq: number;
  /** The subject it was published to (`mesh.ledger.<module>.<kind>`). */
  readonly subject: string;
  /**
   * When the bus stored it (ISO 8601): for an entry copied from a module's own stream of an older
   * mesh, when that stream stored it (`LEDGER_AT_HEADER`).
   */
  readonly at: string;
  /** The entry as appended; `kind` says which kind it is. */
  readonly entry: Readonly<Record<string, unknown>>;
}

/**
 * The header carrying when an entry copied from an older mesh's stream was first stored (ISO
 * 8601), so its history reads as it was.
 */
export const LEDGER_AT_HEADER = "Mesh-Ledger-At";

/** The header naming where a copied entry came from: `<stream>:<sequence>` of the older stream. */
export const LEDGER_FROM_HEADER = "Mesh-Ledger-From";

/**
 * How long the history remembers an entry's id (see `AppendOptions.id`), so that appending the
 * same entry again after a crash (between the append and the record of how far it got) stores it
 * once. A day covers any restart a person would wait for.
 */
export const LEDGER_DUPLICATE_WINDOW_MS = 24 * 60 * 60_000;

/** How long creating a stream may take (JetStream places its copies first). */
const CREATE_TIMEOUT_MS = 20_000;

/** How long an append waits for the bus to say it stored the entry. */
const APPEND_TIMEOUT_MS = 10_000;

// The connections that made (or found) the shared ledger: asked once per connection.
const made = new WeakMap<NatsConnection, Promise<void>>();

/**
 * Makes the ledger every module shares when it is not there: the history stream (`LEDGER_STREAM`,
 * subjects `mesh.ledgers.>`, file storage, nothing ever deleted or purged) and the snapshots bucket
 * (`LEDGER_SNAPSHOTS_BUCKET`), each with the copies the bus's servers allow. Asked of the bus once
 * per connection once made; safe to call again, and by several at once. `options.timeoutMs` bounds
 * each request of the stream's making (default 20 s).
 * @throws the bus's own error when it cannot be made (the connection may not create streams, or
 * JetStream could not place it); asked again on the next call.
 */
export function ensureSharedLedger(
  nc: NatsConnection,
  options: { readonly timeoutMs?: number } = {},
): Promise<void> {
  let making = made.get(nc);
  if (making === undefined) {
    making = makeSharedLedger(nc, options);
    made.set(nc, making);
    making.catch(() => {
      if (made.get(nc) === making) made.delete(nc);
    });
  }
  return making;
}

async function makeSharedLedger(nc: NatsConnection, options: { readonly timeoutMs?: number }): Promise<void> {
  // While a server of the cluster is down, placing a replicated stream takes JetStream several seconds.
  const jsm = await jetstreamManager(nc, { timeout: options.timeoutMs ?? CREATE_TIMEOUT_MS });
  try {
    await jsm.streams.info(LEDGER_STREAM);
  } catch (err) {
    if (!isStreamNotFound(err)) throw err;
    try {
      const add = (replicas: number) =>
        jsm.streams.add({
          name: LEDGER_STREAM,
          num_replicas: replicas,
          subjects: [ALL_LEDGER_SUBJECTS],
          storage: StorageType.File,
          retention: RetentionPolicy.Limits,
          discard: DiscardPolicy.New,
          deny_delete: true,
          deny_purge: true,
          duplicate_window: LEDGER_DUPLICATE_WINDOW_MS * 1_000_000,
        });
      const replicas = placeableReplicas(nc);
      // With a server of the cluster down, it is made with one copy now and raised at the next start.
      await add(replicas).catch((err: unknown) => {
        if (replicas > 1 && isTooFewPeers(err)) return add(1);
        throw err;
      });
    } catch (addErr) {
      // Someone else created it in between: that is the ledger asked for.
      if (!(await streamExists(jsm, LEDGER_STREAM))) throw addErr;
    }
  }
  await openState(nc, LEDGER_SNAPSHOTS_BUCKET);
}

/**
 * Makes sure `module`'s ledger is there: its subjects and keys are the module's part of the shared
 * ledger, so this makes the shared one (`ensureSharedLedger`) when it is not there yet.
 * @throws InvalidLedgerModuleError for a name that is not a module name; what `ensureSharedLedger` throws.
 */
export async function ensureLedger(
  nc: NatsConnection,
  module: string,
  options: { readonly timeoutMs?: number } = {},
): Promise<void> {
  ledgerSubjects(module);
  await ensureSharedLedger(nc, options);
}

/**
 * Whether the shared ledger (its history stream and snapshots bucket both) is there, in one listing
 * of the streams.
 * @throws the bus's error when the streams cannot be listed.
 */
export async function sharedLedgerMade(
  nc: NatsConnection,
  options: { readonly timeoutMs?: number } = {},
): Promise<boolean> {
  const jsm = await jetstreamManager(nc, { timeout: options.timeoutMs ?? CREATE_TIMEOUT_MS });
  const streams = new Set<string>();
  for await (const name of jsm.streams.names()) streams.add(name);
  return streams.has(LEDGER_STREAM) && streams.has(kvStreamName(LEDGER_SNAPSHOTS_BUCKET));
}

/** An entry or snapshot the ledger will not take: not JSON, of another kind, or holding something secret. */
export class LedgerEntryError extends Error {
  override name = "LedgerEntryError";
  /**
   * @param what what was refused: a kind of entry (`action`, `tool`) or `snapshot <key>`.
   */
  constructor(
    readonly module: string,
    readonly what: string,
    why: string,
  ) {
    const refused = what.startsWith("snapshot ")
      ? what
      : `${/^[aeiou]/.test(what) ? "an" : "a"} ${what} entry`;
    super(`${module}'s ledger refused ${refused}: ${why}; nothing was written`);
  }
}

/** The ledger could not be written or read on the module's ledger connection. */
export class LedgerWriteError extends Error {
  override name = "LedgerWriteError";
  constructor(
    readonly module: string,
    what: string,
    options?: { cause?: unknown },
  ) {
    const cause = options?.cause instanceof Error ? ` (${options.cause.message})` : "";
    super(
      `${module}'s ledger could not ${what}${cause}: check that the bus is up, that the controller ` +
        `made the shared ledger (\`mesh status\` lists it while it is being made), and that ` +
        `the connection uses ${module}'s own ledger credential`,
      options,
    );
  }
}

/**
 * The module's ledger is not there yet: the controller makes it beside the module's credentials,
 * in the background, so a module may start (and write) before it is made. What was to be written
 * waits and is written once it is (see the agent's journal follower and tool runner).
 */
export class LedgerNotMadeError extends LedgerWriteError {
  override name = "LedgerNotMadeError";
  constructor(module: string, what: string, options?: { cause?: unknown }) {
    super(module, what, options);
    this.message =
      `${module}'s ledger is not made yet (the controller makes the ledger every module shares when ` +
      `it starts, and \`mesh status\` lists it while it waits): could not ${what}`;
  }
}

// What the bus says when the ledger is not there: no stream takes the history's subject (nats.js
// says a publish nobody answers is "jetstream is not enabled"), or the stream or bucket is missing.
function notMade(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e.name === "JetStreamNotEnabled" || e.name === "StreamNotFoundError") return true;
    if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) return true;
  }
  return false;
}

// The error for a write or read of `module`'s ledger that failed with `err`.
function writeError(module: string, what: string, err: unknown): LedgerWriteError {
  return notMade(err)
    ? new LedgerNotMadeError(module, what, { cause: err })
    : new LedgerWriteError(module, what, { cause: err });
}

/** How to append one entry. */
export interface AppendOptions {
  /**
   * An id unique to this entry: appending an entry whose id the history already holds (within
   * `LEDGER_DUPLICATE_WINDOW_MS`) stores nothing and answers the first one's sequence.
   */
  readonly id?: string;
}

/**
 * A module's ledger, written over that module's own ledger connection (see `ledgerPermissions`):
 * append to its history, write and read its snapshots. Owns the connection: `close()` closes it.
 */
export class ModuleLedger {
  readonly #js;
  /** Worked out once: an append at 64 in flight must not check the module name again each time. */
  readonly #subjects: Readonly<Record<LedgerKind, string>>;
  #snapshots: Promise<KV> | undefined;

  /**
   * @param nc the module's ledger connection (inbox prefix `ledgerInboxPrefix(module)`).
   * @throws InvalidLedgerModuleError for a name that is not a module name.
   */
  constructor(
    readonly nc: NatsConnection,
    readonly module: string,
  ) {
    this.#subjects = {
      action: ledgerSubject(module, "action"),
      tool: ledgerSubject(module, "tool"),
      rotate: ledgerSubject(module, "rotate"),
    };
    // No account-wide JetStream info first: the ledger credential allows only its own subjects.
    this.#js = jetstream(nc, { timeout: APPEND_TIMEOUT_MS, checkAPI: false });
  }

  /** Whether its connection has been closed (by `close()`, or for good by the bus). */
  get isClosed(): boolean {
    return this.nc.isClosed();
  }

  /**
   * Appends `entry` to the module's history under `kind` and answers its sequence. The entry is
   * stored with `kind` first (`{kind, ...entry}`). An id is the module's own: the stream is shared,
   * so it is kept as `<module>.<id>`, and one module's ids never stand for another's entries.
   * @throws LedgerEntryError when the entry is not a JSON object, names another kind, or has a
   * password-like field or value; LedgerWriteError when the bus does not store it.
   */
  async append(kind: LedgerKind, entry: object, options: AppendOptions = {}): Promise<number> {
    const refuse = (why: string): LedgerEntryError => new LedgerEntryError(this.module, kind, why);
    if (entry === null || typeof entry !== "object" || Array.isArray(entry)) {
      throw refuse("an entry is a JSON object");
    }
    const claimed = (entry as { kind?: unknown }).kind;
    if (claimed !== undefined && claimed !== kind) {
      throw refuse(`it says it is of kind ${JSON.stringify(claimed)}`);
    }
    const problem = secretOrNotJson(entry, "entry");
    if (problem !== undefined) throw refuse(problem);
    const data = JSON.stringify({ kind, ...entry });
    const most = this.nc.info?.max_payload;
    const size = Buffer.byteLength(data);
    if (most !== undefined && size > most) {
      throw refuse(`it is ${size} bytes, more than the bus takes in one message (${most})`);
    }
    try {
      const subject = this.#subjects[kind] ?? ledgerSubject(this.module, kind);
      const ack = await this.#js.publish(subject, data, {
        expect: { streamName: LEDGER_STREAM },
        ...(options.id !== undefined ? { msgID: ledgerEntryId(this.module, options.id) } : {}),
      });
      return ack.seq;
    } catch (err) {
      throw writeError(this.module, `append ${/^[aeiou]/.test(kind) ? "an" : "a"} ${kind} entry`, err);
    }
  }

  /**
   * Stores `value` as the module's snapshot `key` (the latest value only) and answers its revision.
   * @throws LedgerEntryError when the value is not JSON or has a password-like field or value;
   * InvalidStateKeyError for a key KV cannot store; LedgerWriteError when the bus does not store it.
   */
  async snapshot(key: string, value: unknown): Promise<number> {
    const problem = secretOrNotJson(value, "snapshot");
    if (problem !== undefined) throw new LedgerEntryError(this.module, `snapshot ${key}`, problem);
    const stored = this.#key(key);
    const kv = await this.#openSnapshots();
    try {
      return await kv.put(stored, JSON.stringify(value));
    } catch (err) {
      throw writeError(this.module, `store snapshot ${key}`, err);
    }
  }

  /**
   * The module's snapshot `key`, or undefined when there is none.
   * @throws StateValueError when what is stored is not JSON; LedgerWriteError when it cannot be read.
   */
  async readSnapshot<T = unknown>(key: string): Promise<T | undefined> {
    const stored = this.#key(key);
    const kv = await this.#openSnapshots();
    let entry;
    try {
      entry = await kv.get(stored);
    } catch (err) {
      throw writeError(this.module, `read snapshot ${key}`, err);
    }
    if (entry === null || entry.operation !== "PUT") return undefined;
    try {
      return entry.json<T>();
    } catch (err) {
      throw new StateValueError(LEDGER_SNAPSHOTS_BUCKET, stored, { cause: err });
    }
  }

  /**
   * Whether the shared ledger is made, asked without writing anything: a publish to the module's own
   * history that expects another stream is refused by the shared stream when it is there (it
   * stores nothing), and answered by nobody when it is not.
   * @throws the bus's error when it is not made (see `notMade`), or cannot be asked.
   */
  async #probe(): Promise<void> {
    try {
      await this.#js.publish(this.#subjects.action, "", { expect: { streamName: `${LEDGER_STREAM}_PROBE` } });
    } catch (err) {
      if (notMade(err) || !(err instanceof JetStreamApiError)) throw err;
      return; // refused by the shared stream: it is there
    }
    throw new Error(`the bus stored a probe of ${this.module}'s ledger it should have refused`);
  }

  /** Closes the ledger connection after what it has buffered is delivered. Idempotent. */
  close(): Promise<void> {
    return closeBus(this.nc);
  }

  // The key in the shared bucket, checked as the bucket's own keys are.
  #key(key: string): string {
    if (typeof key !== "string" || !SNAPSHOT_KEY.test(key)) {
      throw new InvalidStateKeyError(LEDGER_SNAPSHOTS_BUCKET, String(key));
    }
    return ledgerSnapshotKey(this.module, key);
  }

  #openSnapshots(): Promise<KV> {
    // Bound, not opened: no stream info is asked (the credential allows none), and a key is read
    // with a direct get whose subject names it, which the credential allows for its own keys only.
    // A direct get of a bucket not made yet is not answered at all (it waits out its timeout), so
    // whether the shared ledger is made is asked first, once.
    const opening = (this.#snapshots ??= this.#probe().then(() =>
      new Kvm(this.#js).open(LEDGER_SNAPSHOTS_BUCKET, { allow_direct: true }),
    ));
    opening.catch(() => {
      if (this.#snapshots === opening) this.#snapshots = undefined;
    });
    return opening.catch((err: unknown) => {
      throw writeError(this.module, "open its snapshots", err);
    });
  }
}

/** A snapshot key as the bucket takes it (`state.ts`'s rule). */
const SNAPSHOT_KEY = /^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$/;

/** The id an entry of `module` with id `id` is kept under in the shared stream (`<module>.<id>`). */
export function ledgerEntryId(module: string, id: string): string {
  return `${module}.${id}`;
}

/** What `readLedger` reads. */
export interface ReadLedgerOptions {
  /** How many of the newest entries (at least 1). */
  readonly limit: number;
  /** Only entries of this kind. */
  readonly kind?: LedgerKind;
}

/**
 * The newest `limit` entries of `module`'s history (of `kind` only, when given), oldest first; none
 * when the module has no ledger yet. For the controller, whose connection may read every stream.
 * @throws InvalidLedgerModuleError for a name that is not a module name; RangeError for a limit
 * below 1; the bus's error when the history cannot be read.
 */
export async function readLedger(
  nc: NatsConnection,
  module: string,
  options: ReadLedgerOptions,
): Promise<LedgerRecord[]> {
  const limit = Math.floor(options.limit);
  if (!(limit >= 1)) throw new RangeError(`a ledger read asks for at least 1 entry, not ${options.limit}`);
  const filter = options.kind !== undefined ? ledgerSubject(module, options.kind) : ledgerSubjects(module);
  const jsm = await jetstreamManager(nc);
  let last: number;
  let matching: number;
  try {
    const info = await jsm.streams.info(LEDGER_STREAM, { subjects_filter: filter });
    last = info.state.last_seq;
    matching = Object.values(info.state.subjects ?? {}).reduce((sum, n) => sum + n, 0);
  } catch (err) {
    if (isStreamNotFound(err)) return [];
    throw err;
  }
  if (matching === 0) return [];
  // The module's entries are found among every module's by its subjects, read through from its
  // first: the server skips the others' (its per-subject index), so this reads the module's only.
  const consumer = await jetstream(nc).consumers.get(LEDGER_STREAM, {
    filter_subjects: filter,
    deliver_policy: DeliverPolicy.All,
  });
  const newest: LedgerRecord[] = [];
  const messages = await consumer.consume({ max_messages: Math.min(1_000, Math.max(limit, 64)) });
  let seen = 0;
  try {
    for await (const msg of messages) {
      if (msg.seq > last) break;
      newest.push(toRecord(msg));
      if (newest.length > limit) newest.shift();
      seen += 1;
      if (seen >= matching || msg.seq === last || msg.info.pending === 0) break;
    }
  } finally {
    await messages.close();
  }
  return newest;
}

function toRecord(msg: JsMsg): LedgerRecord {
  let entry: Record<string, unknown>;
  try {
    const parsed = msg.json<unknown>();
    entry =
      parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)
        ? (parsed as Record<string, unknown>)
        : { kind: kindOf(msg.subject), value: parsed };
  } catch {
    // Only a module's own ledger connection writes here, and it refuses anything but JSON; an
    // entry that is not JSON anyway is shown as such rather than hiding the rest of the history.
    entry = { kind: kindOf(msg.subject), unreadable: "this entry is not JSON" };
  }
  const copiedAt = msg.headers?.get(LEDGER_AT_HEADER);
  const at =
    copiedAt !== undefined && copiedAt !== "" && Number.isFinite(Date.parse(copiedAt))
      ? new Date(copiedAt).toISOString()
      : msg.time.toISOString();
  return { seq: msg.seq, subject: msg.subject, at, entry };
}

function kindOf(subject: string): string {
  return ledgerSubjectParts(subject)?.kind ?? "unknown";
}

function isStreamNotFound(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound;
}

async function streamExists(
  jsm: Awaited<ReturnType<typeof jetstreamManager>>,
  name: string,
): Promise<boolean> {
  try {
    await jsm.streams.info(name);
    return true;
  } catch {
    return false;
  }
}

// A field name that is, or ends in, a word for a secret: `password`, `adminPassword`, `seed`, `jwt`.
const SECRET_FIELD =
  /(password|passwd|passphrase|pwd|secret|seed|token|jwt|creds|credentials?|privatekey|apikey|secretkey)$/;
// A NATS seed (`SU…`, `SA…`, `SO…`), or a URL with a password in it (a masked one, `***`, is fine).
const SECRET_VALUE = [
  /\bS[UAON][A-Z2-7]{50,}\b/,
  /\b[a-z][a-z0-9+.-]*:\/\/[^\s/@:]*:(?!(?:\*|%2A)+@)[^\s/@]+@/i,
];

/**
 * Why `value` cannot go into the ledger: a value JSON does not carry as it is (a function, a
 * non-finite number, a class instance, a cycle), or a field or value that looks like a secret. The
 * message names the path of the offending field, never its value.
 */
function secretOrNotJson(value: unknown, path: string, seen: Set<object> = new Set()): string | undefined {
  switch (typeof value) {
    case "string":
      // Both patterns need what most values lack (a run of 52 or more characters, or "://"): the
      // cheap test first keeps an append at 64 in flight close to a plain publish.
      return (value.length >= 52 || value.includes("://")) &&
        SECRET_VALUE.some((pattern) => pattern.test(value))
        ? `${path} holds what looks like a password or a NATS seed, which never goes into a ledger`
        : undefined;
    case "boolean":
      return undefined;
    case "number":
      return Number.isFinite(value) ? undefined : `${path} is ${String(value)}, which JSON cannot hold`;
    case "object": {
      if (value === null) return undefined;
      if (seen.has(value)) return `${path} refers back to itself, which JSON cannot hold`;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (!Array.isArray(value) && proto !== Object.prototype && proto !== null) {
        return `${path} is not plain JSON (a ${value.constructor?.name ?? "class instance"})`;
      }
      seen.add(value);
      for (const [key, inner] of Object.entries(value)) {
        const at = Array.isArray(value) ? `${path}[${key}]` : `${path}.${key}`;
        if (!Array.isArray(value) && SECRET_FIELD.test(key.toLowerCase().replace(/[^a-z]/g, ""))) {
          return `${at} is a password-like field, which never goes into a ledger (leave it out)`;
        }
        if (inner === undefined && !Array.isArray(value)) continue;
        const problem = secretOrNotJson(inner, at, seen);
        if (problem !== undefined) return problem;
      }
      seen.delete(value);
      return undefined;
    }
    default:
      return `${path} is ${typeof value === "undefined" ? "undefined" : `a ${typeof value}`}, which JSON cannot hold`;
  }
}
