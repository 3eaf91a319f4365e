// `mesh check` in this process (a spawned mesh costs seconds to start), with absolute paths where a
// shell would give relative ones; once through the real `mesh`, run in a directory of modules.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { MESH_BIN, cleanEnv, meshInProcess } from "./run-mesh.ts";

const repo = join(import.meta.dirname, "..", "..", "..");
const fixtures = join(repo, "packages", "manifest", "test", "fixtures", "check");
const FLEET = join(repo, "examples", "fleet", "mesh.yaml");

const check = (args: readonly string[]) => meshInProcess(["check", ...args]);

/** `mesh check` run in `dir`, which is where it looks for modules when given none. */
async function checkIn(dir: string, args: readonly string[] = []) {
  const before = process.cwd();
  process.chdir(dir);
  try {
    return await check(args);
  } finally {
    process.chdir(before);
  }
}

describe("mesh check", () => {
  it("exits 0 for the example fleet, checked from its fleet file", async () => {
    const run = await check(["--fleet", FLEET]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /14 modules checked: 0 errors, 0 warnings/);
  });

  it("exits 0 for a clean set of module directories", async () => {
    const run = await check([join(fixtures, "clean", "shop"), join(fixtures, "clean", "billing")]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
  });

  it("the real mesh, run in a directory of modules, exits 1 and prints each finding as file:line: error: message; fix:", () => {
    const run = spawnSync(process.execPath, [MESH_BIN, "check"], {
      cwd: join(fixtures, "mistakes"),
      env: cleanEnv(),
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.equal(run.status, 1, run.stdout + run.stderr);
    const lines = run.stdout.trim().split("\n");
    assert.equal(lines.length, 6);
    for (const line of lines.slice(0, 5)) assert.match(line, /^[^:]+:\d+: error: .+; fix: .+/);
    assert.match(run.stdout, /^shop\/src\/main\.ts:12: error: emits "order\.shipped"/m);
    assert.equal(lines[5], "2 modules checked: 5 errors, 0 warnings");
  });

  it("prints the findings as JSON with --json, keeping the exit code", async () => {
    const mistakes = join(fixtures, "mistakes");
    const run = await check(["--json", join(mistakes, "shop"), join(mistakes, "billing")]);
    assert.equal(run.code, 1, run.stderr);
    const report = JSON.parse(run.stdout) as { errors: number; findings: { kind: string; file: string }[] };
    assert.equal(report.errors, 5);
    assert.deepEqual(report.findings.map((f) => f.kind).sort(), [
      "foreign-event",
      "routing-key-name",
      "subject-mismatch",
      "undeclared-emit",
      "unheard-subscription",
    ]);
  });

  it("exits 2 on usage errors: a fleet and directories both, a missing fleet file, nothing to check", async () => {
    assert.equal((await check(["--fleet", FLEET, join(repo, "examples", "fleet", "notes")])).code, 2);
    const missing = await check(["--fleet", join(repo, "no", "such", "mesh.yaml")]);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /does not exist/);
    assert.equal((await checkIn(join(fixtures, "clean", "shop"))).code, 2);
    assert.equal((await check(["--no-such-flag"])).code, 2);
  });
});
