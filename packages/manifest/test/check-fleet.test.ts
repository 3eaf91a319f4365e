import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  checkFleet,
  derivePlan,
  formatProblem,
  loadFleet,
  loadFleetManifests,
  type Problem,
} from "@mesh/manifest";
import { FleetCheckError } from "../src/check-fleet.ts";
import { type ProblemCode } from "../src/problem.ts";
import { consumer, FLEET_FILE, fleetOf, POSTGRES, REDIS } from "./fixtures.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));

function problemsOf(yaml: string, manifests: Record<string, object>): Problem[] {
  const { fleet, manifests: parsed } = fleetOf(yaml, manifests);
  const problems = checkFleet(fleet, parsed);
  for (const p of problems) {
    assert.ok(p.fix.length > 0, `no fix: ${formatProblem(p)}`);
    assert.ok(p.line !== undefined, `no line: ${formatProblem(p)}`);
  }
  if (problems.length > 0) {
    assert.throws(
      () => derivePlan(fleet, parsed),
      FleetCheckError,
      "a plan was derived from a fleet with problems",
    );
  }
  return problems;
}

function only(problems: Problem[], code: ProblemCode): Problem {
  assert.deepEqual(
    problems.map((p) => p.code),
    [code],
    problems.map(formatProblem).join("\n"),
  );
  return problems[0] as Problem;
}

