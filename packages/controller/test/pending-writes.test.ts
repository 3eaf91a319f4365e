// The rule that nothing accepted is dropped, under a fake clock: a refused write waits, is tried
// again with a growing, bounded backoff, and leaves the list once stored.
import assert from "node:assert/strict";
import { quietLogger } from "@mesh/testkit";
import { describe, it } from "node:test";
import { FakeClock } from "@mesh/sdk";
import { PendingWrites, WriteWaitsError } from "../src/pending-writes.ts";

const settle = () => new Promise((r) => setImmediate(r));

describe("pending writes", () => {
  it("a write the bus refuses waits, is tried again, and leaves the list once stored", async () => {
    const clock = new FakeClock();
    const pending = new PendingWrites({ logger: quietLogger, clock });
    let refusals = 2;
    let stored = 0;
    const write = async () => {
      if (refusals-- > 0) throw new Error("no quorum");
      stored += 1;
    };
    await assert.rejects(pending.attempt("fleet", "the fleet read at T", write), WriteWaitsError);
    const since = pending.waiting()[0]?.since;
    assert.deepEqual(
      pending.waiting().map((w) => [w.what, w.attempts, w.error]),
      [["the fleet read at T", 1, "no quorum"]],
    );
    clock.advance(500);
    await settle();
    assert.equal(pending.waiting()[0]?.attempts, 2, "tried again after 500 ms, refused again");
    assert.equal(pending.waiting()[0]?.since, since, "since the first refusal");
    clock.advance(999);
    await settle();
    assert.equal(stored, 0, "the second wait is twice the first");
    clock.advance(1);
    await settle();
    assert.equal(stored, 1);
    assert.deepEqual(pending.waiting(), []);
  });

  it("the wait between tries stops growing at its bound", async () => {
    const clock = new FakeClock();
    const pending = new PendingWrites({ logger: quietLogger, clock, firstDelayMs: 1000, maxDelayMs: 4000 });
    await assert.rejects(pending.attempt("fleet", "the fleet", () => Promise.reject(new Error("down"))));
    for (const wait of [1000, 2000, 4000, 4000, 4000]) {
      const before = pending.waiting()[0]?.attempts ?? 0;
      clock.advance(wait);
      await settle();
      assert.equal(pending.waiting()[0]?.attempts, before + 1, `tried after ${wait} ms`);
    }
    pending.close();
  });

  it("a newer write of the same key replaces the one that waits, keeping since when", async () => {
    const clock = new FakeClock();
    const pending = new PendingWrites({ logger: quietLogger, clock });
    const seen: string[] = [];
    let down = true;
    const write = (name: string) => async () => {
      if (down) throw new Error("down");
      seen.push(name);
    };
    await assert.rejects(pending.attempt("fleet", "the fleet read at 1", write("one")));
    const since = pending.waiting()[0]?.since;
    clock.advance(100);
    await assert.rejects(pending.attempt("fleet", "the fleet read at 2", write("two")));
    assert.deepEqual(
      pending.waiting().map((w) => [w.what, w.since, w.attempts]),
      [["the fleet read at 2", since, 2]],
    );
    down = false;
    clock.advance(10_000);
    await settle();
    assert.deepEqual(seen, ["two"], "only the newest is written");
    assert.deepEqual(pending.waiting(), []);
  });

  it("retries run through the queue it is given, one change at a time", async () => {
    const clock = new FakeClock();
    let queued = 0;
    const pending = new PendingWrites({
      logger: quietLogger,
      clock,
      run: (fn) => {
        queued += 1;
        return fn();
      },
    });
    let down = true;
    await assert.rejects(
      pending.attempt("fleet", "the fleet", async () => {
        if (down) throw new Error("down");
      }),
    );
    down = false;
    clock.advance(500);
    await settle();
    assert.equal(queued, 1);
    assert.deepEqual(pending.waiting(), []);
  });
});
