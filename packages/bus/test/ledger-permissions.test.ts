// A module's ledger credential against a real nats-server: its own subjects of the shared history
// and its own keys of the shared snapshots, and nothing else (not the others' entries, keys, or
// even how many there are). A refused publish is seen as the request's rejection: nats.js rejects a request
// whose publish the server refuses with the server's PermissionViolationError (an allowed request
// nobody answers would be a NoRespondersError instead).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";
import {
  ALL_LEDGER_SUBJECTS,
  enrollSubject,
  LEDGER_STREAM,
  ledgerInboxPrefix,
  ledgerPermissions,
  ledgerStreamName,
  ledgerSubject,
  ledgerSubjects,
  ModuleLedger,
  openState,
  readLedger,
  reportSubject,
  toolSubject,
} from "@mesh/bus";
import { ensureSharedLedger } from "../src/ledger.ts";
import { LEDGER_SNAPSHOTS_BUCKET, ledgerSnapshotKey } from "../src/ledger-subjects.ts";
import { EVERYTHING, startBusServer, type BusServer } from "./bus-server.ts";

// Two modules whose names share a prefix, so a permission that leaked by prefix would show.
const A = "notes";
const B = "notes-archive";

/** Whether the server refused `err`'s publish or subscription (and not something else that failed). */
function refused(err: unknown): boolean {
  const cause = err instanceof Error && err.cause !== undefined ? err.cause : err;
  return (
    err instanceof PermissionViolationError ||
    cause instanceof PermissionViolationError ||
    (err instanceof Error && /Permissions Violation/.test(err.message))
  );
}

