import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  dueKey,
  nextDue,
  parseDueRecord,
  periodOf,
  scheduleStep,
  spreadOffset,
  type DueRecord,
  type RotationPeriods,
  type ScheduledConsumer,
} from "../src/rotation-schedule.ts";

const DAY = 86_400_000;
const T0 = Date.parse("2026-01-01T00:00:00.000Z");

function consumer(name: string, iface = "postgres-database"): ScheduledConsumer {
  return { consumer: name, interface: iface, login: `${name}_postgres`, provider: "postgres" };
}

const CALM = { rotating: false, failing: false };

// The bus as the controller keeps it: what one step set or a rotation moved on, read back as is.
function keep(kept: Map<string, DueRecord>, step: ReturnType<typeof scheduleStep>): void {
  for (const { consumer: c, record } of step.set) kept.set(dueKey(c), record);
}

describe("the rotation schedule", () => {
  it("takes a module's period for an interface over the fleet's, and none when neither says", () => {
    const periods: RotationPeriods = {
      every: 30 * DAY,
      modules: { notes: { "postgres-database": 7 * DAY } },
    };
    assert.equal(periodOf(periods, consumer("notes")), 7 * DAY);
    assert.equal(periodOf(periods, consumer("notes", "redis-database")), 30 * DAY);
    assert.equal(periodOf(periods, consumer("api")), 30 * DAY);
    assert.equal(periodOf({ modules: { notes: { "postgres-database": DAY } } }, consumer("api")), undefined);
    assert.equal(periodOf(undefined, consumer("api")), undefined);
  });

  it("sets first due times within the period's first tenth, spread by login and the same each time", () => {
    const every = 30 * DAY;
    const many = Array.from({ length: 200 }, (_, i) => consumer(`app-${i}`));
    const step = scheduleStep(many, { every }, new Map(), T0, () => CALM);
    assert.equal(step.start.length, 0, "nothing is rotated the moment the schedule is set");
    assert.equal(step.set.length, 200);
    const offsets = step.set.map((s) => Date.parse(s.record.due) - T0);
    for (const o of offsets) assert.ok(o >= 0 && o < every / 10, `offset ${o}`);
    // Spread: hardly two of the 200 on the same minute, and both halves of the tenth used.
    assert.ok(new Set(offsets.map((o) => Math.floor(o / 60_000))).size >= 190);
    assert.ok(offsets.some((o) => o < every / 20) && offsets.some((o) => o >= every / 20));
    // Deterministic per consumer: another controller (or a restart) derives the same offset.
    assert.equal(spreadOffset("app-3_postgres", every), offsets[3]);
  });

  it("starts a consumer once it is due, and not before; its next due time is a period after the rotation", () => {
    const every = 7 * DAY;
    const c = consumer("notes");
    const kept = new Map<string, DueRecord>();
    keep(
      kept,
      scheduleStep([c], { every }, kept, T0, () => CALM),
    );
    const due = Date.parse(kept.get(dueKey(c))?.due ?? "");
    assert.deepEqual(scheduleStep([c], { every }, kept, due - 1, () => CALM).start, []);
    const step = scheduleStep([c], { every }, kept, due, () => CALM);
    assert.deepEqual(step.start, [c]);
    assert.deepEqual(step.set, []);
    kept.set(dueKey(c), nextDue(every, due + 5));
    assert.deepEqual(scheduleStep([c], { every }, kept, due + every, () => CALM).start, []);
    assert.deepEqual(scheduleStep([c], { every }, kept, due + 5 + every, () => CALM).start, [c]);
  });

  it("holds a due consumer while a rotation of it is under way or its provider fails for it, and starts it after", () => {
    const every = DAY;
    const c = consumer("notes");
    const kept = new Map<string, DueRecord>([[dueKey(c), { due: new Date(T0).toISOString(), every }]]);
    const rotating = scheduleStep([c], { every }, kept, T0 + 1000, () => ({
      rotating: true,
      failing: false,
    }));
    assert.deepEqual(rotating.start, []);
    assert.deepEqual(rotating.held, [{ consumer: c, why: "rotating" }]);
    const failing = scheduleStep([c], { every }, kept, T0 + 2000, () => ({ rotating: false, failing: true }));
    assert.deepEqual(failing.start, []);
    assert.deepEqual(failing.held, [{ consumer: c, why: "failing" }]);
    // Still due (nothing moved it on): started once both are over.
    assert.deepEqual(scheduleStep([c], { every }, kept, T0 + 3000, () => CALM).start, [c]);
  });

  it("keeps the due time across a restart: read back from the bus, it is neither moved nor started early", () => {
    const every = 30 * DAY;
    const cs = [consumer("notes"), consumer("api")];
    const bus = new Map<string, unknown>();
    const first = new Map<string, DueRecord>();
    const step = scheduleStep(cs, { every }, first, T0, () => CALM);
    for (const { consumer: c, record } of step.set) bus.set(dueKey(c), JSON.parse(JSON.stringify(record)));
    // A controller started later (or another taking over) reads what was kept, days on.
    const later = T0 + 2 * DAY;
    const read = new Map<string, DueRecord>();
    for (const c of cs) {
      const r = parseDueRecord(bus.get(dueKey(c)));
      if (r !== undefined) read.set(dueKey(c), r);
    }
    const again = scheduleStep(cs, { every }, read, later, () => CALM);
    assert.deepEqual(again.set, [], "no new due time is set from the restart");
    const dues = cs.map((c) => Date.parse(read.get(dueKey(c))?.due ?? ""));
    assert.deepEqual(
      again.start,
      cs.filter((_, i) => (dues[i] ?? Infinity) <= later),
    );
    assert.equal(parseDueRecord({ due: "not a date", every }), undefined);
    assert.equal(parseDueRecord({ due: new Date(T0).toISOString(), every: -1 }), undefined);
  });

  it("sets a new due time when the period changes: a shorter period brings it nearer, a longer keeps the nearer one", () => {
    const c = consumer("notes");
    const far = { due: new Date(T0 + 20 * DAY).toISOString(), every: 30 * DAY };
    const shorter = scheduleStep([c], { every: DAY }, new Map([[dueKey(c), far]]), T0, () => CALM);
    const d1 = Date.parse(shorter.set[0]?.record.due ?? "");
    assert.ok(d1 >= T0 && d1 < T0 + DAY / 10);
    assert.equal(shorter.set[0]?.record.every, DAY);
    const near = { due: new Date(T0 + 1000).toISOString(), every: DAY };
    const longer = scheduleStep([c], { every: 30 * DAY }, new Map([[dueKey(c), near]]), T0, () => CALM);
    assert.equal(longer.set[0]?.record.due, near.due);
  });
});
