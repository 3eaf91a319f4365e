// The guard around every adapter: the rules it keeps so that no adapter repeats them.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  AdminLoginRefusedError,
  AdminSettingError,
  BackendUnreachableError,
  guardAdapter,
  InvalidLoginError,
  NotMadeHereError,
  NotRetiredError,
  runProvisioner,
  ValueRefusedError,
  WHY_MOST,
  type BatchedAdapter,
  type Deleted,
  type InventoryEntry,
  type Provision,
  type Retired,
} from "@mesh/sdk";
import { MemoryAdapter } from "@mesh/testkit";

const signal = (): AbortSignal => new AbortController().signal;
const provision = (as: string, password = "pw"): Provision => ({ as, password, values: {}, derived: {} });

/** A batched adapter over a MemoryAdapter: only `holdsMany`, counting how often it is asked. */
function batchedOver(memory: MemoryAdapter): BatchedAdapter & { asked: string[][] } {
  const asked: string[][] = [];
  return {
    asked,
    create: (p) => memory.create(p),
    async holdsMany(ps) {
      asked.push(ps.map((p) => p.as));
      const answers = new Map<string, boolean | Error>();
      for (const p of ps) answers.set(p.as, await memory.holds(p));
      return answers;
    },
    retire: (as, d, why, at) => memory.retire(as, d, why, at),
    inventory: () => memory.inventory(),
    delete: (r) => memory.delete(r),
  };
}