describe("checkFleet", () => {
  it("refuses a provider with no admin:, naming its line and both ways to give one", () => {
    const p = only(
      problemsOf("nodes: { a: {} }\nmodules:\n  postgres:\n    manifest: ./p.json\n    node: a\n", {
        postgres: POSTGRES,
      }),
      "admin-missing",
    );
    assert.equal(p.line, 3);
    assert.equal(p.field, "modules.postgres");
    assert.match(p.message, /provides postgres-database and has no admin/);
    assert.match(p.fix, /admin: \{ env: MESH_POSTGRES_URL \}/);
    assert.match(p.fix, /admin: \{ file: /);
    assert.match(p.fix, /"adminUrl": false/);
  });

  it("takes a provider with no admin: when its manifest says it takes no admin URL", () => {
    const problems = problemsOf("nodes: { a: {} }\nmodules:\n  postgres: { manifest: ./p.json, node: a }\n", {
      postgres: { ...POSTGRES, adminUrl: false },
    });
    assert.deepEqual(problems.map(formatProblem), []);
  });

  it("finds nothing wrong with the example fleet", async () => {
    const fleet = await loadFleet(`${root}examples/fleet/mesh.yaml`);
    const manifests = await loadFleetManifests(fleet);
    assert.deepEqual(checkFleet(fleet, manifests).map(formatProblem), []);
    const plan = derivePlan(fleet, manifests);
    const logins = plan.instances.flatMap((i) => i.consumers.map((c) => `${c.provider}: ${c.login}`));
    assert.deepEqual(logins, [
      "mariadb: mysqld_exporter_mysql",
      "oidc: api_client_oidc",
      "postgres: notes_postgres",
      "postgres: postgres_exporter_postgres",
      "redis: counter_redis",
      "redis: redis_exporter_redis",
      "s3: files_s3",
    ]);
  });

  it("says a module is on a node the fleet does not have, and lists the nodes", () => {
    const p = only(
      problemsOf("nodes: { node-1: {} }\nmodules:\n  notes:\n    manifest: ./n.json\n    node: node-9\n", {
        notes: consumer("notes"),
      }),
      "unknown-node",
    );
    assert.equal(p.field, "modules.notes.node");
    assert.equal(p.file, FLEET_FILE);
    assert.equal(p.line, 5);
    assert.match(p.message, /"node-9".*node-1/);
    assert.match(p.fix, /add node-9 under nodes:/);
  });

  it("says the fleet gives values for an interface the module does not need", () => {
    const yaml = `nodes: { n: {} }
modules:
  postgres: { manifest: ./p.json, node: n, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: n
    needs:
      postgres-database: { values: { name: notes } }
      postgres-databse: { values: { name: notes } }
`;
    const p = only(
      problemsOf(yaml, { postgres: POSTGRES, notes: consumer("notes", { "postgres-database": {} }) }),
      "unknown-interface",
    );
    assert.equal(p.field, "modules.notes.needs.postgres-databse");
    assert.equal(p.line, 9);
    assert.match(p.message, /needs postgres-database/);
  });

  it("says a rotation period for an interface the module does not need, with its line", () => {
    const yaml = `nodes: { n: {} }
modules:
  postgres: { manifest: ./p.json, node: n, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: n
    rotate:
      postgres-databse: { every: 7d }
`;
    const p = only(
      problemsOf(yaml, { postgres: POSTGRES, notes: consumer("notes", { "postgres-database": {} }) }),
      "unknown-interface",
    );
    assert.equal(p.field, "modules.notes.rotate.postgres-databse");
    assert.equal(p.line, 8);
    assert.match(p.message, /no password to rotate.*needs postgres-database/);
  });

  it("says a need nobody in the fleet provides, naming the module and the interface", () => {
    const p = only(
      problemsOf("nodes: { n: {} }\nmodules:\n  notes: { manifest: ./n.json, node: n }\n", {
        notes: consumer("notes", { "s3-bucket": {} }),
      }),
      "no-provider",
    );
    assert.equal(p.field, "modules.notes");
    assert.equal(p.line, 3);
    assert.match(p.message, /needs s3-bucket.*no module of this fleet provides it/);
    assert.match(p.fix, /add a module that provides s3-bucket/);
  });

  it("refuses two providers of one interface on one node", () => {
    const yaml =
      "nodes: { n: {} }\nmodules:\n  pg-a: { manifest: ./p.json, node: n, admin: { env: MESH_ADMIN } }\n  pg-b: { manifest: ./p.json, node: n, admin: { env: MESH_ADMIN } }\n";
    const p = only(problemsOf(yaml, { "pg-a": POSTGRES, "pg-b": POSTGRES }), "two-providers-on-node");
    assert.equal(p.field, "modules.pg-b.node");
    assert.equal(p.line, 4);
    assert.match(p.message, /second provider of postgres-database on node n \(pg-a/);
  });

  it("serves a consumer from the provider on its own node before any other", () => {
    const yaml = `nodes: { a: {}, b: {} }
modules:
  pg-a: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  pg-b: { manifest: ./p.json, node: b, admin: { env: MESH_ADMIN } }
  notes: { manifest: ./n.json, node: b }
`;
    const { fleet, manifests } = fleetOf(yaml, {
      "pg-a": POSTGRES,
      "pg-b": POSTGRES,
      notes: consumer("notes", { "postgres-database": {} }),
    });
    assert.deepEqual(checkFleet(fleet, manifests), []);
    const served = derivePlan(fleet, manifests).instances.find((i) => i.consumers.length > 0);
    assert.equal(served?.provider, "pg-b");
  });

  it("serves a consumer from the only provider in the fleet, on another node", () => {
    const yaml =
      "nodes: { a: {}, b: {} }\nmodules:\n  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }\n  notes: { manifest: ./n.json, node: b }\n";
    const { fleet, manifests } = fleetOf(yaml, {
      postgres: POSTGRES,
      notes: consumer("notes", { "postgres-database": {} }),
    });
    const entry = derivePlan(fleet, manifests).instances[0]?.consumers[0];
    assert.equal(entry?.providerNode, "a");
    assert.equal(entry?.consumerNode, "b");
  });

  it("asks the operator to choose when several nodes provide a need and none is the consumer's", () => {
    const yaml = `nodes: { a: {}, b: {}, c: {} }
modules:
  pg-a: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  pg-b: { manifest: ./p.json, node: b, admin: { env: MESH_ADMIN } }
  notes: { manifest: ./n.json, node: c }
`;
    const p = only(
      problemsOf(yaml, {
        "pg-a": POSTGRES,
        "pg-b": POSTGRES,
        notes: consumer("notes", { "postgres-database": {} }),
      }),
      "ambiguous-provider",
    );
    assert.equal(p.field, "modules.notes");
    assert.match(p.message, /pg-a \(on a\) and pg-b \(on b\)/);
    assert.match(p.fix, /provider: pg-a/);
  });

  it("serves a consumer from the provider the fleet names", () => {
    const yaml = `nodes: { a: {}, b: {}, c: {} }
modules:
  pg-a: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  pg-b: { manifest: ./p.json, node: b, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs: { postgres-database: { provider: pg-b } }
`;
    const { fleet, manifests } = fleetOf(yaml, {
      "pg-a": POSTGRES,
      "pg-b": POSTGRES,
      notes: consumer("notes", { "postgres-database": {} }),
    });
    const served = derivePlan(fleet, manifests).instances.find((i) => i.consumers.length > 0);
    assert.equal(served?.provider, "pg-b");
  });

  it("refuses a named provider that is not in the fleet or does not provide the interface", () => {
    const yaml = (provider: string) => `nodes: { a: {} }
modules:
  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  redis: { manifest: ./r.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs: { postgres-database: { provider: ${provider} } }
`;
    const manifests = {
      postgres: POSTGRES,
      redis: REDIS,
      notes: consumer("notes", { "postgres-database": {} }),
    };
    const missing = only(problemsOf(yaml("pg-x"), manifests), "wrong-provider");
    assert.equal(missing.field, "modules.notes.needs.postgres-database.provider");
    assert.match(missing.fix, /name one of postgres/);
    const wrong = only(problemsOf(yaml("redis"), manifests), "wrong-provider");
    assert.match(wrong.message, /redis, which does not provide postgres-database/);
  });

  it("says a value from the fleet file does not fit the provider's spec, at its line", () => {
    const yaml = `nodes: { a: {} }
modules:
  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs:
      postgres-database:
        values:
          name: 5
`;
    const p = only(
      problemsOf(yaml, { postgres: POSTGRES, notes: consumer("notes", { "postgres-database": {} }) }),
      "bad-value",
    );
    assert.equal(p.field, "modules.notes.needs.postgres-database.values.name");
    assert.equal(p.line, 10);
    assert.equal(
      formatProblem(p),
      `${FLEET_FILE}:10: modules.notes.needs.postgres-database.values.name must be a string, not 5 ` +
        `(name: the consumer's database name); fix the value`,
    );
  });

  it("says a value from the manifest does not fit, naming the manifest file and its line", () => {
    const yaml =
      "nodes: { a: {} }\nmodules:\n  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }\n  notes: { manifest: ./n.json, node: a }\n";
    const p = only(
      problemsOf(yaml, {
        postgres: POSTGRES,
        notes: consumer("notes", { "postgres-database": { name: "Notes DB" } }),
      }),
      "bad-value",
    );
    assert.equal(p.file, "/srv/mesh/notes/module.json");
    assert.equal(p.field, "needs.postgres-database.values.name");
    assert.equal(p.line, 6);
    assert.match(p.message, /must match/);
    assert.match(p.fix, /override it under modules.notes.needs.postgres-database.values/);
  });

  it("lets the fleet file override a manifest's value, and checks the result", () => {
    const yaml = `nodes: { a: {} }
modules:
  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs: { postgres-database: { values: { name: notes } } }
`;
    const { fleet, manifests } = fleetOf(yaml, {
      postgres: POSTGRES,
      notes: consumer("notes", { "postgres-database": { name: "Not Valid", extensions: ["citext"] } }),
    });
    assert.deepEqual(checkFleet(fleet, manifests), []);
    const entry = derivePlan(fleet, manifests).instances[0]?.consumers[0];
    assert.deepEqual(entry?.values, { name: "notes", extensions: ["citext"] });
  });

  it("reports unknown values, list items not allowed, and required values missing", () => {
    const strict = {
      name: "store",
      provides: {
        kv: {
          receives: "/run/kv.json",
          spec: { size: { type: "number", required: true }, tags: { type: "string[]", enum: ["a"] } },
        },
      },
    };
    const yaml = `nodes: { a: {} }
modules:
  store: { manifest: ./s.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs:
      kv:
        values:
          tags: [a, b]
          colour: red
`;
    const problems = problemsOf(yaml, { store: strict, notes: consumer("notes", { kv: {} }) });
    assert.deepEqual(
      problems.map((p) => [p.code, p.field, p.line]),
      [
        ["bad-value", "modules.notes.needs.kv.values.tags[1]", 10],
        ["bad-value", "modules.notes.needs.kv.values.colour", 11],
        ["bad-value", "modules.notes.needs.kv.values.size", 9],
      ],
    );
    assert.match(problems[1]?.message ?? "", /takes size, tags/);
    assert.match(problems[2]?.message ?? "", /is required/);
  });

  it("reports a value named __proto__ as a value the interface does not take, never as a prototype", () => {
    const yaml = `nodes: { a: {} }
modules:
  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: a
    needs: { postgres-database: { values: { __proto__: { name: 5 } } } }
`;
    const p = only(
      problemsOf(yaml, { postgres: POSTGRES, notes: consumer("notes", { "postgres-database": {} }) }),
      "bad-value",
    );
    assert.equal(p.field, "modules.notes.needs.postgres-database.values.__proto__");
    assert.match(p.message, /not a value this interface takes/);
  });

  it("says a value the provider's URL needs has no value and no default", () => {
    const noDefault = structuredClone(POSTGRES);
    delete (noDefault.provides["postgres-database"].spec.name as { default?: string }).default;
    const yaml =
      "nodes: { a: {} }\nmodules:\n  postgres: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }\n  notes: { manifest: ./n.json, node: a }\n";
    const p = only(
      problemsOf(yaml, { postgres: noDefault, notes: consumer("notes", { "postgres-database": {} }) }),
      "endpoint-unresolved",
    );
    assert.equal(p.field, "modules.notes.needs.postgres-database.values.name");
  });

  it("reports two needs that would derive one login", () => {
    const twoPostgres = {
      name: "pg",
      provides: {
        "postgres-database": { receives: "/run/a.json" },
        "postgres-replica": { receives: "/run/b.json" },
      },
    };
    const yaml =
      "nodes: { a: {} }\nmodules:\n  pg: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }\n  notes: { manifest: ./n.json, node: a }\n";
    const p = only(
      problemsOf(yaml, {
        pg: twoPostgres,
        notes: consumer("notes", { "postgres-database": {}, "postgres-replica": {} }),
      }),
      "login-collision",
    );
    assert.match(p.message, /as notes_postgres, the login notes has for postgres-database/);
  });

  it("says a module whose manifest was not read has no manifest", () => {
    const p = only(
      problemsOf("nodes: { a: {} }\nmodules:\n  notes: { manifest: ./n.json, node: a }\n", {}),
      "manifest-missing",
    );
    assert.equal(p.field, "modules.notes.manifest");
  });

  it("reports every problem of a fleet at once, not only the first", () => {
    const yaml = `nodes: { a: {} }
modules:
  pg-a: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  pg-b: { manifest: ./p.json, node: a, admin: { env: MESH_ADMIN } }
  notes:
    manifest: ./n.json
    node: z
    needs: { s3-bucket: {} }
  blog: { manifest: ./b.json, node: a }
`;
    const problems = problemsOf(yaml, {
      "pg-a": POSTGRES,
      "pg-b": POSTGRES,
      notes: consumer("notes", { "redis-namespace": {} }),
      blog: consumer("blog", { "postgres-database": { name: 7 } }),
    });
    assert.deepEqual(
      problems.map((p) => p.code),
      ["unknown-node", "unknown-interface", "two-providers-on-node", "no-provider"],
    );
  });
});
