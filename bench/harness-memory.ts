// What the harness holds in memory at N consumers: the resident set of a plain `node` running the
// built SDK (packages/sdk/dist, never under tsx), read from /proc/<pid>/status after its passes.
// Baseline, in the same run: the same process with no consumers. Goal: at most 100 MB at 10,000.
//
//   npx tsc -b tsconfig.build.json && node --import tsx bench/harness-memory.ts
//   (MESH_BENCH_CONSUMERS=10000, MESH_BENCH_PASSES=60 to change)

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  ContributionsFile,
  envInt,
  loginOf,
  printResult,
  procMemory,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const IFACE = "postgres-database";
const GOAL_MB = 100;
const GOAL_AT = 10_000;
const SDK = join(dirname(fileURLToPath(import.meta.url)), "..", "packages", "sdk", "dist", "index.js");

// The child: the harness over an in-memory adapter with a batched check, watching its files as it
// does when the agent runs it, a FakeClock so the passes run when told: plain passes, and a
// verifying one every twelfth (as every 5 s against once a minute).
const CHILD = `
const { runProvisioner, FakeClock } = await import(process.argv[2]);
const receives = process.argv[3];
const passes = Number(process.argv[4]);
const backend = new Map();
const adapter = {
  async create(p) { backend.set(p.as, p.password); },
  async holdsMany(ps) { return new Map(ps.map((p) => [p.as, backend.get(p.as) === p.password])); },
  async retire() {},
  async inventory() { return []; },
  async delete() { return { freedBytes: 0 }; },
};
const clock = new FakeClock();
const quiet = { info() {}, warn() {}, error(m) { process.stderr.write(m + "\\n"); } };
const handle = runProvisioner(${JSON.stringify(IFACE)}, adapter, { receives, clock, logger: quiet, every: 1e12, verifyEvery: 60000 });
await handle.ready;
for (let i = 1; i <= passes; i++) {
  if (i % 12 === 0) clock.advance(60000);
  await handle.pass("periodic");
}
const held = handle.status().consumers.filter((c) => c.why === "held as asked").length;
process.stdout.write(JSON.stringify({ held, made: backend.size, heap: process.memoryUsage().heapUsed }) + "\\n");
process.stdin.resume();
process.stdin.on("end", async () => { await handle.stop(); process.exit(0); });
`;

interface Figures {
  n: number;
  rss: number;
  hwm: number;
  heap: number;
}

async function measure(n: number, passes: number, child: string): Promise<Figures> {
  const dir = await tempDir(`harness-memory-${n}`);
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  if (n > 0) await file.add(Array.from({ length: n }, (_, i) => loginOf("c", i)));
  else await file.write();
  // Plain node, no loader: what a provider runs.
  const proc = spawn(process.execPath, [child, pathToFileURL(SDK).href, file.path, String(passes)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  try {
    const line = await new Promise<string>((resolve, reject) => {
      let out = "";
      proc.stdout.on("data", (chunk: Buffer) => {
        out += chunk.toString();
        const end = out.indexOf("\n");
        if (end >= 0) resolve(out.slice(0, end));
      });
      proc.on("exit", (code) =>
        reject(new Error(`the harness process exited (${code}) before its passes ended`)),
      );
      proc.on("error", reject);
    });
    const said = JSON.parse(line) as { held: number; made: number; heap: number };
    if (said.held !== n || said.made !== n) {
      throw new Error(`the harness holds ${said.held} and made ${said.made} of ${n} consumers`);
    }
    const { rss, hwm } = await procMemory(proc.pid as number);
    return { n, rss, hwm, heap: said.heap };
  } finally {
    proc.stdin.end();
    await new Promise((resolve) => (proc.exitCode === null ? proc.once("exit", resolve) : resolve(null)));
  }
}

const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

runBench("harness-memory", async () => {
  if (!existsSync(SDK)) throw new Error(`${SDK} is missing: build first (npx tsc -b tsconfig.build.json)`);
  const n = envInt("MESH_BENCH_CONSUMERS", GOAL_AT);
  const passes = Math.max(12, envInt("MESH_BENCH_PASSES", 60));
  const scratch = await tempDir("harness-memory-child");
  const child = join(scratch, "child.mjs");
  await writeFile(child, CHILD);

  say(`harness-memory: no consumers, ${passes} passes`);
  const none = await measure(0, passes, child);
  say(`harness-memory: ${n} consumers, ${passes} passes`);
  const some = await measure(n, passes, child);

  const body = [
    `plain node ${process.version} on the built SDK (packages/sdk/dist), watching its files; an in-memory`,
    `adapter with a batched check; ${passes} passes after the first (every 12th verifies every consumer);`,
    `VmRSS and VmHWM read from /proc/<pid>/status once the passes are done; heap from the process itself.`,
    "",
    table(
      ["consumers", "RSS", "peak RSS (HWM)", "heap used"],
      [none, some].map((f) => [f.n, mb(f.rss), mb(f.hwm), mb(f.heap)]),
    ),
    "",
    `per consumer, beyond none: RSS ${((some.rss - none.rss) / Math.max(1, n) / 1024).toFixed(2)} KiB, ` +
      `heap ${((some.heap - none.heap) / Math.max(1, n) / 1024).toFixed(2)} KiB`,
    n === GOAL_AT
      ? `goal: RSS ≤ ${GOAL_MB} MB at ${GOAL_AT} consumers; measured ${mb(some.rss)} (peak ${mb(some.hwm)}): ` +
        `${some.rss <= GOAL_MB * 1024 * 1024 ? "met" : "not met"}`
      : `goal: RSS ≤ ${GOAL_MB} MB at ${GOAL_AT} consumers; measured at ${n}, so no verdict`,
  ];
  printResult("harness-memory", body.join("\n"));
});
