// The wake at a rotation's grace bound: one timer, for the earliest bound, re-armed after it fires.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../src/clock.ts";
import { ConsumerBook } from "../src/consumer-book.ts";
import type { Contribution } from "../src/contributions-file.ts";
import { DrainWakes } from "../src/pass/drain-wakes.ts";

function entry(as: string): Contribution {
  return { as, secret: `/s/${as}`, node: "n1", values: {}, derived: {} };
}

function setup(): {
  clock: FakeClock;
  book: ConsumerBook;
  wakes: DrainWakes;
  woken: number[];
  stop: () => void;
} {
  const clock = new FakeClock();
  const book = new ConsumerBook(
    () => clock.now(),
    () => undefined,
  );
  const woken: number[] = [];
  let stopped = false;
  const wakes = new DrainWakes(
    clock,
    book,
    async () => {
      woken.push(clock.now());
    },
    () => stopped,
  );
  return { clock, book, wakes, woken, stop: () => (stopped = true) };
}

function drain(book: ConsumerBook, login: string, until: number): void {
  book.asked(entry(login));
  book.rotationIs(login, { phase: "drain", since: 0, until, password: undefined });
}

void describe("the wake at a rotation's grace bound", () => {
  void it("a pass is set off just after the earliest bound, and only one timer waits", () => {
    const { clock, wakes, woken } = setup();
    const t0 = clock.now();
    wakes.wakeFor(t0 + 60_000);
    wakes.wakeFor(t0 + 30_000);
    wakes.wakeFor(t0 + 90_000);
    assert.equal(clock.pending, 1);
    clock.advance(30_004);
    assert.deepEqual(woken, []);
    clock.advance(1);
    assert.deepEqual(woken, [t0 + 30_005]);
  });

  void it("after it fires, it waits for the next bound of the rotations still under way", async () => {
    const { clock, book, wakes, woken } = setup();
    const t0 = clock.now();
    drain(book, "a1", t0 + 10_000);
    drain(book, "a2", t0 + 50_000);
    wakes.wakeForDrains();
    clock.advance(10_005);
    assert.equal(woken.length, 1);
    book.rotationOver("a1");
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(clock.pending, 1, "re-armed for a2");
    clock.advance(40_000);
    assert.deepEqual(woken, [t0 + 10_005, t0 + 50_005]);
  });

  void it("once stopped, nothing is set off, and stop clears what waits", () => {
    const { clock, wakes, woken, stop } = setup();
    wakes.wakeFor(clock.now() + 1_000);
    stop();
    wakes.stop();
    wakes.wakeFor(clock.now() + 500);
    assert.equal(clock.pending, 0);
    clock.advance(10_000);
    assert.deepEqual(woken, []);
  });
});
