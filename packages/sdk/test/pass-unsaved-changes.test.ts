// Finishing the backend's changes: once when something changed, and, when it fails, what was
// applied since is taken as not applied (the next pass applies it again).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { FakeClock } from "../src/clock.ts";
import { ConsumerBook } from "../src/consumer-book.ts";
import type { Contribution } from "../src/contributions-file.ts";
import { UnsavedChanges } from "../src/pass/unsaved-changes.ts";

function entry(as: string): Contribution {
  return { as, secret: `/s/${as}`, node: "n1", values: {}, derived: {} };
}

function setup(after: () => Promise<void>): {
  book: ConsumerBook;
  changes: UnsavedChanges;
  warnings: string[];
} {
  const clock = new FakeClock();
  const book = new ConsumerBook(
    () => clock.now(),
    () => undefined,
  );
  const warnings: string[] = [];
  const changes = new UnsavedChanges({
    adapter: { afterChanges: after },
    clock,
    timeout: 60_000,
    book,
    log: { info: () => {}, warn: (m) => warnings.push(m), error: () => {} },
    report: { describe: (err) => (err instanceof Error ? err.message : String(err)), passwords: () => [] },
  });
  return { book, changes, warnings };
}

function apply(book: ConsumerBook, changes: UnsavedChanges, login: string): void {
  book.asked(entry(login));
  book.created({ as: login, password: `pw-${login}`, values: {}, derived: {} }, `digest-${login}`, "tag");
  changes.applied(login);
}

void describe("finishing the backend's changes", () => {
  void it("nothing changed: afterChanges is not called", async () => {
    let calls = 0;
    const { changes } = setup(async () => {
      calls++;
    });
    await changes.finish();
    assert.equal(calls, 0);
  });

  void it("called once for what changed, then not again until something else does", async () => {
    let calls = 0;
    const { book, changes } = setup(async () => {
      calls++;
    });
    apply(book, changes, "a1");
    apply(book, changes, "a2");
    await changes.finish();
    await changes.finish();
    assert.equal(calls, 1);
    changes.changed();
    await changes.finish();
    assert.equal(calls, 2, "a retirement or deletion is a change too");
  });

  void it("when it fails, what was applied since is applied again and it is asked again", async () => {
    let fail = true;
    let calls = 0;
    const { book, changes, warnings } = setup(async () => {
      calls++;
      if (fail) throw new Error("backend busy");
    });
    apply(book, changes, "a1");
    await changes.finish();
    assert.equal(book.get("a1")?.applied, undefined, "taken as not applied");
    assert.ok(book.unsettled().includes("a1"), "the next pass looks at it");
    assert.match(warnings[0] ?? "", /backend busy.*the 1 consumer\(s\) applied since are applied again/);
    fail = false;
    await changes.finish();
    assert.equal(calls, 2, "still unsaved, so asked again");
    await changes.finish();
    assert.equal(calls, 2);
  });
});
