// Module ledgers made apart from the controller's queue, on a real nats-server: the ledger every
// module shares is made once, in the background, and each module asked for meanwhile is told of once
// it is; one that cannot be made is tried again and listed meanwhile.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { closeBus, LEDGER_STREAM, ledgerStreamName, sharedLedgerMade } from "@mesh/bus";
import { ModuleLedgers } from "../src/module-ledgers.ts";
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
    assert.equal(ledgerStreamName("notes"), LEDGER_STREAM, "every module's history is in the shared stream");
    assert.equal((await jsm.streams.info(LEDGER_STREAM)).config.name, LEDGER_STREAM);
    // Made once: a module asked for afterwards is made at once, with no stream made for it.
    const streams = async (): Promise<number> => {
      let n = 0;
      for await (const _ of jsm.streams.names()) n++;
      return n;
    };
    const before = await streams();
    ledgers.make("wiki");
    assert.equal(ledgers.isMade("wiki"), true);
    assert.equal(await streams(), before);
    ledgers.close();
  });

  void it("tries one that cannot be made again, lists it with its attempts, and stops when closed", async () => {
    const log = recordingLogger();
    const ledgers = new ModuleLedgers({
      nc,
      logger: log,
      firstDelayMs: 50,
      maxDelayMs: 100,
      made: () => Promise.resolve(false),
      // As a bus that cannot place a stream would answer.
      ensure: () => Promise.reject(new Error("insufficient resources")),
    });
    ledgers.make("notes");
    const listed = await until(
      "a few tries",
      () => {
        const waiting = ledgers.waiting()[0];
        return waiting !== undefined && waiting.attempts >= 3 ? waiting : undefined;
      },
      30,
    );
    assert.match(listed.what, /^the ledger every module shares/);
    assert.equal(ledgers.isMade("notes"), false);
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
      made: () => Promise.resolve(false),
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

  void it("finds the shared ledger already there in one listing, makes nothing, and copies an older mesh's ledgers", async () => {
    assert.equal(await sharedLedgerMade(nc), true);
    const asked: string[] = [];
    let migrated = 0;
    const ledgers = new ModuleLedgers({
      nc,
      logger: recordingLogger(),
      firstDelayMs: 50,
      ensure: (_nc, module) => {
        asked.push(module);
        return Promise.resolve();
      },
      // Fails once, as a bus that lost the request would: tried again.
      migrate: () => (++migrated === 1 ? Promise.reject(new Error("timeout")) : Promise.resolve()),
    });
    ledgers.prepare();
    ledgers.make("already");
    await until(
      "the migration run through",
      () => (migrated >= 2 && ledgers.waiting().length === 0 ? true : undefined),
      30,
    );
    assert.equal(ledgers.isMade("already"), true);
    ledgers.make("fresh");
    assert.equal(ledgers.isMade("fresh"), true, "made at once: the shared ledger is there");
    assert.deepEqual(asked, [], "the shared ledger there already is not made again");
    assert.equal(migrated, 2);
    ledgers.close();
  });
});
