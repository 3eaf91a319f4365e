#!/usr/bin/env node
// `npm run bench`: runs every benchmark in bench/ one after another (never two at once: they would
// measure each other), or only the ones named: `npm run bench -- pass-cost convergence`.
// Each prints its own result block; this says at the end which ran, how long each took, which failed.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { basename, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureInstalled } from "./ensure.mjs";

const root = fileURLToPath(new URL("..", import.meta.url));
const benchDir = join(root, "bench");
const HELPERS = new Set(["lib.ts"]);

function available() {
  return readdirSync(benchDir)
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts") && !HELPERS.has(f))
    .map((f) => basename(f, ".ts"))
    .sort();
}

const all = available();
const asked = process.argv.slice(2).filter((a) => !a.startsWith("-"));
const names = asked.length > 0 ? asked.map((a) => basename(a).replace(/\.ts$/, "")) : all;
const unknown = names.filter((n) => !existsSync(join(benchDir, `${n}.ts`)) || HELPERS.has(`${n}.ts`));
if (unknown.length > 0) {
  console.error(`no benchmark named ${unknown.join(", ")} in bench/; there are: ${all.join(", ")}`);
  process.exit(2);
}

ensureInstalled(root);

const outcomes = [];
for (const name of names) {
  console.log(`\n== bench/${name}.ts`);
  const started = Date.now();
  const r = spawnSync(
    process.execPath,
    ["--conditions=source", "--import", "tsx", join("bench", `${name}.ts`)],
    {
      cwd: root,
      stdio: "inherit",
    },
  );
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  outcomes.push({ name, ok: r.status === 0, seconds, how: r.status ?? r.signal });
}

console.log("\n== benchmarks");
for (const o of outcomes) {
  console.log(`${o.ok ? "ok    " : "FAILED"} ${o.name} (${o.seconds} s${o.ok ? "" : `, exit ${o.how}`})`);
}
process.exit(outcomes.every((o) => o.ok) ? 0 : 1);
