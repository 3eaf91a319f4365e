// Where a rotation stands, as mesh status shows it: the provider's phase from its node's report,
// else `asked` from the controller's own rotation until the provider is heard after it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { rotationOf } from "../src/controller-status.ts";
import type { NodeReport, ReportedProvider } from "../src/node-reports.ts";

const consumer = { consumer: "notes", interface: "redis-namespace", provider: "redis", login: "notes_redis" };

function reports(provider: Partial<ReportedProvider>): Map<string, NodeReport> {
  const said: ReportedProvider = {
    module: "redis",
    answered: true,
    problem: null,
    askedAt: "2026-03-01T12:00:10.000Z",
    lastPassAt: null,
    contributionsProblem: null,
    counts: { active: 1, failing: 0, unasked: 0, "awaiting-approval": 0, retired: 0 },
    failing: [],
    waiting: null,
    ...provider,
  };
  return new Map([
    [
      "node-a",
      {
        node: "node-a",
        generation: 1,
        receivedAt: "2026-03-01T12:00:11.000Z",
        modules: [],
        providers: [said],
      },
    ],
  ]);
}

describe("a rotation's phase in mesh status", () => {
  it("is the provider's own phase, with since when and when the old password goes", () => {
    const rotating = [
      {
        login: "notes_redis",
        phase: "drain" as const,
        since: "2026-03-01T12:00:05.000Z",
        until: "2026-03-01T12:02:05.000Z",
      },
    ];
    assert.deepEqual(rotationOf({ reports: reports({ rotating }) }, "node-a", consumer), {
      phase: "drain",
      since: "2026-03-01T12:00:05.000Z",
      until: "2026-03-01T12:02:05.000Z",
    });
  });

  it("is `asked` from the controller's rotation until the provider is heard after it", () => {
    const rotated = new Map([["notes redis-namespace", "2026-03-01T12:00:20.000Z"]]);
    assert.deepEqual(rotationOf({ reports: reports({}), rotated }, "node-a", consumer), {
      phase: "asked",
      since: "2026-03-01T12:00:20.000Z",
    });
    const heardAfter = reports({ askedAt: "2026-03-01T12:00:30.000Z" });
    assert.equal(rotationOf({ reports: heardAfter, rotated }, "node-a", consumer), undefined);
  });

  it("is nothing when no rotation is under way, or for another login", () => {
    assert.equal(rotationOf({ reports: reports({}) }, "node-a", consumer), undefined);
    const other = [{ login: "other_redis", phase: "add" as const, since: "x", until: "y" }];
    assert.equal(rotationOf({ reports: reports({ rotating: other }) }, "node-a", consumer), undefined);
  });
});
