import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const repo = join(import.meta.dirname, "..", "..", "..");
const fixtures = join(repo, "packages", "manifest", "test", "fixtures", "check");

function mesh(args: readonly string[], cwd = repo): { code: number | null; out: string; err: string } {
  const run = spawnSync(
    process.execPath,
    [join(repo, "packages", "cli", "bin", "mesh.js"), "check", ...args],
    {
      cwd,
      encoding: "utf8",
      timeout: 120_000,
    },
  );
  return { code: run.status, out: run.stdout, err: run.stderr };
}

describe("mesh check", () => {
  it("exits 0 for the example fleet, checked from its fleet file", () => {
    const run = mesh(["--fleet", "examples/fleet/mesh.yaml"]);
    assert.equal(run.code, 0, run.out + run.err);
    assert.match(run.out, /5 modules checked: 0 errors, 0 warnings/);
  });

  it("exits 0 for a clean set of module directories", () => {
    const run = mesh([join(fixtures, "clean", "shop"), join(fixtures, "clean", "billing")]);
    assert.equal(run.code, 0, run.out + run.err);
  });

  it("exits 1 and prints each finding as file:line: error: message; fix: when there are errors", () => {
    const run = mesh([], join(fixtures, "mistakes"));
    assert.equal(run.code, 1, run.out + run.err);
    const lines = run.out.trim().split("\n");
    assert.equal(lines.length, 6);
    for (const line of lines.slice(0, 5)) assert.match(line, /^[^:]+:\d+: error: .+; fix: .+/);
    assert.match(run.out, /^shop\/src\/main\.ts:12: error: emits "order\.shipped"/m);
    assert.equal(lines[5], "2 modules checked: 5 errors, 0 warnings");
  });

  it("prints the findings as JSON with --json, keeping the exit code", () => {
    const run = mesh(["--json", "shop", "billing"], join(fixtures, "mistakes"));
    assert.equal(run.code, 1, run.err);
    const report = JSON.parse(run.out) as { errors: number; findings: { kind: string; file: string }[] };
    assert.equal(report.errors, 5);
    assert.deepEqual(report.findings.map((f) => f.kind).sort(), [
      "foreign-event",
      "routing-key-name",
      "subject-mismatch",
      "undeclared-emit",
      "unheard-subscription",
    ]);
  });

  it("exits 2 on usage errors: a fleet and directories both, a missing fleet file, nothing to check", () => {
    assert.equal(mesh(["--fleet", "examples/fleet/mesh.yaml", "examples/fleet/notes"]).code, 2);
    const missing = mesh(["--fleet", "no/such/mesh.yaml"]);
    assert.equal(missing.code, 2);
    assert.match(missing.err, /does not exist/);
    assert.equal(mesh([], join(fixtures, "clean", "shop")).code, 2);
    assert.equal(mesh(["--no-such-flag"]).code, 2);
  });
});
