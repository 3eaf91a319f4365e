// Copies the ledgers of an older mesh (before state format 3: a stream LEDGER_<module> and a bucket
// mesh-ledger-<module> for each module) into the shared ones, entry by entry, and leaves the old
// ones where they are: the mesh never deletes them by itself (the operator may, once copied; see
// docs/operating.md, "Upgrading"). Run by the leading controller at every start, in the background:
// it copies what was not copied yet, so a start killed half-way is finished by the next.
//
// No entry is lost or doubled across a crash:
// - what was copied of each stream is written down (its last sequence copied, and where the shared
//   stream stood then) after every batch, in the controller's bucket;
// - a batch copied but not written down is found again by reading the module's entries in the
//   shared stream since the mark, each naming the old entry it copies (`LEDGER_FROM_HEADER`), and
//   each is also sent with an id of its own, which the stream's duplicate window drops if sent twice;
// - an entry of the old stream that carried an id is sent under the id a newer agent appending it
//   again would use (`ledgerEntryId`), so an append in flight across the upgrade is kept once.
// A snapshot is copied only when the shared bucket holds none under its key: one written since the
// upgrade is newer than the old one.
import { DeliverPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";
import type { BusLogger } from "./connect-bus.ts";
import { ensureSharedLedger, LEDGER_AT_HEADER, LEDGER_FROM_HEADER, ledgerEntryId } from "./ledger.ts";
import {
  LEDGER_SNAPSHOTS_BUCKET,
  LEDGER_STREAM,
  LEGACY_LEDGER_SUBJECT_PREFIX,
  ledgerModuleOfStream,
  ledgerSnapshotKey,
  ledgerSubjects,
  LEDGER_SUBJECT_PREFIX,
  legacyLedgerSnapshotBucket,
  legacyLedgerStreamName,
} from "./ledger-subjects.ts";
import type { BusState } from "./state.ts";
import { kvStreamName } from "./subjects.ts";

/** The key prefix, in the controller's bucket, of what was copied of each module's old ledger. */
export const LEDGER_MIGRATION_KEY_PREFIX = "ledger-migration";

/** What was copied of one module's old ledger, as written down. */
export interface LedgerMigrationMark {
  /** The last sequence of the old stream copied (0: none yet). */
  readonly history: number;
  /** The shared stream's last sequence when `history` was written down: where a resumed copy looks. */
  readonly sharedFrom: number;
  /** Whether every snapshot of the old bucket was copied. */
  readonly snapshots: boolean;
  /** ISO 8601: when it was written. */
  readonly at: string;
}

/** What one run copied. */
export interface LedgerMigrationOutcome {
  /** The modules with an old stream or bucket, copied or found copied. */
  readonly modules: readonly string[];
  /** The entries and snapshots copied by this run. */
  readonly entries: number;
  readonly snapshots: number;
  /** The old streams (a history's, a bucket's) the operator may remove now that they are copied. */
  readonly left: readonly string[];
}

/** How many entries are copied between two marks. */
const BATCH = 256;

/** How long each request of the copy may take. */
const TIMEOUT_MS = 20_000;

/**
 * Copies every old ledger the bus holds into the shared one (made first when it is not there), with
 * `marks` (the controller's bucket) keeping what was copied. Safe to run again, and after a crash.
 * @throws the bus's error when a stream cannot be read or written: what was copied is written
 * down, and the next run goes on from there.
 */
export async function migrateLedgers(
  nc: NatsConnection,
  marks: BusState<unknown>,
  logger: BusLogger,
  options: { readonly batch?: number } = {},
): Promise<LedgerMigrationOutcome> {
  const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
  const streams = new Set<string>();
  for await (const name of jsm.streams.names()) streams.add(name);
  const modules = new Set<string>();
  for (const stream of streams) {
    const module = ledgerModuleOfStream(stream);
    if (module !== undefined) modules.add(module);
    const bucket = stream.startsWith("KV_mesh-ledger-") ? stream.slice("KV_mesh-ledger-".length) : undefined;
    if (bucket !== undefined && ledgerModuleOfStream(`LEDGER_${bucket}`) !== undefined) modules.add(bucket);
  }
  if (modules.size === 0) return { modules: [], entries: 0, snapshots: 0, left: [] };
  await ensureSharedLedger(nc);
  let entries = 0;
  let snapshots = 0;
  const left: string[] = [];
  for (const module of [...modules].sort()) {
    const key = `${LEDGER_MIGRATION_KEY_PREFIX}.${module}`;
    let mark = parseMark(await marks.get(key).catch(() => undefined));
    const stream = legacyLedgerStreamName(module);
    if (streams.has(stream)) {
      const copied = await copyHistory(
        nc,
        module,
        mark,
        async (next) => {
          mark = next;
          await marks.put(key, next);
        },
        options.batch ?? BATCH,
      );
      entries += copied;
      if (copied > 0)
        logger.info(`copied ${copied} entr${copied === 1 ? "y" : "ies"} of ${stream} into ${LEDGER_STREAM}`);
      left.push(stream);
    }
    const bucket = legacyLedgerSnapshotBucket(module);
    if (streams.has(kvStreamName(bucket))) {
      if (!mark.snapshots) {
        const copied = await copySnapshots(nc, module);
        snapshots += copied;
        mark = { ...mark, snapshots: true, at: new Date().toISOString() };
        await marks.put(key, mark);
        if (copied > 0)
          logger.info(`copied ${copied} snapshot(s) of ${bucket} into ${LEDGER_SNAPSHOTS_BUCKET}`);
      }
      left.push(kvStreamName(bucket));
    }
  }
  if (entries + snapshots > 0) {
    logger.info(
      `the ledgers of ${modules.size} module(s) are copied into the shared ${LEDGER_STREAM} and ` +
        `${LEDGER_SNAPSHOTS_BUCKET}; their own streams are left as they were (${left.length}, never ` +
        `written again): the operator may remove them (docs/operating.md, "Upgrading")`,
    );
  }
  return { modules: [...modules].sort(), entries, snapshots, left };
}

function parseMark(value: unknown): LedgerMigrationMark {
  const v = value as Partial<LedgerMigrationMark> | undefined;
  const whole = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 0;
  return {
    history: whole(v?.history) ? v.history : 0,
    sharedFrom: whole(v?.sharedFrom) ? v.sharedFrom : 0,
    snapshots: v?.snapshots === true,
    at: typeof v?.at === "string" ? v.at : "",
  };
}

// Copies the entries of `module`'s old stream after the mark, writing the mark after each batch.
async function copyHistory(
  nc: NatsConnection,
  module: string,
  mark: LedgerMigrationMark,
  write: (mark: LedgerMigrationMark) => Promise<void>,
  batch: number,
): Promise<number> {
  const stream = legacyLedgerStreamName(module);
  const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
  const info = await jsm.streams.info(stream);
  const last = info.state.last_seq;
  if (info.state.messages === 0 || mark.history >= last) return 0;
  // What a run that stopped after a batch and before its mark copied: found in the shared stream.
  const done = await copiedSince(nc, module, stream, mark);
  const js = jetstream(nc, { timeout: TIMEOUT_MS });
  const consumer = await js.consumers.get(stream, {
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: Math.max(info.state.first_seq, mark.history + 1),
  });
  const messages = await consumer.consume({ max_messages: batch });
  let copied = 0;
  let inBatch = 0;
  let upTo = mark.history;
  let sharedAt = mark.sharedFrom;
  try {
    for await (const msg of messages) {
      if (msg.seq > last) break;
      if (!done.has(msg.seq)) {
        const ack = await js.publish(sharedSubject(module, msg.subject), msg.data, {
          headers: copiedHeaders(stream, msg),
          msgID: copyId(module, stream, msg),
          expect: { streamName: LEDGER_STREAM },
        });
        sharedAt = Math.max(sharedAt, ack.seq);
        if (!ack.duplicate) copied += 1;
      }
      upTo = msg.seq;
      inBatch += 1;
      const end = msg.seq === last || msg.info.pending === 0;
      if (inBatch >= batch || end) {
        inBatch = 0;
        await write({ ...mark, history: upTo, sharedFrom: sharedAt, at: new Date().toISOString() });
      }
      if (end) break;
    }
  } finally {
    await messages.close();
  }
  return copied;
}

// The old sequences the shared stream holds copies of, among `module`'s entries since the mark.
async function copiedSince(
  nc: NatsConnection,
  module: string,
  stream: string,
  mark: LedgerMigrationMark,
): Promise<Set<number>> {
  const done = new Set<number>();
  const jsm = await jetstreamManager(nc, { timeout: TIMEOUT_MS });
  const info = await jsm.streams.info(LEDGER_STREAM, { subjects_filter: ledgerSubjects(module) });
  const matching = Object.values(info.state.subjects ?? {}).reduce((sum, n) => sum + n, 0);
  if (matching === 0 || info.state.last_seq <= mark.sharedFrom) return done;
  const consumer = await jetstream(nc, { timeout: TIMEOUT_MS }).consumers.get(LEDGER_STREAM, {
    filter_subjects: ledgerSubjects(module),
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: mark.sharedFrom + 1,
  });
  // Fetched in batches until one comes back empty: the module may have no entry past the mark.
  for (;;) {
    const batch = await consumer.fetch({ max_messages: 256, expires: 2_000 });
    let got = 0;
    let end = false;
    for await (const msg of batch) {
      got += 1;
      const from = msg.headers?.get(LEDGER_FROM_HEADER) ?? "";
      const [name, seq] = from.split(":");
      if (name === stream && seq !== undefined && /^\d+$/.test(seq)) done.add(Number(seq));
      if (msg.seq >= info.state.last_seq || msg.info.pending === 0) end = true;
    }
    if (got === 0 || end) break;
  }
  return done;
}

// `mesh.ledger.<module>.<kind>` becomes `mesh.ledgers.<module>.<kind>`.
function sharedSubject(module: string, subject: string): string {
  const old = `${LEGACY_LEDGER_SUBJECT_PREFIX}.${module}.`;
  const rest = subject.startsWith(old) ? subject.slice(old.length) : "unknown";
  return `${LEDGER_SUBJECT_PREFIX}.${module}.${rest}`;
}

function copiedHeaders(stream: string, msg: JsMsg) {
  const h = natsHeaders();
  for (const [name, values] of msg.headers ?? []) {
    const lower = name.toLowerCase();
    if (lower === "nats-msg-id" || lower.startsWith("nats-expected-") || name === LEDGER_AT_HEADER) continue;
    for (const value of values) h.append(name, value);
  }
  h.set(LEDGER_AT_HEADER, msg.time.toISOString());
  h.set(LEDGER_FROM_HEADER, `${stream}:${msg.seq}`);
  return h;
}

// The id a copy is sent with: the one a newer agent appending the same entry would use, or one
// naming the old entry when it carried none.
function copyId(module: string, stream: string, msg: JsMsg): string {
  const id = msg.headers?.get("Nats-Msg-Id");
  return id !== undefined && id !== "" ? ledgerEntryId(module, id) : `copied.${stream}.${msg.seq}`;
}

// Copies each snapshot of the old bucket the shared one has no value for.
async function copySnapshots(nc: NatsConnection, module: string): Promise<number> {
  const js = jetstream(nc, { timeout: TIMEOUT_MS });
  const kvm = new Kvm(js);
  const old = await kvm.open(legacyLedgerSnapshotBucket(module));
  const shared = await kvm.open(LEDGER_SNAPSHOTS_BUCKET);
  const keys: string[] = [];
  for await (const key of await old.keys()) keys.push(key);
  let copied = 0;
  for (const key of keys.sort()) {
    const entry = await old.get(key);
    if (entry === null || entry.operation !== "PUT") continue;
    try {
      await shared.create(ledgerSnapshotKey(module, key), entry.value);
      copied += 1;
    } catch (err) {
      // There already: written since the upgrade (newer), or by a run that stopped after it.
      if (!/wrong last sequence|key exists/i.test((err as Error).message ?? "")) throw err;
    }
  }
  return copied;
}
