// Module ledgers made apart from the controller's queue, on a real nats-server: made in the
// background and told of once made; one that cannot be made is tried again and listed meanwhile.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { closeBus, ledgerStreamName } from "@mesh/bus";
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

  void it("says not ready at once, makes the ledger in the background, and tells when it is made", async () => {
    const ledgers = new ModuleLedgers({ nc, logger: recordingLogger() });
    const made: string[] = [];
    ledgers.whenMade((module) => made.push(module));
    assert.equal(ledgers.ready("notes"), false);
    assert.equal(ledgers.ready("notes"), false, "asked again while it is made: still one making");
    assert.equal(ledgers.waiting().length, 1);
    await until("notes's ledger made", () => (made.length > 0 ? true : undefined), 30);
    assert.deepEqual(made, ["notes"]);
    assert.equal(ledgers.ready("notes"), true);
    assert.deepEqual(ledgers.waiting(), []);
    const jsm = await jetstreamManager(nc);
    assert.equal((await jsm.streams.info(ledgerStreamName("notes"))).config.name, ledgerStreamName("notes"));
    ledgers.close();
  });

  void it("tries one that cannot be made again, lists it with its attempts, and stops when closed", async () => {
    const log = recordingLogger();
    const ledgers = new ModuleLedgers({ nc, logger: log, firstDelayMs: 50, maxDelayMs: 100 });
    // Not a module name: the bus never takes it, as a bus that cannot place a stream would not.
    assert.equal(ledgers.ready("Not A Module"), false);
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
    assert.equal(ledgers.ready("other"), false, "a closed one makes nothing more");
    assert.deepEqual(ledgers.waiting(), []);
  });
  void it("waits less for the first try's answers, then the usual, and makes it on a later try", async () => {
    const asked: ({ readonly timeoutMs?: number } | undefined)[] = [];
    const ledgers = new ModuleLedgers({
      nc,
      logger: recordingLogger(),
      firstDelayMs: 50,
      // A request JetStream lost (it placed the stream on a server just gone down): the first fails.
      ensure: (_nc, _module, options) => {
        asked.push(options);
        return asked.length === 1 ? Promise.reject(new Error("timeout")) : Promise.resolve();
      },
    });
    const made: string[] = [];
    ledgers.whenMade((module) => made.push(module));
    assert.equal(ledgers.ready("wiki"), false);
    await until("wiki's ledger made", () => (made.length > 0 ? true : undefined), 30);
    assert.equal(asked.length, 2);
    assert.ok((asked[0]?.timeoutMs ?? Infinity) <= 10_000, `the first try waits ${asked[0]?.timeoutMs} ms`);
    assert.equal(asked[1]?.timeoutMs, undefined, "a later try waits ensureLedger's own time");
    ledgers.close();
  });
});
