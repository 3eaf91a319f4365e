// Module ledgers made apart from the controller's queue, on a real nats-server: made in the
// background and told of once made; one that cannot be made is tried again and listed meanwhile.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { closeBus, ensureLedger, ledgerStreamName, madeLedgers } from "@mesh/bus";
import { ModuleLedgers } from "@mesh/controller";
import { until } from "@mesh/testkit";
import { connectAsController, recordingLogger, startTestMesh, type TestMesh } from "./test-mesh.ts";

void describe("module ledgers made apart", () => {
  let mesh: TestMesh;
  let nc: NatsConnection;

  before(async () => {
    mesh = await startTestMesh();
    nc = await connectAsController(mesh.authority, mesh.nats.url);
  });
  after(async () => {
    await closeBus(nc);
    await mesh.stop();
  });

  void it("returns at once, makes the ledger in the background, and tells when it is made", async () => {
    const ledgers = new ModuleLedgers({ nc, logger: recordingLogger() });
    const made: string[] = [];
    ledgers.whenMade((module) => made.push(module));
    ledgers.make("notes");
    ledgers.make("notes");
    assert.equal(ledgers.isMade("notes"), false);
    await until("notes's ledger made", () => (made.length > 0 ? true : undefined), 30);
    assert.deepEqual(made, ["notes"], "asked twice while it was made: made once");
    assert.equal(ledgers.isMade("notes"), true);
    assert.deepEqual(ledgers.waiting(), []);
    const jsm = await jetstreamManager(nc);
    assert.equal((await jsm.streams.info(ledgerStreamName("notes"))).config.name, ledgerStreamName("notes"));
    ledgers.close();
  });

  void it("tries one that cannot be made again, lists it with its attempts, and stops when closed", async () => {
    const log = recordingLogger();
    const ledgers = new ModuleLedgers({ nc, logger: log, firstDelayMs: 50, maxDelayMs: 100 });
    // Not a module name: the bus never takes it, as a bus that cannot place a stream would not.
    ledgers.make("Not A Module");
    const listed = await until(
      "a few tries",
      () => {
        const waiting = ledgers.waiting()[0];
        return waiting !== undefined && waiting.attempts >= 3 ? waiting : undefined;
      },
      30,
    );
    assert.match(listed.what, /^module Not A Module's ledger/);
    assert.notEqual(listed.error, "being made");
    assert.equal(log.lines.filter((l) => /could not be made yet/.test(l)).length, 1, "said once");
    ledgers.close();
    assert.deepEqual(ledgers.waiting(), []);
    ledgers.make("other");
    assert.equal(ledgers.isMade("other"), false, "a closed one makes nothing more");
    assert.deepEqual(ledgers.waiting(), []);
  });
  void it("waits less for the first try's answers, then the usual, and makes it on a later try", async () => {
    const asked: ({ readonly timeoutMs?: number } | undefined)[] = [];
    const ledgers = new ModuleLedgers({
      nc,
      logger: recordingLogger(),
      firstDelayMs: 50,
      made: () => Promise.resolve(new Set()),
      // A request JetStream lost (it placed the stream on a server just gone down): the first fails.
      ensure: (_nc, _module, options) => {
        asked.push(options);
        return asked.length === 1 ? Promise.reject(new Error("timeout")) : Promise.resolve();
      },
    });
    const made: string[] = [];
    ledgers.whenMade((module) => made.push(module));
    ledgers.make("wiki");
    await until("wiki's ledger made", () => (made.length > 0 ? true : undefined), 30);
    assert.equal(asked.length, 2);
    assert.ok((asked[0]?.timeoutMs ?? Infinity) <= 10_000, `the first try waits ${asked[0]?.timeoutMs} ms`);
    assert.equal(asked[1]?.timeoutMs, undefined, "a later try waits ensureLedger's own time");
    ledgers.close();
  });

  void it("finds the ledgers already there in one listing, and makes only the others", async () => {
    await ensureLedger(nc, "already");
    assert.ok((await madeLedgers(nc)).has("already"));
    const asked: string[] = [];
    const ledgers = new ModuleLedgers({
      nc,
      logger: recordingLogger(),
      ensure: (_nc, module) => {
        asked.push(module);
        return Promise.resolve();
      },
    });
    const made: string[] = [];
    ledgers.whenMade((module) => made.push(module));
    ledgers.make("already");
    ledgers.make("fresh");
    await until("fresh's ledger made", () => (made.includes("fresh") ? true : undefined), 30);
    assert.equal(ledgers.isMade("already"), true);
    assert.deepEqual(asked, ["fresh"], "the one there already is not made again");
    assert.deepEqual(ledgers.waiting(), []);
    ledgers.close();
  });
});
