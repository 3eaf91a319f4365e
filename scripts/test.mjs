#!/usr/bin/env node
// `npm test`: installs what the tests need (npm ci; Debian's servers when missing and root), checks
// types, lint and format, then runs every test file with node's test runner against real servers
// the tests start themselves.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureInstalled } from "./ensure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
const quick = args.includes("--quick"); // skip typecheck, lint and format (local iteration only)
const only = args.filter((a) => !a.startsWith("--"));

ensureInstalled(root);

function step(title, cmd, cmdArgs) {
  console.log(`\n== ${title}`);
  const started = Date.now();
  const r = spawnSync(cmd, cmdArgs, { cwd: root, stdio: "inherit" });
  const took = `${Math.round((Date.now() - started) / 1000)} s`;
  if (r.status !== 0) {
    console.error(`\n${title} failed (exit ${r.status ?? r.signal}) after ${took}.`);
    process.exit(r.status ?? 1);
  }
  console.log(`== ${title}: done in ${took}`);
}

// The files that take longest start first, so the run ends when the last short one does rather
// than waiting on a long one started late (each is a whole mesh or a fuzz run; seconds are typical).
const SLOW_FIRST = [
  "test/kill-matrix.test.ts",
  "test/backup-restore.test.ts",
  "test/backup-walkthrough.test.ts",
  "test/hostile-module.test.ts",
  "test/cluster.test.ts",
  "test/mistakes-caught.test.ts",
  "packages/sdk/test/contributions-fuzz.test.ts",
  "test/answers-fuzz.test.ts",
  "test/dashboard-browser.test.ts",
  "test/exporters-prometheus.test.ts",
  "test/alerts-through-mesh.test.ts",
  "test/npm-start.test.ts",
  "test/tool-through-mesh.test.ts",
  "test/postgres-provider.test.ts",
  "packages/cli/test/tool-command.test.ts",
  "test/plan-matches-apply.test.ts",
  "test/standings-through-mesh.test.ts",
  "test/misbehaving-provider-through-mesh.test.ts",
  "packages/cli/test/check.test.ts",
  "test/metrics-scrape.test.ts",
  "packages/cli/test/provider-command.test.ts",
  "packages/cli/test/explain.test.ts",
  "test/two-nodes.test.ts",
  "test/quiet-start-stop.test.ts",
  "test/upgrade-from-0.1.0.test.ts",
];

function slowFirst(files) {
  const rank = (f) => {
    const i = SLOW_FIRST.indexOf(f);
    return i < 0 ? SLOW_FIRST.length : i;
  };
  return [...files].sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
}

function testFiles() {
  const found = [];
  for (const top of ["packages", "providers", "examples", "test"]) {
    const dir = join(root, top);
    if (!existsSync(dir)) continue;
    for (const entry of readdirSync(dir, { recursive: true })) {
      const path = String(entry);
      if (path.includes("node_modules")) continue;
      if (path.endsWith(".test.ts")) found.push(relative(root, join(dir, path)));
    }
  }
  return slowFirst(found);
}

if (!quick) {
  step("typecheck (tsc, strict)", "npx", ["tsc", "-p", "tsconfig.json"]);
  step("typecheck the dashboard's script (tsc, checkJs)", "npx", [
    "tsc",
    "-p",
    "packages/controller/static/tsconfig.json",
  ]);
  step("lint (eslint)", "npx", ["eslint", "."]);
  step("format (prettier --check)", "npx", ["prettier", "--check", "--log-level", "warn", "."]);
}
const files = only.length > 0 ? only : testFiles();

// Files whose timing is the point (a server killed, a partition noticed, a lease taken over) run on
// their own, before the rest: beside two kill matrices on a 2-core machine their bounds measure the
// load, not the mesh.
const ALONE = ["test/cluster.test.ts", "test/readme-cluster.test.ts"];

function runTests(title, list, concurrency) {
  console.log(`\n== ${title} (${list.length} files, real servers started by the tests)`);
  step(title, process.execPath, [
    // Tests import @mesh/* by their sources ("source" export), like their own relative imports; what
    // the mesh spawns runs the build.
    "--conditions=source",
    "--import",
    "tsx",
    "--test",
    "--test-reporter=spec",
    "--test-reporter-destination=stdout",
    "--test-reporter=./scripts/file-times-reporter.mjs",
    "--test-reporter-destination=stdout",
    `--test-concurrency=${concurrency}`,
    // A bound on each file, against a hang, not a measure: the kill matrix takes about 90 s on a
    // quiet 2-core machine and more than 300 s on a loaded one.
    "--test-timeout=600000",
    ...list,
  ]);
}

// Each test's mesh has an id of its own, and so module users of its own: before the run and once it
// ends, however it ends, the users of meshes whose temporary state is gone are removed (the mesh
// never removes a user; system uids, 100 to 999, are few).
function removeStaleModuleUsers() {
  spawnSync(
    process.execPath,
    [
      "--conditions=source",
      "--import",
      "tsx",
      "-e",
      'import("@mesh/testkit").then((t) => { const gone = t.removeStaleModuleUsers(); if (gone.length > 0) console.log(`removed ${gone.length} module users of test meshes`); })',
    ],
    { cwd: root, stdio: "inherit" },
  );
}
removeStaleModuleUsers();
process.on("exit", removeStaleModuleUsers);

const alone = files.filter((f) => ALONE.includes(f));
const together = files.filter((f) => !ALONE.includes(f));
if (alone.length > 0) runTests("tests that run alone", alone, 1);
if (together.length > 0) runTests("tests", together, process.env.MESH_TEST_CONCURRENCY ?? 3);
