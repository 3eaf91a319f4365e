// Two consumers of one provider may not ask for one resource: a spec value marked `unique` (the
// database of postgres and mariadb) is compared as each consumer would have it, defaults resolved,
// and a fleet where two have the same is refused by the check and by the plan, naming both.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { checkFleet, derivePlan, formatProblem, type Problem } from "@mesh/manifest";
import { FleetCheckError } from "../src/check-fleet.ts";
import { consumer, fleetOf, POSTGRES } from "./fixtures.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));

const UNIQUE_POSTGRES = structuredClone(POSTGRES);
(UNIQUE_POSTGRES.provides["postgres-database"].spec.name as Record<string, unknown>)["unique"] = true;

const FLEET = `nodes: { a: {}, b: {} }
modules:
  postgres: { manifest: ./p.json, node: a }
  notes: { manifest: ./n.json, node: a }
  wiki:
    manifest: ./w.json
    node: b
`;

function collisions(yaml: string, manifests: Record<string, object>): Problem[] {
  const { fleet, manifests: parsed } = fleetOf(yaml, manifests);
  const problems = checkFleet(fleet, parsed);
  if (problems.length > 0) assert.throws(() => derivePlan(fleet, parsed), FleetCheckError);
  return problems.filter((p) => p.code === "resource-collision");
}

describe("a resource two consumers of one provider ask for", () => {
  it("is refused when two consumers name the same database, naming both modules and the field", () => {
    const problems = collisions(`${FLEET}    needs: { postgres-database: { values: { name: shared } } }\n`, {
      postgres: UNIQUE_POSTGRES,
      notes: consumer("notes", { "postgres-database": { name: "shared" } }),
      wiki: consumer("wiki", { "postgres-database": {} }),
    });
    assert.equal(problems.length, 1, problems.map(formatProblem).join("\n"));
    const [p] = problems;
    assert.equal(p?.field, "modules.wiki.needs.postgres-database.values.name");
    assert.match(p?.message ?? "", /asks postgres for the postgres-database name "shared"/);
    assert.match(p?.message ?? "", /which notes has already/);
    assert.match(p?.fix ?? "", /give wiki or notes another name/);
    assert.ok(p?.line !== undefined, "the line in the fleet file is named");
  });

  it("compares defaults as resolved: a name given as another consumer's login collides with its default", () => {
    const problems = collisions(FLEET, {
      postgres: UNIQUE_POSTGRES,
      notes: consumer("notes", { "postgres-database": {} }),
      wiki: consumer("wiki", { "postgres-database": { name: "notes_postgres" } }),
    });
    assert.equal(problems.length, 1, problems.map(formatProblem).join("\n"));
    assert.match(
      problems[0]?.message ?? "",
      /name "notes_postgres" \(as it asks\), which notes has already \(its default\)/,
    );
    // Said where the value is written: the consumer's own manifest.
    assert.equal(problems[0]?.file, "/srv/mesh/wiki/module.json");
    assert.equal(problems[0]?.field, "needs.postgres-database.values.name");
  });

  it("lets consumers of two different providers have the same database name", () => {
    const yaml = `nodes: { a: {}, b: {} }
modules:
  pg-a: { manifest: ./p.json, node: a }
  pg-b: { manifest: ./p.json, node: b }
  notes: { manifest: ./n.json, node: a }
  wiki: { manifest: ./w.json, node: b }
`;
    const problems = collisions(yaml, {
      "pg-a": { ...UNIQUE_POSTGRES, name: "pg-a" },
      "pg-b": { ...UNIQUE_POSTGRES, name: "pg-b" },
      notes: consumer("notes", { "postgres-database": { name: "shared" } }),
      wiki: consumer("wiki", { "postgres-database": { name: "shared" } }),
    });
    assert.deepEqual(problems, []);
  });

  it("is not compared for a value the spec does not mark unique", () => {
    const problems = collisions(FLEET, {
      postgres: POSTGRES,
      notes: consumer("notes", { "postgres-database": { name: "shared" } }),
      wiki: consumer("wiki", { "postgres-database": { name: "shared" } }),
    });
    assert.deepEqual(problems, []);
  });

  it("is marked on the database name of the postgres and mariadb providers", async () => {
    for (const [provider, iface] of [
      ["postgres", "postgres-database"],
      ["mariadb", "mysql-database"],
    ] as const) {
      const manifest = JSON.parse(await readFile(`${root}providers/${provider}/module.json`, "utf8")) as {
        provides: Record<string, { spec: Record<string, { unique?: boolean }> }>;
      };
      assert.equal(manifest.provides[iface]?.spec["name"]?.unique, true, `${provider}'s ${iface} name`);
    }
  });
});
