// The two capabilities an adapter may add for a backend that does best once per pass: how many
// consumers one holdsMany covers (verifyBatch), and afterChanges, called once at the end of a pass
// that changed something, whose failure makes the next pass apply that pass's changes again.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { makeFixture } from "./harness-fixture.ts";

type Extra = {
  holdsMany?: (ps: readonly { as: string }[]) => Promise<Map<string, boolean>>;
  verifyBatch?: number;
  afterChanges?: () => Promise<void>;
};

void describe("adapter capabilities for whole passes", () => {
  void it("a verify pass asks holdsMany once over every consumer when the adapter covers all", async () => {
    const logins = Array.from({ length: 250 }, (_, i) => `c${String(i).padStart(3, "0")}`);
    const f = await makeFixture({ verifyEvery: 5_000 }, logins);
    const adapter = f.adapter as typeof f.adapter & Extra;
    const batches: number[] = [];
    try {
      adapter.holdsMany = async (ps) => {
        batches.push(ps.length);
        return new Map(ps.map((p) => [p.as, f.adapter.backend.has(p.as)]));
      };
      await f.periodic();
      assert.deepEqual(batches, [100, 100, 50], "without a word from the adapter, batches of 100");
      batches.length = 0;
      adapter.verifyBatch = Infinity;
      await f.periodic();
      assert.deepEqual(batches, [250], "one call for all 250");
    } finally {
      await f.close();
    }
  });

  void it("afterChanges runs once for a pass that created many, and not for a pass that changed nothing", async () => {
    const f = await makeFixture();
    const adapter = f.adapter as typeof f.adapter & Extra;
    let calls = 0;
    const createsAtCall: number[] = [];
    try {
      adapter.afterChanges = async () => {
        calls++;
        createsAtCall.push(f.adapter.calls.filter((c) => c.method === "create").length);
      };
      await f.ask(["a1", "a2", "a3"]);
      await f.periodic();
      assert.equal(calls, 1);
      assert.deepEqual(createsAtCall, [3], "called after all three creates");
      await f.periodic(2);
      assert.equal(calls, 1, "nothing changed: not called again");
      await f.ask(["a1", "a2"]);
      await f.periodic(6);
      assert.equal(f.stateOf("a3"), "retired");
      assert.equal(calls, 2, "the pass that retired a3 called it once more");
    } finally {
      await f.close();
    }
  });

  void it("a failed afterChanges makes the next pass apply that pass's creates again and ask again", async () => {
    const f = await makeFixture();
    const adapter = f.adapter as typeof f.adapter & Extra;
    let fail = true;
    let calls = 0;
    try {
      adapter.afterChanges = async () => {
        calls++;
        if (fail) throw new Error("ACL SAVE: ERR There was an error trying to save the ACLs");
      };
      await f.ask(["b1", "b2"]);
      await f.periodic();
      assert.equal(calls, 1);
      assert.ok(
        f.lines.some((l) => /did not finish this pass's changes/.test(l)),
        "said",
      );
      // What the save lost: the backend forgot b1 (as a Redis restarted from its ACL file would).
      f.adapter.backend.delete("b1");
      fail = false;
      const before = f.adapter.calls.filter((c) => c.method === "create").length;
      await f.periodic();
      const creates = f.adapter.calls.slice().filter((c) => c.method === "create").length - before;
      assert.equal(creates, 2, "both applied again without waiting for a verify pass");
      assert.equal(calls, 2, "and asked again");
      assert.ok(f.adapter.backend.has("b1"), "b1 made again");
      await f.periodic();
      assert.equal(calls, 2, "saved: not asked again");
    } finally {
      await f.close();
    }
  });
});
