// An older mesh's ledgers (a stream and a bucket of each module's own) copied into the shared ones,
// against a real nats-server: every entry once, in order, with the time it was first stored; the
// newer snapshot kept; the old streams left as they were; and a copy killed (SIGKILL) right after a
// batch and before its mark is finished by the next run with nothing lost or doubled.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  credsFor,
  ledgerInboxPrefix,
  ledgerPermissions,
  migrateLedgers,
  ModuleLedger,
  newUserKeys,
  openState,
  readLedger,
  type BusState,
} from "@mesh/bus";
import { LEDGER_MIGRATION_KEY_PREFIX } from "../src/ledger-migration.ts";
import {
  LEDGER_SNAPSHOTS_BUCKET,
  ledgerSnapshotKey,
  legacyLedgerSnapshotBucket,
  legacyLedgerStreamName,
} from "../src/ledger-subjects.ts";
import { EVERYTHING, recordingLogger, startBusServer, type BusServer } from "./bus-server.ts";

const FIXTURE = fileURLToPath(new URL("./fixtures/migrate-and-die.ts", import.meta.url));

void describe("an older mesh's ledgers copied into the shared ones", () => {
  let bus: BusServer;
  let controller: NatsConnection;
  let jsm: JetStreamManager;
  let marks: BusState<unknown>;
  let dir: string;

  // A module's ledger as an older mesh made and wrote it: `n` entries (every third with an id, as
  // the journal's are), and the snapshots given.
  const olderLedger = async (
    module: string,
    n: number,
    snapshots: Record<string, unknown>,
  ): Promise<void> => {
    await jsm.streams.add({ name: legacyLedgerStreamName(module), subjects: [`mesh.ledger.${module}.>`] });
    const js = jetstream(controller);
    for (let i = 1; i <= n; i++) {
      const kind = i % 5 === 0 ? "tool" : "action";
      await js.publish(`mesh.ledger.${module}.${kind}`, JSON.stringify({ kind, n: i }), {
        ...(i % 3 === 0 ? { msgID: `journal.n1.7.${i}` } : {}),
      });
    }
    const bucket = await openState<unknown>(controller, legacyLedgerSnapshotBucket(module));
    for (const [key, value] of Object.entries(snapshots)) await bucket.put(key, value);
  };
  const numbers = async (module: string): Promise<number[]> =>
    (await readLedger(controller, module, { limit: 1_000 })).map((r) => r.entry["n"] as number);
  const range = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-ledger-migration-"));
    bus = await startBusServer();
    controller = await bus.connectAs("controller", EVERYTHING);
    jsm = await jetstreamManager(controller);
    marks = await openState<unknown>(controller, "mesh-desired");
  });
  after(async () => {
    await bus.stop();
    await rm(dir, { recursive: true, force: true });
  });

  void it("copies every entry once, in order, with its first time, keeps the newer snapshot, and leaves the old streams", async () => {
    await olderLedger("notes", 40, { journal: { offset: 10 }, consumers: { count: 2 } });
    const firstAt = (await readLedgerOld("notes"))[0];
    // A module's node already on the newer mesh wrote its journal's snapshot since the upgrade.
    const shared = await openState<unknown>(controller, LEDGER_SNAPSHOTS_BUCKET);
    await shared.put(ledgerSnapshotKey("notes", "journal"), { offset: 99 });

    const log = recordingLogger();
    const outcome = await migrateLedgers(controller, marks, log, { batch: 7 });
    assert.deepEqual(outcome.modules, ["notes"]);
    assert.equal(outcome.entries, 40);
    assert.equal(outcome.snapshots, 1, "only the snapshot the shared bucket had none of");
    assert.deepEqual(outcome.left, ["LEDGER_notes", "KV_mesh-ledger-notes"]);
    assert.ok(log.lines.some((l) => /the operator may remove them/.test(l)));

    const records = await readLedger(controller, "notes", { limit: 1_000 });
    assert.deepEqual(
      records.map((r) => r.entry["n"]),
      range(40),
    );
    assert.equal(records[0]?.subject, "mesh.ledgers.notes.action");
    assert.equal(records[4]?.subject, "mesh.ledgers.notes.tool");
    assert.equal(records[0]?.at, firstAt, "the time the older stream stored it");
    assert.deepEqual(
      await shared.get(ledgerSnapshotKey("notes", "journal")),
      { offset: 99 },
      "the newer kept",
    );
    assert.deepEqual(await shared.get(ledgerSnapshotKey("notes", "consumers")), { count: 2 });

    // Left as they were: nothing deleted or purged by the mesh.
    assert.equal((await jsm.streams.info(legacyLedgerStreamName("notes"))).state.messages, 40);
    assert.equal((await jsm.streams.info("KV_mesh-ledger-notes")).state.messages, 2);

    // Run again (the next start): nothing more.
    const again = await migrateLedgers(controller, marks, recordingLogger(), { batch: 7 });
    assert.equal(again.entries + again.snapshots, 0);
    assert.deepEqual(await numbers("notes"), range(40));

    // An entry the older mesh stored after the copy (an agent not upgraded yet) is copied next time.
    await jetstream(controller).publish(
      "mesh.ledger.notes.action",
      JSON.stringify({ kind: "action", n: 41 }),
    );
    assert.equal((await migrateLedgers(controller, marks, recordingLogger())).entries, 1);
    assert.deepEqual(await numbers("notes"), range(41));
  });

  void it("keeps once an entry a newer agent appends again under the id the older one gave it", async () => {
    // The journal's line 3 of notes was appended by the older mesh with its id; the node, upgraded,
    // appends it again (it had not recorded that it got that far): the stream keeps it once.
    const creds = await bus.connectAs("notes-ledger", ledgerPermissions("notes"), {
      inboxPrefix: ledgerInboxPrefix("notes"),
    });
    const ledger = new ModuleLedger(creds, "notes");
    const before = await numbers("notes");
    await ledger.append("action", { n: 3 }, { id: "journal.n1.7.3" });
    assert.deepEqual(await numbers("notes"), before);
  });

  void it("finishes a copy killed right after a batch and before its mark, with nothing lost or doubled", async () => {
    await olderLedger("wiki", 95, { journal: { offset: 5 } });
    const keys = newUserKeys();
    const jwt = await bus.authority.issueUser({
      name: "dying",
      publicKey: keys.publicKey,
      permissions: EVERYTHING,
    });
    const credsFile = join(dir, "dying.creds");
    await writeFile(credsFile, credsFor(jwt, keys.seed), { mode: 0o600 });

    // Batches of 10: the third mark is never written; batch 3 (entries 21–30) was copied.
    const died = await runFixture([bus.server.url, credsFile, "10", "3"]);
    assert.equal(died.signal, "SIGKILL", `the copy was to die: ${died.output}`);
    const mark = (await marks.get(`${LEDGER_MIGRATION_KEY_PREFIX}.wiki`)) as { history: number };
    assert.equal(mark.history, 20, "what was written down before it died");
    assert.deepEqual(await numbers("wiki"), range(30), "copied up to the batch whose mark was lost");

    // The next start goes on from the mark, finds the batch already copied, and copies the rest.
    const outcome = await migrateLedgers(controller, marks, recordingLogger(), { batch: 10 });
    assert.equal(outcome.entries, 65);
    assert.deepEqual(await numbers("wiki"), range(95), "every entry once, in order");
    const shared = await openState<unknown>(controller, LEDGER_SNAPSHOTS_BUCKET);
    assert.deepEqual(await shared.get(ledgerSnapshotKey("wiki", "journal")), { offset: 5 });

    // Killed again at its first mark, with nothing left to copy: still nothing doubled.
    await runFixture([bus.server.url, credsFile, "10", "1"]);
    assert.deepEqual(await numbers("wiki"), range(95));
    assert.deepEqual(await numbers("notes"), range(41));
  });

  // The older stream's entries, each one's time as it stored it.
  async function readLedgerOld(module: string): Promise<string[]> {
    const times: string[] = [];
    const info = await jsm.streams.info(legacyLedgerStreamName(module));
    for (let seq = info.state.first_seq; seq <= Math.min(info.state.last_seq, 3); seq++) {
      const msg = await jsm.streams.getMessage(legacyLedgerStreamName(module), { seq });
      if (msg !== null) times.push(msg.time.toISOString());
    }
    return times;
  }
});

function runFixture(args: string[]): Promise<{ signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--conditions=source", "--import", "tsx", FIXTURE, ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    child.on("error", reject);
    child.on("exit", (_code, signal) => resolve({ signal, output }));
  });
}
