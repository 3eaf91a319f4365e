// The agent's backlog of ledger entries the module's ledger could not take yet: kept in order,
// appended once it takes them, each with the id it was first tried with, and bounded.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { LedgerEntryError, type LedgerKind } from "@mesh/bus";
import { until } from "@mesh/testkit";
import { LedgerBacklog, type BacklogLedger } from "../src/ledger-backlog.ts";
import { recordingLogger } from "./test-mesh.ts";

/** A ledger that refuses until `open` is set, then records what it takes. */
function gatedLedger(): BacklogLedger & {
  open: boolean;
  taken: { kind: LedgerKind; entry: object; id: string | undefined }[];
} {
  const ledger = {
    open: false,
    taken: [] as { kind: LedgerKind; entry: object; id: string | undefined }[],
    append(kind: LedgerKind, entry: object, options?: { readonly id?: string }): Promise<number> {
      if (!ledger.open) return Promise.reject(new Error("notes's ledger is not made yet"));
      if ((entry as { bad?: boolean }).bad === true)
        return Promise.reject(new LedgerEntryError("notes", kind, "it holds a password-like field"));
      ledger.taken.push({ kind, entry, id: options?.id });
      return Promise.resolve(ledger.taken.length);
    },
  };
  return ledger;
}

describe("the agent's ledger backlog", () => {
  it("keeps entries in order and appends them once the ledger takes them, each with its first id", async () => {
    const ledger = gatedLedger();
    const logger = recordingLogger();
    const backlog = new LedgerBacklog({
      ledger: () => Promise.resolve(ledger),
      logger,
      firstDelayMs: 20,
      maxDelayMs: 40,
    });
    try {
      assert.equal(backlog.add("notes", "tool", { n: 1 }, "id-1"), true);
      assert.equal(backlog.add("notes", "tool", { n: 2 }, "id-2"), true);
      await until(
        "the wait said",
        () => logger.lines.some((l) => /^info: 2 entries wait for notes's ledger/.test(l)),
        10,
      );
      assert.equal(backlog.waiting("notes"), 2);
      ledger.open = true;
      await until("both taken", () => backlog.waiting("notes") === 0, 10);
      assert.deepEqual(
        ledger.taken.map((t) => [t.kind, (t.entry as { n: number }).n, t.id]),
        [
          ["tool", 1, "id-1"],
          ["tool", 2, "id-2"],
        ],
      );
      assert.ok(
        logger.lines.some((l) => /^info: notes's ledger took the 2 entries that waited for it/.test(l)),
      );
    } finally {
      await backlog.stop();
    }
  });

  it("keeps no more than its bound for one module, and says at its stop what was left unwritten", async () => {
    const logger = recordingLogger();
    const backlog = new LedgerBacklog({
      ledger: () => Promise.resolve(gatedLedger()),
      logger,
      firstDelayMs: 1_000,
      maxPerModule: 2,
    });
    assert.equal(backlog.add("notes", "tool", { n: 1 }, "a"), true);
    assert.equal(backlog.add("notes", "tool", { n: 2 }, "b"), true);
    assert.equal(backlog.add("notes", "tool", { n: 3 }, "c"), false, "the third is refused");
    assert.equal(backlog.add("wiki", "tool", { n: 1 }, "d"), true, "another module has its own bound");
    await backlog.stop();
    assert.equal(backlog.add("notes", "tool", { n: 4 }, "e"), false, "a stopped backlog keeps nothing");
    assert.ok(
      logger.lines.some((l) =>
        /^warn: 2 entries for notes's ledger could not be written before the agent stopped/.test(l),
      ),
    );
  });

  it("drops an entry the ledger refuses for what it holds, and goes on with the rest", async () => {
    const ledger = gatedLedger();
    ledger.open = true;
    const logger = recordingLogger();
    const backlog = new LedgerBacklog({ ledger: () => Promise.resolve(ledger), logger, firstDelayMs: 20 });
    try {
      backlog.add("notes", "tool", { bad: true }, "a");
      backlog.add("notes", "tool", { n: 2 }, "b");
      await until("the rest taken", () => backlog.waiting("notes") === 0, 10);
      assert.deepEqual(
        ledger.taken.map((t) => t.id),
        ["b"],
      );
      assert.ok(logger.lines.some((l) => /^warn: .*password-like field.*is dropped/.test(l)));
    } finally {
      await backlog.stop();
    }
  });
});
