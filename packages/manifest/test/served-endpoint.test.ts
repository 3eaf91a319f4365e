import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { credentialsFor, derivePlan } from "@mesh/manifest";
import { servedEndpointOf, withServedEndpoints } from "../src/served-endpoint.ts";
import { statusReportSchema } from "../src/tool-answers.ts";
import { consumer, fleetOf, POSTGRES } from "./fixtures.ts";

function planOf(postgresEntry: string) {
  const { fleet, manifests } = fleetOf(
    `nodes:
  db: { address: db.internal }
  app: {}
modules:
  postgres: ${postgresEntry}
  notes:
    manifest: ./n.json
    node: app
    needs: { postgres-database: { values: { name: notes } } }
  local: { manifest: ./l.json, node: db }
`,
    {
      postgres: POSTGRES,
      notes: consumer("notes", { "postgres-database": {} }),
      local: consumer("local", { "postgres-database": {} }),
    },
  );
  return derivePlan(fleet, manifests);
}

describe("where a provider serves", () => {
  it("gives consumers of a provider with no endpoint: the port it reports, on its node's address when it serves on the loopback", () => {
    const plan = planOf("{ manifest: ./p.json, node: db, admin: { env: MESH_ADMIN } }");
    assert.equal(plan.instances[0]?.endpoint?.defaulted, true);
    const served = withServedEndpoints(plan, new Map([["postgres", { host: "127.0.0.1", port: 54_321 }]]));
    const url = (c: string) => credentialsFor(served, c, "/var/lib/mesh")[0]?.contents.url;
    assert.equal(url("notes"), "postgresql://notes_postgres@db.internal:54321/notes");
    // The flag is the plan's own: no credential file carries it.
    assert.equal(
      JSON.stringify(credentialsFor(served, "notes", "/var/lib/mesh")).includes("defaulted"),
      false,
    );
  });

  it("gives consumers the host the provider reports when it is not the loopback", () => {
    const plan = planOf("{ manifest: ./p.json, node: db, admin: { env: MESH_ADMIN } }");
    const served = withServedEndpoints(plan, new Map([["postgres", { host: "pg.example.net", port: 6432 }]]));
    assert.equal(
      credentialsFor(served, "notes", "/var/lib/mesh")[0]?.contents.url,
      "postgresql://notes_postgres@pg.example.net:6432/notes",
    );
  });

  it("keeps the fleet's endpoint: as written, whatever the provider reports", () => {
    const plan = planOf(
      "{ manifest: ./p.json, node: db, admin: { env: MESH_ADMIN }, endpoint: { host: pg.public, port: 5000 } }",
    );
    assert.equal(plan.instances[0]?.endpoint?.defaulted, undefined);
    const served = withServedEndpoints(plan, new Map([["postgres", { host: "127.0.0.1", port: 54_321 }]]));
    assert.equal(served, plan);
    assert.equal(
      credentialsFor(served, "notes", "/var/lib/mesh")[0]?.contents.url,
      "postgresql://notes_postgres@pg.public:5000/notes",
    );
  });

  it("keeps the manifest's default until the provider has said where it serves", () => {
    const plan = planOf("{ manifest: ./p.json, node: db, admin: { env: MESH_ADMIN } }");
    assert.equal(withServedEndpoints(plan, new Map()), plan);
    assert.equal(
      credentialsFor(plan, "notes", "/var/lib/mesh")[0]?.contents.url,
      "postgresql://notes_postgres@db.internal:5432/notes",
    );
  });

  it("refuses at the boundary a served address that is not a host and a port", () => {
    assert.deepEqual(servedEndpointOf({ host: "127.0.0.1", port: 5433 }), { host: "127.0.0.1", port: 5433 });
    assert.deepEqual(servedEndpointOf({ host: "::1", port: 5433, extra: "dropped" }), {
      host: "::1",
      port: 5433,
    });
    for (const bad of [
      { host: "evil@host/path", port: 5432 },
      { host: "h", port: 0 },
      { host: "h", port: 70_000 },
      { host: "h", port: 5432.5 },
      { host: "/run/postgresql", port: 5432 },
      { host: "", port: 5432 },
      { host: "a".repeat(254), port: 5432 },
      { host: 7, port: 5432 },
      "127.0.0.1:5432",
      null,
    ]) {
      assert.equal(servedEndpointOf(bad), undefined, JSON.stringify(bad));
    }
    const status = {
      interface: "postgres-database",
      instance: "postgres",
      receives: "/r.json",
      lastPassAt: null,
      contributionsProblem: null,
      consumers: [],
    };
    assert.equal(statusReportSchema.safeParse({ ...status, serves: { host: "h", port: 1 } }).success, true);
    assert.equal(
      statusReportSchema.safeParse({ ...status, serves: { host: "h h", port: 1 } }).success,
      false,
    );
  });
});
