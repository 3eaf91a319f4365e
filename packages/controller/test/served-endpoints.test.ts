// Where consumers are sent, from where each provider says it serves: `mesh status` names both
// addresses where the fleet's endpoint: disagrees, and an endpoint the fleet left to the manifest is
// replaced by the one the provider serves at (only a provider the fleet places on the reporting node).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseReport, type FleetPlan, type NodeReport } from "@mesh/controller";
import { controllerStatus } from "../src/controller-status.ts";
import type { BusState } from "@mesh/bus";
import type { Endpoint, Plan } from "@mesh/manifest";
import { ServedEndpoints } from "../src/served-endpoints.ts";

const HEARD = new Date("2026-11-30T12:00:10.000Z");

const planWith = (endpoint: Endpoint): Plan => ({
  instances: [
    {
      provider: "postgres",
      node: "node-a",
      interface: "postgres-database",
      endpoint,
      consumers: [
        {
          consumer: "notes",
          consumerNode: "node-b",
          interface: "postgres-database",
          login: "notes_postgres",
          values: {},
          derived: {},
          provider: "postgres",
          providerNode: "node-a",
        },
      ],
    },
  ],
});
const DEFAULTED: Endpoint = {
  scheme: "postgresql",
  host: "10.0.0.1",
  port: 5432,
  path: "/{name}",
  query: {},
  defaulted: true,
};
const WRITTEN: Endpoint = { scheme: "postgresql", host: "127.0.0.1", port: 6000, path: "/{name}", query: {} };

const reportOf = (node: string, serves: unknown): NodeReport => {
  const provider = {
    module: "postgres",
    answered: true,
    problem: null,
    askedAt: "2026-11-30T12:00:09.000Z",
    lastPassAt: null,
    contributionsProblem: null,
    counts: { active: 1 },
    failing: [],
    waiting: null,
    serves,
  };
  const body = { node, generation: 3, modules: [], providers: [provider] };
  const parsed = parseReport(node, new TextEncoder().encode(JSON.stringify(body)), HEARD);
  assert.ok(parsed);
  return parsed;
};

const statusOf = (plan: Plan, report: NodeReport) =>
  controllerStatus({
    plan,
    fleetFile: "/f/mesh.yaml",
    readAt: HEARD.toISOString(),
    refused: null,
    fleetNodes: ["node-a", "node-b"],
    enrolled: new Set(["node-a", "node-b"]),
    reports: new Map([[report.node, report]]),
  });

const fleetOf = (plan: Plan): FleetPlan => ({
  fleetFile: "/f/mesh.yaml",
  plan,
  nodes: ["node-a", "node-b"],
  modules: [
    { name: "postgres", node: "node-a", manifest: {} as never },
    { name: "notes", node: "node-b", manifest: {} as never },
  ],
  readAt: HEARD.toISOString(),
});

/** A desired-state bucket in memory: what `ServedEndpoints` keeps and reads. */
function memoryState(): BusState<unknown> {
  const kept = new Map<string, unknown>();
  const state: Pick<BusState<unknown>, "get" | "put"> = {
    get: (key) => Promise.resolve(kept.get(key)),
    put: (key, value) => {
      kept.set(key, value);
      return Promise.resolve(1);
    },
  };
  return state as BusState<unknown>;
}
const quiet = { info: () => {}, warn: () => {}, error: () => {} } as never;

describe("where consumers are sent", () => {
  it("names both addresses in the status where the fleet's endpoint: and the provider disagree", () => {
    const status = statusOf(planWith(WRITTEN), reportOf("node-a", { host: "127.0.0.1", port: 5433 }));
    assert.deepEqual(status.providers[0]?.endpoints, [
      {
        interface: "postgres-database",
        given: "127.0.0.1:6000",
        from: "fleet",
        serves: "127.0.0.1:5433",
        disagrees: true,
      },
    ]);
    assert.equal(status.providers[0]?.serves, "127.0.0.1:5433");
  });

  it("says consumers of a provider with no endpoint: are sent where it serves, on its node's address", () => {
    const status = statusOf(planWith(DEFAULTED), reportOf("node-a", { host: "127.0.0.1", port: 5433 }));
    assert.deepEqual(status.providers[0]?.endpoints, [
      {
        interface: "postgres-database",
        given: "10.0.0.1:5433",
        from: "provider",
        serves: "127.0.0.1:5433",
        disagrees: false,
      },
    ]);
  });

  it("believes only the provider's own node, keeps what it learnt, and a new controller delivers it before any report", async () => {
    const fleet = fleetOf(planWith(DEFAULTED));
    const desired = memoryState();
    const served = new ServedEndpoints(desired, quiet);
    // node-b does not run postgres: what it says of it is not believed.
    assert.deepEqual(served.learn(reportOf("node-b", { host: "127.0.0.1", port: 7777 }), fleet), []);
    assert.deepEqual(served.learn(reportOf("node-a", { host: "127.0.0.1", port: 5433 }), fleet), [
      "postgres",
    ]);
    assert.deepEqual(served.learn(reportOf("node-a", { host: "127.0.0.1", port: 5433 }), fleet), []);
    assert.equal((await served.plan(fleet)).instances[0]?.endpoint?.port, 5433);
    assert.deepEqual(ServedEndpoints.consumerNodes(fleet, ["postgres"]), ["node-b"]);
    await served.keep(["postgres"]);
    const next = new ServedEndpoints(desired, quiet);
    const endpoint = (await next.plan(fleet)).instances[0]?.endpoint;
    assert.equal(endpoint?.port, 5433);
    assert.equal(endpoint?.host, "10.0.0.1");
    assert.equal(endpoint?.defaulted, undefined);
  });
});
