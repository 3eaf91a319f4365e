// The dashboard's state names a misbehaving module (what it was asked, what was wrong, since when)
// as its node reports it, and a provider's answer the relay hands it is checked again before the
// page reads it.
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import {
  loadFleetPlan,
  parseReport,
  type DashboardSources,
  type FleetPlan,
  type ToolCall,
} from "@mesh/controller";
import { controllerStatus } from "../src/controller-status.ts";
import { type ToolReply } from "../src/tool-relay.ts";
import { DashboardView } from "../src/dashboard/dashboard-state.ts";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";

const NOW = Date.parse("2026-11-30T12:00:00.000Z");

describe("the dashboard's state of a misbehaving module", () => {
  let fleetDir: FleetDir;
  let fleet: FleetPlan;
  before(async () => {
    fleetDir = await makeFleetDir();
    fleet = await loadFleetPlan(fleetDir.fleetFile);
  });
  after(async () => {
    await rm(fleetDir.dir, { recursive: true, force: true });
  });

  const sources = (answer: (call: ToolCall) => ToolReply): DashboardSources => ({
    current: () => fleet,
    status: () => {
      const body = {
        node: "node-a",
        generation: 1,
        modules: [{ name: "postgres", state: "running", restarts: 0, log: "/x" }],
        misbehaving: [
          {
            module: "postgres",
            answer: "status",
            fault: "malformed",
            what: "consumers[0]: expected object, received null",
            since: "2026-11-30T11:58:00.000Z",
          },
        ],
      };
      const report = parseReport(
        "node-a",
        new TextEncoder().encode(JSON.stringify(body)),
        new Date(NOW - 1_000),
      );
      assert.ok(report);
      return controllerStatus({
        plan: fleet.plan,
        fleetFile: fleet.fleetFile,
        readAt: fleet.readAt,
        refused: null,
        fleetNodes: fleet.nodes,
        enrolled: new Set(["node-a", "node-b"]),
        reports: new Map([["node-a", report]]),
      });
    },
    tool: (call) => Promise.resolve(answer(call)),
    ledger: () => Promise.resolve({ ok: true, entries: [] } as never),
  });

  it("names the module, what it was asked, what was wrong and since when, and counts it", async () => {
    const view = new DashboardView(
      sources(() => ({ ok: false, code: "module-misbehaving", error: "postgres on node node-a misbehaves" })),
      { now: () => NOW },
    );
    const state = await view.state();
    const pg = state.modules.find((m) => m.name === "postgres");
    assert.deepEqual(pg?.misbehaving, [
      {
        answer: "status",
        fault: "malformed",
        what: "consumers[0]: expected object, received null",
        since: "2026-11-30T11:58:00.000Z",
      },
    ]);
    assert.deepEqual(state.modules.find((m) => m.name === "app1")?.misbehaving, []);
    assert.equal(state.misbehaving, 1);
    const provider = state.providers.find((p) => p.module === "postgres");
    assert.equal(provider?.answered, false);
    assert.match(provider?.problem ?? "", /misbehaves/);
  });

  it("shows a provider whose relayed status is not one as not answering, never throwing", async () => {
    const view = new DashboardView(
      sources(() => ({ ok: true, answer: { consumers: [null, { login: { toString: 1 } }] } })),
      { now: () => NOW },
    );
    const provider = (await view.state()).providers.find((p) => p.module === "postgres");
    assert.equal(provider?.answered, false);
    assert.match(provider?.problem ?? "", /not a provider's status/);
  });
});
