// The dashboard's browser script cannot import the controller's types, so this holds its list of
// consumer states to the one definition (ConsumerViewState): the type check below fails when a state
// is added there, the test when the page's list differs.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import type { ConsumerViewState } from "../src/dashboard/dashboard-state.ts";

const VIEW_STATES = [
  "active",
  "failing",
  "unasked",
  "awaiting-approval",
  "retired",
  "deleted",
  "unknown",
] as const satisfies readonly ConsumerViewState[];
// Every ConsumerViewState is in the list: `tsc` refuses this line when one is missing.
const everyState: [Exclude<ConsumerViewState, (typeof VIEW_STATES)[number]>] extends [never] ? true : false =
  true;

/** The keys of the page's `STATES` table, as written in dashboard.js. */
async function pageStates(): Promise<string[]> {
  const script = await readFile(new URL("../static/dashboard.js", import.meta.url), "utf8");
  const table = /const STATES = \{([^}]*)\}/.exec(script)?.[1];
  assert.ok(table !== undefined, "dashboard.js has its STATES table");
  return [...table.matchAll(/^\s*"?([a-z-]+)"?\s*:/gm)].map((m) => m[1] ?? "");
}

void describe("the dashboard's consumer states", () => {
  void it("are exactly the controller's ConsumerViewState, each with its words", async () => {
    assert.equal(everyState, true);
    assert.deepEqual((await pageStates()).sort(), [...VIEW_STATES].sort());
  });
});
