// The consumer book: each transition, and the state and the "unsettled" set it leaves behind.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConsumerBook, SECRET_PATIENCE, SECRET_SAY_AGAIN } from "../src/consumer-book.ts";
import type { Trouble } from "../src/standing.ts";
import type { Provision } from "@mesh/sdk";
import type { Contribution } from "../src/contributions-file.ts";

function makeBook(start = 1_000): {
  book: ConsumerBook;
  clock: { now: number };
  trouble: Map<string, Trouble>;
} {
  const clock = { now: start };
  const trouble = new Map<string, Trouble>();
  const book = new ConsumerBook(
    () => clock.now,
    (login) => trouble.get(login),
  );
  return { book, clock, trouble };
}

function provision(as: string, derived: Record<string, unknown> = {}): Provision {
  return { as, password: `pw-${as}`, values: {}, derived };
}

function entry(as: string, values: Record<string, unknown> = {}): Contribution {
  return { as, secret: `/s/${as}`, node: "n1", values, derived: {} };
}

const troubleNow: Trouble = {
  since: 5,
  attempts: 1,
  class: "unreachable",
  text: "down",
  node: "n1",
  saidAt: undefined,
};

describe("the consumer book", () => {
  it("asked: a new or changed entry is news, the same entry again is not", () => {
    const { book } = makeBook();
    assert.equal(book.asked(entry("alpha")), true);
    const first = { ...book.get("alpha")! };
    assert.equal(first.state, "active");
    assert.deepEqual(book.unsettled(), ["alpha"], "asked and not applied yet");
    assert.equal(book.asked(entry("alpha")), false, "the same entry, a new object");
    assert.equal(book.get("alpha")!.generation, first.generation);
    assert.equal(book.asked(entry("alpha", { database: "a" })), true);
    assert.equal(book.asked(entry("alpha", { database: "a" })), false);
    assert.equal(book.asked({ ...entry("alpha", { database: "a" }), secret: "/s/other" }), true);
    assert.ok(book.get("alpha")!.generation > first.generation);
  });

  it("created: applied and settled; the run of failures it ends is returned", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    assert.equal(book.createFailed("alpha", "boom").times, 1);
    assert.equal(book.createFailed("alpha", "boom").times, 2, "the same way again counts on");
    assert.equal(book.createFailed("alpha", "other").times, 1, "a new way starts again");
    assert.deepEqual(book.unsettled(), ["alpha"]);
    const failed = book.created(provision("alpha", { d: 1 }), "digest-1", "tag-1");
    assert.deepEqual(failed, { text: "other", times: 1 });
    const r = book.get("alpha")!;
    assert.equal(r.made, "active");
    assert.equal(r.applied, "digest-1");
    assert.equal(r.appliedTag, "tag-1");
    assert.deepEqual(r.derived, { d: 1 });
    assert.equal(r.failure, undefined);
    assert.deepEqual(book.unsettled(), [], "applied as asked: nothing for a pass to do");
  });

  it("createFailed: what was applied is forgotten, so the next pass applies it again", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    const before = book.get("alpha")!.generation;
    book.createFailed("alpha", "boom");
    assert.equal(book.get("alpha")!.applied, undefined);
    assert.equal(book.get("alpha")!.appliedTag, undefined);
    assert.ok(book.get("alpha")!.generation > before);
    assert.deepEqual(book.unsettled(), ["alpha"]);
  });

  it("notApplied: an apply the backend did not finish is applied again, and stays active", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha"), "d", "t");
    const before = book.get("alpha")!.generation;
    book.notApplied("alpha");
    assert.equal(book.get("alpha")!.provision, undefined);
    assert.equal(book.get("alpha")!.applied, undefined);
    assert.equal(book.get("alpha")!.made, "active");
    assert.equal(book.get("alpha")!.failure, undefined);
    assert.ok(book.get("alpha")!.generation > before);
    assert.deepEqual(book.unsettled(), ["alpha"]);
  });

  it("notHeld, braked and held: the brake counts in a row and is let go once held", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    assert.equal(book.notHeld("alpha"), 1);
    book.braked("alpha", 1, 2_000);
    assert.equal(book.notHeld("alpha"), 2, "found not held again after one re-apply");
    assert.equal(book.isBraked("alpha", 1_999), true);
    assert.equal(book.isBraked("alpha", 2_000), false);
    book.held("alpha");
    assert.equal(book.get("alpha")!.brake, undefined);
    assert.equal(book.notHeld("alpha"), 1);
  });

  it("unasked, awaiting and retired: unasked, then awaiting approval, then retired", () => {
    const { book, clock } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    clock.now = 2_000;
    book.unasked("alpha");
    assert.equal(book.get("alpha")!.state, "unasked");
    assert.equal(book.get("alpha")!.since, 2_000);
    assert.deepEqual(book.unsettled(), []);
    clock.now = 3_000;
    book.awaiting(["alpha"]);
    assert.equal(book.get("alpha")!.state, "awaiting-approval");
    assert.equal(book.get("alpha")!.since, 3_000);
    book.awaiting([]);
    assert.equal(book.get("alpha")!.state, "unasked");
    book.awaiting(["alpha"]);
    clock.now = 4_000;
    book.retired("alpha", 3_500, "nobody asks");
    const r = book.get("alpha")!;
    assert.equal(r.state, "retired");
    assert.equal(r.made, "retired");
    assert.equal(r.retiredAt, 3_500);
    assert.equal(r.retiredWhy, "nobody asks");
    assert.equal(r.applied, undefined, "asked for again, it is applied again");
    assert.equal(r.awaiting, false);
  });

  it("deleted: a record neither asked for nor made goes", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    book.unasked("alpha");
    book.retired("alpha", 1, "why");
    assert.deepEqual(book.sortedLogins(), ["alpha"]);
    book.deleted("alpha");
    assert.equal(book.get("alpha"), undefined);
    assert.deepEqual(book.sortedLogins(), []);
    assert.equal(book.size, 0);
  });

  it("unasked before it was ever made: nothing is said of it any more", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.createFailed("alpha", "boom");
    book.unasked("alpha");
    assert.equal(book.get("alpha"), undefined);
    assert.deepEqual(book.unsettled(), []);
  });

  it("secretMissing: a race said plainly, loudly after a minute, then rarely; found again", () => {
    const { book } = makeBook(0);
    book.asked(entry("alpha"));
    assert.equal(book.secretMissing("alpha", 0, false), "waiting");
    assert.equal(book.secretMissing("alpha", 10_000, false), "none");
    assert.equal(book.secretMissing("alpha", SECRET_PATIENCE, false), "loud");
    assert.equal(book.secretMissing("alpha", SECRET_PATIENCE + 1_000, false), "none");
    assert.equal(book.secretMissing("alpha", SECRET_PATIENCE + SECRET_SAY_AGAIN, false), "loud");
    assert.deepEqual(book.unsettled(), ["alpha"]);
    book.created(provision("alpha", {}), "d", "t");
    assert.deepEqual(book.unsettled(), ["alpha"], "a secret miss keeps it unsettled");
    assert.equal(book.secretFound("alpha"), true, "it had been said loudly");
    assert.equal(book.get("alpha")!.secretMiss, undefined);
    assert.deepEqual(book.unsettled(), []);
    assert.equal(book.secretFound("alpha"), false, "nothing was missing");
  });

  it("secretMissing: a file that breaks the rule is refused loudly at once, and rarely after", () => {
    const { book } = makeBook(0);
    book.asked(entry("alpha"));
    assert.equal(book.secretMissing("alpha", 0, true), "refused");
    assert.equal(book.secretMissing("alpha", 1_000, true), "none");
    assert.equal(book.secretMissing("alpha", SECRET_SAY_AGAIN, true), "refused");
  });

  it("seeded: what the inventory says, unless the book already knows better", () => {
    const { book } = makeBook();
    book.seeded({ as: "old", state: "retired", derived: { x: 1 }, retiredAt: new Date(7), why: "gone" });
    book.seeded({ as: "kept", state: "active", derived: {} });
    assert.equal(book.get("old")!.state, "retired");
    assert.equal(book.get("old")!.retiredAt, 7);
    assert.equal(book.get("kept")!.state, "unasked");
    book.asked(entry("new"));
    book.seeded({ as: "new", state: "retired", derived: {} });
    assert.equal(book.get("new")!.made, undefined, "a record already kept wins");
  });

  it("touch: a standing in trouble makes an asked consumer failing, and unsettled", () => {
    const { book, trouble } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    const version = book.version;
    trouble.set("alpha", troubleNow);
    book.touch("alpha");
    assert.equal(book.get("alpha")!.state, "failing");
    assert.deepEqual(book.unsettled(), ["alpha"]);
    assert.ok(book.version > version);
    trouble.delete("alpha");
    book.touch("alpha");
    assert.equal(book.get("alpha")!.state, "active");
    assert.deepEqual(book.unsettled(), []);
  });

  it("a refused entry stays unsettled: every pass fails it again", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.created(provision("alpha", {}), "d", "t");
    book.asked({ ...entry("alpha"), refused: "too deep" });
    assert.deepEqual(book.unsettled(), ["alpha"]);
  });

  it("flying and landed: in flight until the create ends", () => {
    const { book } = makeBook();
    book.asked(entry("alpha"));
    book.flying("alpha");
    assert.equal(book.get("alpha")!.inFlight, true);
    book.landed("alpha");
    assert.equal(book.get("alpha")!.inFlight, false);
  });
});
