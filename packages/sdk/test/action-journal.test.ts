// A journal line read at the boundary: what the harness writes is read back as it was; anything
// else a module may put in its journal is refused with the reason, never thrown past it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JournalLineError, MAX_JOURNAL_LINE_BYTES, parseJournalLine } from "@mesh/sdk/provider";
import { MAX_JOURNAL_WHY_CHARS } from "../src/action-journal.ts";
import type { ActionEntry } from "@mesh/sdk";

const LINE: ActionEntry = {
  action: "deleted",
  login: "notes_postgres",
  interface: "postgres-database",
  who: "alice",
  at: "2026-06-01T12:00:00.000Z",
  why: "cleanup delete by alice",
  freedBytes: 8192,
};

const refusal = (line: string): string => {
  try {
    parseJournalLine(line);
  } catch (err) {
    assert.ok(err instanceof JournalLineError, String(err));
    return err.message;
  }
  assert.fail(`${line.slice(0, 80)} was read as an action`);
};

void describe("a journal line read at the boundary", () => {
  void it("reads back what the harness writes, as it was", () => {
    assert.deepEqual(parseJournalLine(JSON.stringify(LINE)), LINE);
    const { freedBytes: _, ...created } = { ...LINE, action: "created" as const, who: "provisioner" };
    assert.deepEqual(parseJournalLine(JSON.stringify(created)), created);
  });

  void it("drops what it does not know, and clips a long why", () => {
    const read = parseJournalLine(
      JSON.stringify({ ...LINE, kind: "tool", by: { mesh: true }, why: `a\nb${"w".repeat(5_000)}` }),
    );
    assert.equal("kind" in read, false);
    assert.equal("by" in read, false);
    assert.equal(read.why.length, MAX_JOURNAL_WHY_CHARS);
    assert.ok(read.why.startsWith("a b"), "a control character becomes a space");
  });

  void it("refuses a line that is not JSON, not an object, too long, or of the wrong types, saying why", () => {
    assert.equal(refusal("not json"), "it is not JSON");
    assert.equal(refusal("[1,2]"), "it is not a JSON object");
    assert.match(
      refusal(JSON.stringify({ ...LINE, why: "w".repeat(MAX_JOURNAL_LINE_BYTES) })),
      /more than the/,
    );
    assert.match(refusal(JSON.stringify({ ...LINE, action: "exploded" })), /"action" must be one of created/);
    assert.equal(refusal(JSON.stringify({ ...LINE, login: undefined })), '"login" is missing');
    assert.equal(refusal(JSON.stringify({ ...LINE, login: 5 })), '"login" must be text');
    assert.match(
      refusal(JSON.stringify({ ...LINE, who: "alice\u001b[2K" })),
      /"who" holds a control character/,
    );
    assert.match(refusal(JSON.stringify({ ...LINE, who: "a".repeat(300) })), /"who" is longer than 256/);
    assert.match(refusal(JSON.stringify({ ...LINE, at: "yesterday" })), /"at" must be an ISO 8601 time/);
    assert.match(refusal(JSON.stringify({ ...LINE, freedBytes: -1 })), /"freedBytes" must be a whole number/);
    assert.match(
      refusal(JSON.stringify({ ...LINE, freedBytes: 1.5 })),
      /"freedBytes" must be a whole number/,
    );
  });
});
