// What the controller makes of agents of other releases: a 0.1.0 agent's report (no release, no
// protocol) is protocol 1 and works; one protocol newer works; two apart is shown incompatible in
// mesh status, naming both versions and what to upgrade.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseReport, type NodeReport } from "@mesh/controller";
import { controllerStatus } from "../src/controller-status.ts";
import { MESH_RELEASE, PROTOCOL_VERSION, STATE_FORMAT } from "@mesh/manifest";

const HEARD = new Date("2026-12-02T08:00:00Z");

const reportOf = (node: string, fields: Record<string, unknown>): NodeReport => {
  const body = {
    node,
    generation: 4,
    at: HEARD.toISOString(),
    modules: [],
    files: { written: 0, unchanged: 0 },
    moduleKeys: {},
    ...fields,
  };
  const parsed = parseReport(node, new TextEncoder().encode(JSON.stringify(body)), HEARD);
  assert.ok(parsed, `${node}'s report is read`);
  return parsed;
};

const statusOf = (reports: NodeReport[]) =>
  controllerStatus({
    plan: { instances: [] },
    fleetFile: "/srv/mesh.yaml",
    readAt: HEARD.toISOString(),
    refused: null,
    fleetNodes: reports.map((r) => r.node),
    enrolled: new Set(reports.map((r) => r.node)),
    reports: new Map(reports.map((r) => [r.node, r])),
  });

describe("the controller and agents of other releases", () => {
  it("takes a 0.1.0 agent's report (no release, no protocol) as protocol 1, which works with it", () => {
    const status = statusOf([reportOf("old", {})]);
    assert.deepEqual(status.nodes[0]?.version, { release: null, protocol: 1, compatible: true });
    assert.equal(status.nodes[0]?.generation, 4, "the rest of the old report is read as before");
  });

  it("shows its own release, protocol and state format, and a current agent's", () => {
    const status = statusOf([reportOf("now", { release: MESH_RELEASE, protocol: PROTOCOL_VERSION })]);
    assert.deepEqual(status.nodes[0]?.version, {
      release: MESH_RELEASE,
      protocol: PROTOCOL_VERSION,
      compatible: true,
    });
    assert.deepEqual(status.mesh, {
      release: MESH_RELEASE,
      protocol: PROTOCOL_VERSION,
      stateFormat: STATE_FORMAT,
    });
  });

  it("works with an agent one protocol newer, and names one two apart with both versions", () => {
    const status = statusOf([
      reportOf("newer", { release: "9.0.0", protocol: PROTOCOL_VERSION + 1 }),
      reportOf("far", { release: "9.1.0", protocol: PROTOCOL_VERSION + 2 }),
    ]);
    const byName = new Map(status.nodes.map((n) => [n.name, n.version]));
    assert.equal(byName.get("newer")?.compatible, true);
    const far = byName.get("far");
    assert.equal(far?.compatible, false);
    assert.match(far?.problem ?? "", new RegExp(`mesh 9\\.1\\.0, protocol ${PROTOCOL_VERSION + 2}`));
    assert.match(
      far?.problem ?? "",
      new RegExp(
        `this controller \\(mesh ${MESH_RELEASE.replace(/\./g, "\\.")}, protocol ${PROTOCOL_VERSION}\\)`,
      ),
    );
    assert.match(far?.problem ?? "", /upgrade the controller/);
  });

  it("reads nothing but a version out of what a report says of its release", () => {
    const status = statusOf([reportOf("odd", { release: "0.2.0; rm -rf /", protocol: "2" })]);
    assert.deepEqual(status.nodes[0]?.version, { release: null, protocol: 1, compatible: true });
  });
});
