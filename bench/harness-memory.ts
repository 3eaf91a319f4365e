// What the harness holds in memory at N consumers: the resident set of a plain `node` running the
// built SDK (packages/sdk/dist, never under tsx), read from /proc/<pid>/status twice: right after
// its passes run back to back, and once it has then run as a provider runs, a pass every 5 s for a
// minute (V8 gives back the young generation it grew for the first pass only once the process has
// been calm for a while, so the first figure is a peak a running provider leaves behind).
// Baseline, in the same run: the same process with no consumers. Goal: at most 100 MB at 10,000,
// judged on the provider as it runs; both figures are printed.
//
//   npx tsc -b tsconfig.build.json && node --import tsx bench/harness-memory.ts
//   (MESH_BENCH_CONSUMERS=10000, MESH_BENCH_PASSES=60, MESH_BENCH_STEADY_S=60 to change)

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
// Then as a provider runs: a plain pass every 5 s, a verifying one every minute.
const steadyMs = Number(process.argv[5]) * 1000;
for (let at = 5000; at <= steadyMs; at += 5000) {
  await new Promise((resolve) => setTimeout(resolve, 5000));
  clock.advance(5000);
  await handle.pass("periodic");
}
process.stdout.write(JSON.stringify({ heap: process.memoryUsage().heapUsed }) + "\\n");
process.stdin.resume();
process.stdin.on("end", async () => { await handle.stop(); process.exit(0); });
`;

interface Figures {
  n: number;
  /** Right after the passes run back to back. */
  rss: number;
  hwm: number;
  heap: number;
  /** After running as a provider runs (a pass every 5 s) for the steady time. */
  steady: { rss: number; hwm: number; heap: number };
}

async function measure(n: number, passes: number, steadyS: number, child: string): Promise<Figures> {
  const dir = await tempDir(`harness-memory-${n}`);
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  if (n > 0) await file.add(Array.from({ length: n }, (_, i) => loginOf("c", i)));
  else await file.write();
  // Plain node, no loader: what a provider runs.
  const proc = spawn(
    process.execPath,
    [child, pathToFileURL(SDK).href, file.path, String(passes), String(steadyS)],
    {
      stdio: ["pipe", "pipe", "inherit"],
    },
  );
  // Each line the child writes, in turn.
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let out = "";
  let gone: Error | undefined;
  proc.stdout.on("data", (chunk: Buffer) => {
    out += chunk.toString();
    for (let end = out.indexOf("\n"); end >= 0; end = out.indexOf("\n")) {
      lines.push(out.slice(0, end));
      out = out.slice(end + 1);
    }
    while (lines.length > 0 && waiting.length > 0) waiting.shift()?.(lines.shift() as string);
  });
  const nextLine = (): Promise<string> =>
    new Promise((resolve, reject) => {
      if (lines.length > 0) return resolve(lines.shift() as string);
      if (gone !== undefined) return reject(gone);
      waiting.push(resolve);
      proc.once("exit", (code) =>
        reject(new Error(`the harness process exited (${code}) before its passes ended`)),
      );
      proc.once("error", reject);
    });
  proc.once("exit", (code) => {
    gone = new Error(`the harness process exited (${code}) before its passes ended`);
  });
  try {
    const said = JSON.parse(await nextLine()) as { held: number; made: number; heap: number };
    if (said.held !== n || said.made !== n) {
      throw new Error(`the harness holds ${said.held} and made ${said.made} of ${n} consumers`);
    }
    const { rss, hwm } = await procMemory(proc.pid as number);
    const later = JSON.parse(await nextLine()) as { heap: number };
    const steady = { ...(await procMemory(proc.pid as number)), heap: later.heap };
    return { n, rss, hwm, heap: said.heap, steady };
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
  const steadyS = Math.max(0, envInt("MESH_BENCH_STEADY_S", 60));
  const scratch = await tempDir("harness-memory-child");
  const child = join(scratch, "child.mjs");
  await writeFile(child, CHILD);

  // Side by side: the one with no consumers is idle nearly all the time, and the minute each then
  // runs as a provider is spent once.
  say(
    `harness-memory: no consumers and ${n} consumers, ${passes} passes, then ${steadyS} s as a provider runs`,
  );
  const [none, some] = await Promise.all([
    measure(0, passes, steadyS, child),
    measure(n, passes, steadyS, child),
  ]);

  const body = [
    `plain node ${process.version} on the built SDK (packages/sdk/dist), watching its files; an in-memory`,
    `adapter with a batched check; ${passes} passes after the first (every 12th verifies every consumer);`,
    `VmRSS and VmHWM read from /proc/<pid>/status once the passes are done, and again after ${steadyS} s`,
    `of a pass every 5 s (as a provider runs); heap from the process itself.`,
    "",
    table(
      [
        "consumers",
        "RSS after the passes",
        "heap used",
        `RSS after ${steadyS} s running`,
        "heap used",
        "peak RSS (HWM)",
      ],
      [none, some].map((f) => [
        f.n,
        mb(f.rss),
        mb(f.heap),
        mb(f.steady.rss),
        mb(f.steady.heap),
        mb(f.steady.hwm),
      ]),
    ),
    "",
    `per consumer, beyond none, running: RSS ${((some.steady.rss - none.steady.rss) / Math.max(1, n) / 1024).toFixed(2)} KiB, ` +
      `heap ${((some.steady.heap - none.steady.heap) / Math.max(1, n) / 1024).toFixed(2)} KiB`,
    n === GOAL_AT
      ? `goal: RSS ≤ ${GOAL_MB} MB at ${GOAL_AT} consumers as the provider runs; measured ${mb(some.steady.rss)} ` +
        `(${mb(some.rss)} right after the passes, peak ${mb(some.steady.hwm)}): ` +
        `${some.steady.rss <= GOAL_MB * 1024 * 1024 ? "met" : "not met"}`
      : `goal: RSS ≤ ${GOAL_MB} MB at ${GOAL_AT} consumers; measured at ${n}, so no verdict`,
  ];
  printResult("harness-memory", body.join("\n"));
});