void describe("the adapter guard", () => {
  void it("refuses an invalid login before any call reaches the adapter", async () => {
    const memory = new MemoryAdapter("main");
    const guarded = guardAdapter(memory, { instance: "main" });
    for (const login of ["", "Upper", "a-b", "a:b", "x'; DROP ROLE postgres; --", "a".repeat(33)]) {
      await assert.rejects(guarded.create(provision(login), signal()), InvalidLoginError);
      await assert.rejects(guarded.holds(provision(login), signal()), InvalidLoginError);
      await assert.rejects(guarded.retire(login, {}, "why", new Date()), InvalidLoginError);
      await assert.rejects(guarded.delete({ as: login, derived: {} }), InvalidLoginError);
      await assert.rejects(guarded.exists!(login), InvalidLoginError);
      await assert.rejects(guarded.endSessions(login, signal()), InvalidLoginError);
      const many = await guarded.holdsMany([provision(login)], signal());
      assert.ok(many.get(login) instanceof InvalidLoginError);
    }
    assert.deepEqual(memory.calls, [], "the adapter was never asked");
  });

  void it("answers holdsMany from holds when the adapter has only holds, and says it is not batched", async () => {
    const memory = new MemoryAdapter("main");
    const guarded = guardAdapter(memory, { instance: "main" });
    await guarded.create(provision("held"), signal());
    const many = await guarded.holdsMany(
      [provision("held"), provision("unknown"), provision("Bad")],
      signal(),
    );
    assert.equal(guarded.batched, false);
    assert.equal(many.get("held"), true);
    assert.equal(many.get("unknown"), false);
    assert.ok(many.get("Bad") instanceof InvalidLoginError);
    assert.equal(memory.count("holds"), 2);
  });

  void it("answers holds from holdsMany when the adapter has only holdsMany, and says it is batched", async () => {
    const memory = new MemoryAdapter("main");
    const batched = batchedOver(memory);
    const guarded = guardAdapter(batched, { instance: "main" });
    await guarded.create(provision("held"), signal());
    assert.equal(guarded.batched, true);
    assert.equal(await guarded.holds(provision("held"), signal()), true);
    assert.equal(await guarded.holds(provision("held", "wrong"), signal()), false);
    assert.deepEqual(batched.asked, [["held"], ["held"]]);
  });

  void it("passes on the error holdsMany answers a consumer with, as holds's error", async () => {
    const failing: BatchedAdapter = {
      ...batchedOver(new MemoryAdapter("main")),
      holdsMany: async (ps) => new Map(ps.map((p) => [p.as, new Error(`cannot ask about ${p.as}`)])),
    };
    const guarded = guardAdapter(failing, { instance: "main" });
    await assert.rejects(guarded.holds(provision("one"), signal()), /cannot ask about one/);
  });

  void it("answers only the logins asked, whatever holdsMany returns", async () => {
    const chatty: BatchedAdapter = {
      ...batchedOver(new MemoryAdapter("main")),
      holdsMany: async () => new Map([["someone_else", true]]),
    };
    const guarded = guardAdapter(chatty, { instance: "main" });
    const many = await guarded.holdsMany([provision("asked")], signal());
    assert.deepEqual([...many.keys()], []);
    await assert.rejects(guarded.holds(provision("asked"), signal()), /gave no answer/);
  });

  void it("refuses to delete an active consumer, or one this instance did not make, before the adapter is asked", async () => {
    const backend = new MemoryAdapter("main").backend;
    const mine = new MemoryAdapter("main", backend);
    const theirs = new MemoryAdapter("other", backend);
    const guarded = guardAdapter(mine, { instance: "main" });
    await guarded.create(provision("active_one"), signal());
    await theirs.create(provision("not_mine"));
    await theirs.retire("not_mine", {}, "unasked", new Date());

    await assert.rejects(guarded.delete({ as: "active_one", derived: {} }), NotRetiredError);
    await assert.rejects(guarded.delete({ as: "not_mine", derived: {} }), NotMadeHereError);
    await assert.rejects(guarded.delete({ as: "nobody", derived: {} }), (err: unknown) => {
      assert.ok(err instanceof NotMadeHereError);
      assert.match(err.message, /"main"/);
      assert.match(err.message, /cleanup list/);
      return true;
    });
    assert.equal(mine.count("delete"), 0, "the adapter was asked to delete nothing");
    assert.equal(backend.get("active_one")?.state, "active");
    assert.equal(backend.get("not_mine")?.state, "retired");
  });

  void it("deletes a retired consumer of its own, handing the adapter what the mark recorded", async () => {
    const seen: Retired[] = [];
    class Spying extends MemoryAdapter {
      override delete(r: Retired): Promise<Deleted> {
        seen.push(r);
        return super.delete(r);
      }
    }
    const guarded = guardAdapter(new Spying("main"), { instance: "main" });
    await guarded.create(provision("old_one"), signal());
    const at = new Date("2026-11-01T00:00:00Z");
    await guarded.retire("old_one", {}, "unasked", at);
    assert.deepEqual(await guarded.delete({ as: "old_one", derived: { stale: true } }), { freedBytes: 8192 });
    assert.deepEqual(seen, [{ as: "old_one", derived: {}, retiredAt: at, why: "unasked" }]);
  });

  void it("leaves out of the inventory an entry whose login the mesh could not have made", async () => {
    const memory = new MemoryAdapter("main");
    memory.backend.set("Not-A-Login", {
      password: "x",
      values: {},
      instance: "main",
      state: "active",
      bytes: 1,
    });
    const said: string[] = [];
    const logger = { info: () => {}, warn: (m: string) => said.push(m), error: () => {} };
    const guarded = guardAdapter(memory, { instance: "main", logger });
    await guarded.create(provision("fine"), signal());
    assert.deepEqual(
      (await guarded.inventory()).map((e) => e.as),
      ["fine"],
    );
    assert.match(said.join("\n"), /Not-A-Login/);
  });

  void it("clips a long why before the adapter writes it into a mark", async () => {
    const memory = new MemoryAdapter("main");
    const guarded = guardAdapter(memory, { instance: "main" });
    await guarded.create(provision("wordy"), signal());
    await guarded.retire("wordy", {}, "x".repeat(WHY_MOST * 3), new Date());
    const why = memory.backend.get("wordy")?.why ?? "";
    assert.equal(why.length, WHY_MOST);
    assert.ok(why.endsWith("…"));
  });

  void it("keeps when and why only on a retired entry, and no date that is not one", async () => {
    const entries: InventoryEntry[] = [
      { as: "active_one", state: "active", derived: {}, retiredAt: new Date(), why: "stale" },
      {
        as: "retired_one",
        state: "retired",
        derived: { database: "d" },
        retiredAt: new Date("nonsense"),
        why: "unasked",
      },
    ];
    const guarded = guardAdapter(
      { ...batchedOver(new MemoryAdapter("main")), inventory: async () => entries },
      { instance: "main" },
    );
    assert.deepEqual(await guarded.inventory(), [
      { as: "active_one", state: "active", derived: {} },
      {
        as: "retired_one",
        state: "retired",
        derived: { database: "d" },
        retiredAt: undefined,
        why: "unasked",
      },
    ]);
  });

  void it("closes the adapter once, however often it is asked", async () => {
    let closes = 0;
    const memory = new MemoryAdapter("main");
    const adapter = Object.assign(memory, {
      close: async () => {
        closes++;
      },
    });
    const guarded = guardAdapter(adapter, { instance: "main" });
    await Promise.all([guarded.close(), guarded.close()]);
    await guarded.close();
    assert.equal(closes, 1);
  });

  void it("classes every refusal refused, deep in a cause chain, without asking the adapter", () => {
    let asked = 0;
    const memory = Object.assign(new MemoryAdapter("main"), {
      classify: () => (asked++, "unreachable" as const),
    });
    const guarded = guardAdapter(memory, { instance: "main" });
    const refusal = new ValueRefusedError("shop", "name", "x y", "is not a plain name");
    const wrapped = new Error("create failed", { cause: new AggregateError([new Error("a"), refusal]) });
    assert.equal(guarded.classify(refusal), "refused");
    assert.equal(guarded.classify(wrapped), "refused");
    assert.equal(guarded.classify(new InvalidLoginError("A")), "refused");
    assert.equal(asked, 0);
    assert.equal(
      guarded.classify(new Error("ECONNREFUSED")),
      "unreachable",
      "anything else is the adapter's word",
    );
  });

  void it("classes the network failing and the kit's backend failures when the adapter says nothing", () => {
    const memory = Object.assign(new MemoryAdapter("main"), {
      classify: (err: unknown) => (err instanceof RangeError ? ("refused" as const) : undefined),
    });
    const guarded = guardAdapter(memory, { instance: "main" });
    const refusedNet = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
    assert.equal(guarded.classify(new Error("request failed", { cause: refusedNet })), "unreachable");
    const down = new BackendUnreachableError("Widget", "127.0.0.1:1", { cause: new Error("timeout") });
    assert.equal(guarded.classify(new Error("holds failed", { cause: down })), "unreachable");
    assert.match(down.message, /^Widget at 127\.0\.0\.1:1 cannot be reached \(timeout\)/);
    const login = new AdminLoginRefusedError("Widget", "h:1", "the admin", "401", "check adminUrl");
    assert.equal(guarded.classify(login), "credentials-rejected");
    assert.equal(login.message, "Widget at h:1 refused the admin (401); check adminUrl");
    assert.equal(
      guarded.classify(new RangeError("x", { cause: refusedNet })),
      "refused",
      "the adapter's word first",
    );
    assert.equal(guarded.classify(new Error("something else")), undefined);
  });

  void it("is applied once: guarding a guarded adapter for the same instance returns it", () => {
    const guarded = guardAdapter(new MemoryAdapter("main"), { instance: "main" });
    assert.equal(guardAdapter(guarded, { instance: "main" }), guarded);
  });

  void it("refuses an instance name outside the one pattern, in the guard and in the harness", () => {
    for (const instance of ["", "a:b", "a b", "-lead", "x".repeat(64)]) {
      assert.throws(() => guardAdapter(new MemoryAdapter(), { instance }), AdminSettingError);
      assert.throws(
        () =>
          runProvisioner("redis-namespace", new MemoryAdapter(), {
            receives: "/nonexistent",
            instance,
            watch: false,
          }),
        (err: unknown) => err instanceof AdminSettingError && err.setting === "instance",
      );
    }
  });
});
