// `mesh check --fleet` and `mesh plan` refuse a fleet where two consumers of one provider ask for the
// same database, naming both modules and the field, before anything is applied.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { meshInProcess } from "./run-mesh.ts";

const repo = join(import.meta.dirname, "..", "..", "..");

describe("two consumers asking one provider for the same database", () => {
  let dir: string;
  let fleet: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-unique-"));
    for (const name of ["notes", "wiki"]) {
      await mkdir(join(dir, name));
      await writeFile(
        join(dir, name, "module.json"),
        JSON.stringify({ name, needs: { "postgres-database": { values: { name: "shared" } } } }),
      );
    }
    fleet = join(dir, "mesh.yaml");
    await writeFile(
      fleet,
      `nodes:
  node-a: {}
modules:
  postgres: { manifest: ${JSON.stringify(join(repo, "providers", "postgres", "module.json"))}, node: node-a, admin: { env: MESH_POSTGRES_URL } }
  notes: { manifest: ./notes/module.json, node: node-a }
  wiki: { manifest: ./wiki/module.json, node: node-a }
`,
    );
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("mesh check --fleet exits 1 and names both modules and the field", async () => {
    const run = await meshInProcess(["check", "--fleet", fleet]);
    assert.equal(run.code, 1, run.stdout + run.stderr);
    assert.match(
      run.stdout,
      /wiki\/module\.json:1: error: needs\.postgres-database\.values\.name asks postgres for the postgres-database name "shared" .*which notes has already/,
    );
    assert.match(run.stdout, /fix: give wiki or notes another name/);
  });

  it("mesh plan refuses the fleet file with exit 2, saying the same", async () => {
    const run = await meshInProcess(["plan", fleet, "--empty"]);
    assert.equal(run.code, 2, run.stdout + run.stderr);
    assert.match(run.stderr, /is refused/);
    assert.match(
      run.stderr,
      /needs\.postgres-database\.values\.name asks postgres for the postgres-database name "shared"/,
    );
    assert.match(run.stderr, /which notes has already/);
  });
});
