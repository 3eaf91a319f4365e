// A module's ledger against a real nats-server: its part of the ledger every module shares, made by
// a connection that may do anything, written only on the module's own confined ledger connection,
// read back newest last, by the module's subjects.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  ensureLedger,
  LEDGER_STREAM,
  ledgerInboxPrefix,
  ledgerPermissions,
  LedgerEntryError,
  LedgerWriteError,
  ModuleLedger,
  readLedger,
} from "@mesh/bus";
import { ensureSharedLedger } from "../src/ledger.ts";
import { EVERYTHING, startBusServer, type BusServer } from "./bus-server.ts";

describe("a module's ledger", () => {
  let bus: BusServer;
  let controller: NatsConnection;
  const ledgers: ModuleLedger[] = [];

  const ledgerOf = async (module: string, as = module): Promise<ModuleLedger> => {
    const nc = await bus.connectAs(`${as}-ledger`, ledgerPermissions(as), {
      inboxPrefix: ledgerInboxPrefix(as),
    });
    const ledger = new ModuleLedger(nc, module);
    ledgers.push(ledger);
    return ledger;
  };

  before(async () => {
    bus = await startBusServer();
    controller = await bus.connectAs("controller", EVERYTHING);
    await ensureLedger(controller, "audit");
    await ensureLedger(controller, "notes");
  });
  after(async () => {
    await Promise.all(ledgers.map((l) => l.close()));
    await bus.stop();
  });

  it("is created once however many times, and at once, it is ensured: one stream for every module", async () => {
    const jsm = await jetstreamManager(controller);
    const streams = async (): Promise<string[]> => {
      const names: string[] = [];
      for await (const name of jsm.streams.names()) names.push(name);
      return names.sort();
    };
    const before = await streams();
    await Promise.all([ensureLedger(controller, "twice"), ensureLedger(controller, "twice")]);
    await ensureLedger(controller, "twice");
    // Another connection finds it made.
    const other = await bus.connectAs("controller-2", EVERYTHING);
    await Promise.all([ensureSharedLedger(other), ensureLedger(other, "third")]);
    assert.deepEqual(await streams(), before, "no stream made for a module");
    assert.deepEqual(before, ["KV_mesh-ledgers", LEDGER_STREAM]);
    const ledger = await ledgerOf("twice");
    assert.ok((await ledger.append("action", { action: "created", who: "provisioner" })) >= 1);
    assert.deepEqual(
      (await readLedger(controller, "twice", { limit: 10 })).map((r) => r.entry["action"]),
      ["created"],
    );
  });

  it("appends entries on the module's own connection and reads the newest back, oldest first", async () => {
    const ledger = await ledgerOf("audit");
    // Another module's entries in between, in the same stream: not audit's.
    const notes = await ledgerOf("notes");
    const seqs: number[] = [];
    for (let i = 1; i <= 5; i++) {
      seqs.push(await ledger.append("action", { action: "created", n: i }));
      await notes.append("action", { action: "noted", n: -i });
    }
    seqs.push(await ledger.append("tool", { tool: "status", args: [], ok: true }));
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
      "each entry's place grows",
    );

    const newest = await readLedger(controller, "audit", { limit: 3 });
    assert.deepEqual(
      newest.map((r) => [r.seq, r.subject, r.entry["kind"], r.entry["n"]]),
      [
        [seqs[3], "mesh.ledgers.audit.action", "action", 4],
        [seqs[4], "mesh.ledgers.audit.action", "action", 5],
        [seqs[5], "mesh.ledgers.audit.tool", "tool", undefined],
      ],
    );
    assert.ok(!Number.isNaN(Date.parse(newest[0]?.at ?? "")));

    const actions = await readLedger(controller, "audit", { limit: 2, kind: "action" });
    assert.deepEqual(
      actions.map((r) => r.entry["n"]),
      [4, 5],
    );
    const everything = await readLedger(controller, "audit", { limit: 100 });
    assert.equal(everything.length, 6);
    assert.deepEqual(
      await readLedger(controller, "audit", { limit: 5, kind: "tool" }).then((r) => r.length),
      1,
    );
  });

  it("reads nothing for a module that has no ledger yet, and refuses a limit below one", async () => {
    assert.deepEqual(await readLedger(controller, "nobody", { limit: 10 }), []);
    await ensureLedger(controller, "empty");
    assert.deepEqual(await readLedger(controller, "empty", { limit: 10, kind: "tool" }), []);
    await assert.rejects(readLedger(controller, "audit", { limit: 0 }), RangeError);
  });

  it("refuses a password-like field or value, or an entry that is not JSON, and appends nothing", async () => {
    const ledger = await ledgerOf("notes");
    const before = (await readLedger(controller, "notes", { limit: 100 })).length;
    const refused: Record<string, unknown>[] = [
      { action: "created", password: "hunter2" },
      { tool: "x", answer: { nested: { adminPassword: "x" } } },
      { tool: "x", args: ["SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4"] },
      { why: "postgres://mesh_admin:s3cret@db:5432/postgres" },
      { n: Number.NaN },
      { when: new Date() },
      { run: () => 1 },
      { kind: "tool", tool: "claims another kind" },
    ];
    for (const entry of refused) {
      await assert.rejects(ledger.append("action", entry), (err: unknown) => {
        assert.ok(err instanceof LedgerEntryError, String(err));
        assert.doesNotMatch(err.message, /hunter2|s3cret|SUAIBD/);
        assert.match(err.message, /notes's ledger refused/);
        return true;
      });
    }
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic["self"] = cyclic;
    await assert.rejects(ledger.append("action", cyclic), LedgerEntryError);
    // A masked password is what the mesh says about URLs, and is fine.
    await ledger.append("tool", { answer: "through postgres://mesh_admin:***@db:5432/postgres" });
    assert.equal((await readLedger(controller, "notes", { limit: 100 })).length, before + 1);
  });

  it("stores an entry appended twice under one id once, and answers the first sequence", async () => {
    const ledger = await ledgerOf("notes");
    const first = await ledger.append("action", { action: "retired" }, { id: "journal.n1.7.0" });
    const again = await ledger.append("action", { action: "retired" }, { id: "journal.n1.7.0" });
    assert.equal(again, first);
    const tail = await readLedger(controller, "notes", { limit: 2 });
    assert.equal(tail.filter((r) => r.entry["action"] === "retired").length, 1);
    // The same id from another module is that module's own entry, not a duplicate of notes's.
    const audit = await ledgerOf("audit");
    const theirs = await audit.append("action", { action: "retired" }, { id: "journal.n1.7.0" });
    assert.notEqual(theirs, first);
    const auditTail = await readLedger(controller, "audit", { limit: 1 });
    assert.equal(auditTail[0]?.entry["action"], "retired");
  });

  it("keeps snapshots, latest value only, readable on the same connection", async () => {
    const ledger = await ledgerOf("notes");
    assert.equal(await ledger.readSnapshot("journal"), undefined);
    await ledger.snapshot("journal", { offset: 10 });
    await ledger.snapshot("journal", { offset: 42 });
    assert.deepEqual(await ledger.readSnapshot("journal"), { offset: 42 });
    await assert.rejects(ledger.snapshot("journal", { seed: "x" }), LedgerEntryError);
    // Another module's snapshot of the same name is its own.
    const audit = await ledgerOf("audit");
    assert.equal(await audit.readSnapshot("journal"), undefined);
    await audit.snapshot("journal", { offset: 1 });
    assert.deepEqual(await ledger.readSnapshot("journal"), { offset: 42 });
  });

  it("cannot be written on another module's ledger connection", async () => {
    const intruder = await ledgerOf("notes", "audit");
    await assert.rejects(intruder.append("action", { action: "created" }), LedgerWriteError);
    await assert.rejects(intruder.snapshot("journal", { offset: 0 }), LedgerWriteError);
    await assert.rejects(intruder.readSnapshot("journal"), LedgerWriteError);
    const notes = await readLedger(controller, "notes", { limit: 100 });
    assert.ok(notes.every((r) => r.entry["action"] !== "created"));
  });
});
