// A module's ledger credential against a real nats-server: its own history and snapshots, and
// nothing else. A refused publish is seen as the request's rejection: nats.js rejects a request
// whose publish the server refuses with the server's PermissionViolationError (an allowed request
// nobody answers would be a NoRespondersError instead).
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";
import {
  enrollSubject,
  ledgerInboxPrefix,
  ledgerPermissions,
  ledgerSnapshotBucket,
  ledgerStreamName,
  ledgerSubject,
  ledgerSubjects,
  openState,
  reportSubject,
  toolSubject,
} from "@mesh/bus";
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
    // The controller creates each ledger beforehand. Plain streams (no deny_delete / deny_purge), so
    // what refuses a delete or purge below is the credential, not the stream's configuration.
    for (const module of [A, B]) {
      await controllerJsm.streams.add({ name: ledgerStreamName(module), subjects: [ledgerSubjects(module)] });
      await openState(controller, ledgerSnapshotBucket(module));
    }
    ledgerA = await bus.connectAs(`${A}-ledger`, ledgerPermissions(A), { inboxPrefix: ledgerInboxPrefix(A) });
  });
  after(async () => {
    await bus.stop();
  });

  const messagesIn = async (module: string): Promise<number> =>
    (await controllerJsm.streams.info(ledgerStreamName(module))).state.messages;

  void it("appends JSON to its own history and gets the stream's acknowledgement", async () => {
    const js = jetstream(ledgerA);
    const action = await js.publish(
      ledgerSubject(A, "action"),
      JSON.stringify({ kind: "action", action: "created", login: "notes_postgres" }),
      { expect: { streamName: ledgerStreamName(A) } },
    );
    assert.equal(action.stream, ledgerStreamName(A));
    assert.equal(action.duplicate, false);
    const tool = await js.publish(ledgerSubject(A, "tool"), JSON.stringify({ kind: "tool", tool: "status" }));
    assert.equal(tool.seq, action.seq + 1);

    // Its own stream's info, without the account-wide JetStream info a default manager asks for.
    const jsm = await jetstreamManager(ledgerA, { checkAPI: false });
    assert.equal((await jsm.streams.info(ledgerStreamName(A))).state.messages, await messagesIn(A));
    assert.ok((await messagesIn(A)) >= 2);
  });

  void it("puts, gets and lists the keys of its own snapshots", async () => {
    const snapshots = await openState<{ consumers: number }>(ledgerA, ledgerSnapshotBucket(A), {
      create: false,
    });
    await snapshots.put("consumers", { consumers: 3 });
    assert.deepEqual(await snapshots.get("consumers"), { consumers: 3 });
    assert.deepEqual(await snapshots.keys(), ["consumers"]);
    const seen = await openState(controller, ledgerSnapshotBucket(A));
    assert.deepEqual(await seen.get("consumers"), { consumers: 3 });
  });

  void it("cannot append to, read or write another module's ledger", async () => {
    const before = await messagesIn(B);
    const js = jetstream(ledgerA);
    await assert.rejects(js.publish(ledgerSubject(B, "action"), JSON.stringify({ kind: "action" })), refused);
    await assert.rejects(js.publish(`mesh.ledger.${A}`, "{}"), refused, "only below its own subjects");
    assert.equal(await messagesIn(B), before, "nothing reached the other module's history");

    const theirs = await openState(ledgerA, ledgerSnapshotBucket(B), { create: false });
    await assert.rejects(theirs.put("consumers", { forged: true }), refused);
    await assert.rejects(theirs.get("consumers"), refused);
    assert.equal(await (await openState(controller, ledgerSnapshotBucket(B))).get("consumers"), undefined);

    const jsm = await jetstreamManager(ledgerA, { checkAPI: false });
    await assert.rejects(jsm.streams.info(ledgerStreamName(B)), refused);
    await assert.rejects(jsm.streams.getMessage(ledgerStreamName(B), { seq: 1 }), refused);
  });

  void it("cannot delete, purge or create a stream, nor use any other JetStream call", async () => {
    const jsm = await jetstreamManager(ledgerA, { checkAPI: false });
    const held = await messagesIn(A);
    await assert.rejects(jsm.streams.delete(ledgerStreamName(A)), refused);
    await assert.rejects(jsm.streams.purge(ledgerStreamName(A)), refused);
    await assert.rejects(jsm.streams.deleteMessage(ledgerStreamName(A), 1), refused);
    await assert.rejects(jsm.streams.add({ name: "STOLEN", subjects: ["stolen.>"] }), refused);
    await assert.rejects(
      jsm.streams.update(ledgerStreamName(A), { subjects: [ledgerSubjects(A), "mesh.events.>"] }),
      refused,
    );
    await assert.rejects(jsm.consumers.add(ledgerStreamName(A), { durable_name: "peek" }), refused);
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
    for (const subject of ["mesh.ledger.>", `${ledgerInboxPrefix(B)}.>`, "_INBOX.>", "mesh.events.>", ">"]) {
      const sub = ledgerA.subscribe(subject);
      const closed = await sub.closed;
      assert.ok(closed instanceof PermissionViolationError, `${subject}: ${String(closed)}`);
      assert.equal(closed.operation, "subscription");
    }
    assert.equal(ledgerA.isClosed(), false);
  });
});