void describe("a module's ledger credential", () => {
  let bus: BusServer;
  let controller: NatsConnection;
  let controllerJsm: JetStreamManager;
  let ledgerA: NatsConnection;

  before(async () => {
    bus = await startBusServer();
    controller = await bus.connectAs("controller", EVERYTHING);
    controllerJsm = await jetstreamManager(controller);
    // The controller makes the shared ledger beforehand, its history a plain stream (no
    // deny_delete / deny_purge), so what refuses a delete or purge below is the credential, not the
    // stream's configuration.
    await controllerJsm.streams.add({ name: LEDGER_STREAM, subjects: [ALL_LEDGER_SUBJECTS] });
    await ensureSharedLedger(controller);
    ledgerA = await bus.connectAs(`${A}-ledger`, ledgerPermissions(A), { inboxPrefix: ledgerInboxPrefix(A) });
  });
  after(async () => {
    await bus.stop();
  });

  const messagesIn = async (module: string): Promise<number> =>
    (await readLedger(controller, module, { limit: 1_000 })).length;
  const snapshotsOf = async (module: string, key: string): Promise<unknown> =>
    (await openState(controller, LEDGER_SNAPSHOTS_BUCKET)).get(ledgerSnapshotKey(module, key));

  void it("appends JSON to its own history and gets the stream's acknowledgement", async () => {
    const js = jetstream(ledgerA, { checkAPI: false });
    const action = await js.publish(
      ledgerSubject(A, "action"),
      JSON.stringify({ kind: "action", action: "created", login: "notes_postgres" }),
      { expect: { streamName: ledgerStreamName(A) } },
    );
    assert.equal(action.stream, LEDGER_STREAM);
    assert.equal(action.duplicate, false);
    const tool = await js.publish(ledgerSubject(A, "tool"), JSON.stringify({ kind: "tool", tool: "status" }));
    assert.ok(tool.seq > action.seq);
    assert.equal(await messagesIn(A), 2);
  });

  void it("puts and gets its own snapshots, in its own part of the shared bucket", async () => {
    const ledger = new ModuleLedger(ledgerA, A);
    await ledger.snapshot("consumers", { consumers: 3 });
    assert.deepEqual(await ledger.readSnapshot("consumers"), { consumers: 3 });
    assert.deepEqual(await snapshotsOf(A, "consumers"), { consumers: 3 });
  });

  void it("cannot append to, read or write another module's ledger", async () => {
    // B has an entry and a snapshot of its own, written by the controller.
    await jetstream(controller).publish(ledgerSubject(B, "action"), JSON.stringify({ kind: "action", n: 1 }));
    await (
      await openState(controller, LEDGER_SNAPSHOTS_BUCKET)
    ).put(ledgerSnapshotKey(B, "consumers"), { consumers: 9 });
    const before = await messagesIn(B);
    const js = jetstream(ledgerA, { checkAPI: false });
    await assert.rejects(js.publish(ledgerSubject(B, "action"), JSON.stringify({ kind: "action" })), refused);
    await assert.rejects(js.publish(`mesh.ledgers.${A}`, "{}"), refused, "only below its own subjects");
    await assert.rejects(
      js.publish(`mesh.ledger.${A}.action`, "{}"),
      refused,
      "not an older mesh's subjects",
    );
    assert.equal(await messagesIn(B), before, "nothing reached the other module's history");

    // The other module's keys: not written, not read, neither by the KV API nor by a direct get.
    const kv = await new Kvm(js).open(LEDGER_SNAPSHOTS_BUCKET, { allow_direct: true });
    await assert.rejects(
      kv.put(ledgerSnapshotKey(B, "consumers"), JSON.stringify({ forged: true })),
      refused,
    );
    await assert.rejects(kv.get(ledgerSnapshotKey(B, "consumers")), refused);
    await assert.rejects(kv.put(`${B}`, "{}"), refused);
    assert.deepEqual(await snapshotsOf(B, "consumers"), { consumers: 9 });
    const intruder = new ModuleLedger(ledgerA, B);
    await assert.rejects(intruder.readSnapshot("consumers"));

    // Nothing that reads the shared stream or bucket as a whole: not its info (the others' counts
    // and subjects), not a message by sequence, not a consumer, not a watch or a listing of keys.
    const jsm = await jetstreamManager(ledgerA, { checkAPI: false });
    await assert.rejects(jsm.streams.info(LEDGER_STREAM), refused);
    await assert.rejects(jsm.streams.info(LEDGER_STREAM, { subjects_filter: ">" }), refused);
    await assert.rejects(jsm.streams.getMessage(LEDGER_STREAM, { seq: 1 }), refused);
    await assert.rejects(jsm.direct.getMessage(LEDGER_STREAM, { seq: 1 }), refused);
    await assert.rejects(
      jsm.direct.getMessage(LEDGER_STREAM, { last_by_subj: ledgerSubject(B, "action") }),
      refused,
    );
    await assert.rejects(jsm.streams.getMessage(`KV_${LEDGER_SNAPSHOTS_BUCKET}`, { seq: 1 }), refused);
    await assert.rejects(jsm.consumers.add(LEDGER_STREAM, { filter_subject: ledgerSubjects(B) }), refused);
    await assert.rejects(
      (async () => {
        for await (const _ of await kv.keys()) break;
      })(),
      refused,
    );
  });

  void it("cannot delete, purge or create a stream, nor use any other JetStream call", async () => {
    const jsm = await jetstreamManager(ledgerA, { checkAPI: false });
    const held = await messagesIn(A);
    await assert.rejects(jsm.streams.delete(LEDGER_STREAM), refused);
    await assert.rejects(jsm.streams.purge(LEDGER_STREAM), refused);
    await assert.rejects(jsm.streams.purge(LEDGER_STREAM, { filter: ledgerSubjects(A) }), refused);
    await assert.rejects(jsm.streams.deleteMessage(LEDGER_STREAM, 1), refused);
    await assert.rejects(jsm.streams.add({ name: "STOLEN", subjects: ["stolen.>"] }), refused);
    await assert.rejects(
      jsm.streams.update(LEDGER_STREAM, { subjects: [ledgerSubjects(A), "mesh.events.>"] }),
      refused,
    );
    await assert.rejects(jsm.consumers.add(LEDGER_STREAM, { durable_name: "peek" }), refused);
    await assert.rejects(jsm.streams.names().next(), refused);
    await assert.rejects(jetstreamManager(ledgerA), refused, "no account-wide JetStream info");
    assert.equal(await messagesIn(A), held, "its history is whole");
  });

  void it("cannot publish an event, ask for a tool or speak on the control plane", async () => {
    for (const subject of [
      `mesh.events.${A}.note.created`,
      "mesh.tool",
      "mesh.status",
      "mesh.rotate",
      enrollSubject(),
      toolSubject("node-a"),
      reportSubject("node-a"),
    ]) {
      await assert.rejects(ledgerA.request(subject, "{}", { timeout: 5_000 }), refused, subject);
    }
  });

  void it("subscribes to nothing but its own inbox", async () => {
    for (const subject of [
      "mesh.ledgers.>",
      `mesh.ledgers.${A}.>`,
      "mesh.ledger.>",
      `${ledgerInboxPrefix(B)}.>`,
      "_INBOX.>",
      "mesh.events.>",
      ">",
    ]) {
      const sub = ledgerA.subscribe(subject);
      const closed = await sub.closed;
      assert.ok(closed instanceof PermissionViolationError, `${subject}: ${String(closed)}`);
      assert.equal(closed.operation, "subscription");
    }
    assert.equal(ledgerA.isClosed(), false);
  });
});
