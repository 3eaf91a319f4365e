#!/usr/bin/env node
// `npm test`: installs what the tests need (npm ci; Debian's servers when missing and root), checks
// types, lint and format, then runs every test file with node's test runner against real servers
// the tests start themselves.
import { spawn, spawnSync } from "node:child_process";
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
// than waiting on a long one started late: the longest of a recent CI run, longest first (each is a
// whole mesh, a kill matrix or a fuzz run; the rest take seconds).
const SLOW_FIRST = [
  "test/kill-matrix.test.ts",
  "test/provider-kill-matrix.test.ts",
  "test/npm-start.test.ts",
  "test/mistakes-caught.test.ts",
  "packages/sdk/test/hostile-entries.test.ts",
  "test/conformance.test.ts",
  "test/hostile-module.test.ts",
  "test/restore-older-backup.test.ts",
  "test/alerts-through-mesh.test.ts",
  "test/rotation-through-mesh.test.ts",
  "test/s3-rotation-through-mesh.test.ts",
  "test/packed-cli.test.ts",
  "test/rollback-brings-back.test.ts",
  "test/rotate-now-through-mesh.test.ts",
  "packages/sdk/test/contributions-fuzz.test.ts",
  "test/exporters-prometheus.test.ts",
  "test/misbehaving-provider-through-mesh.test.ts",
  "packages/cli/test/systemd-units.test.ts",
  "test/least-privilege.test.ts",
  "test/module-limits.test.ts",
  "test/ledger-claims-through-mesh.test.ts",
  "providers/s3/test/adapter.test.ts",
  "test/postgres-rotation.test.ts",
  "test/dashboard-browser.test.ts",
  "test/never-seen-redis-mariadb.test.ts",
  "test/postgres-provider.test.ts",
  "test/backup-restore.test.ts",
  "test/packed-sdk.test.ts",
  "test/off-the-shelf-app.test.ts",
  "test/quiet-start-stop.test.ts",
  "test/readme-example-fleet.test.ts",
  "test/convergence.test.ts",
  "packages/cli/test/controller-command.test.ts",
  "test/answers-fuzz.test.ts",
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

// The checks run side by side: each is one process that uses one core, and on a 2-core machine
// running them one after another leaves a core idle for a minute. Each one's output is printed
// whole once it ends, under its own title.
async function checksAtOnce(checks) {
  const started = Date.now();
  const results = await Promise.all(
    checks.map(
      ([title, cmd, cmdArgs]) =>
        new Promise((resolve) => {
          const t0 = Date.now();
          const child = spawn(cmd, cmdArgs, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
          let output = "";
          child.stdout.on("data", (d) => (output += d));
          child.stderr.on("data", (d) => (output += d));
          child.on("error", (err) => (output += `${err.message}\n`));
          child.on("close", (code, signal) =>
            resolve({ title, code: code ?? signal, output, took: Math.round((Date.now() - t0) / 1000) }),
          );
        }),
    ),
  );
  for (const r of results) {
    console.log(`\n== ${r.title}`);
    if (r.output.trim() !== "") process.stdout.write(r.output.endsWith("\n") ? r.output : `${r.output}\n`);
    console.log(
      r.code === 0
        ? `== ${r.title}: done in ${r.took} s`
        : `\n${r.title} failed (exit ${r.code}) after ${r.took} s.`,
    );
  }
  const failed = results.filter((r) => r.code !== 0);
  console.log(`== the checks: done in ${Math.round((Date.now() - started) / 1000)} s, side by side`);
  if (failed.length > 0) process.exit(typeof failed[0].code === "number" ? failed[0].code : 1);
}

if (!quick) {
  await checksAtOnce([
    ["typecheck (tsc, strict)", "npx", ["tsc", "-p", "tsconfig.json"]],
    [
      "typecheck the dashboard's script (tsc, checkJs)",
      "npx",
      ["tsc", "-p", "packages/controller/static/tsconfig.json"],
    ],
    ["lint (eslint)", "npx", ["eslint", "."]],
    ["format (prettier --check)", "npx", ["prettier", "--check", "--log-level", "warn", "."]],
  ]);
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
