// What an idle provider holds: `mesh provider postgres` (the built CLI under plain node, as a user
// or the agent runs it, here without a bus) over an empty contributions file and a private
// PostgreSQL, its VmRSS read from /proc after it has idled for a minute. Baseline, in the same run:
// a bare `node` idling as long. Goal: ≤ 55 MB.
//
//   npm run build && node --conditions=source --import tsx bench/provider-idle-memory.ts
//   (MESH_BENCH_IDLE_S=60 to change how long it idles)

import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startPostgres } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  mb,
  onCleanup,
  printResult,
  procMemory,
  runBench,
  say,
  sleep,
  table,
  tempDir,
  verdict,
} from "./lib.ts";

const GOAL_MB = 55;
const IDLE_S = envInt("MESH_BENCH_IDLE_S", 60);
const MESH = join(dirname(fileURLToPath(import.meta.url)), "..", "packages", "cli", "bin", "mesh.js");

async function status(pid: number): Promise<{ rss: number; hwm: number }> {
  const memory = await procMemory(pid);
  return { rss: mb(memory.rss), hwm: mb(memory.hwm) };
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
    child.kill("SIGTERM");
  });
}

runBench("provider-idle-memory", async () => {
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const dir = await tempDir("idle-provider");
  const file = new ContributionsFile(dir, "postgres-database");
  await file.write();
  let said = "";
  const provider = spawn(process.execPath, [MESH, "provider", "postgres", "--receives", file.path], {
    env: { ...process.env, MESH_POSTGRES_URL: server.superuserUrl, NODE_OPTIONS: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  provider.stdout?.on("data", (d: Buffer) => (said += d.toString()));
  provider.stderr?.on("data", (d: Buffer) => (said += d.toString()));
  onCleanup(() => stop(provider));
  const bare = spawn(process.execPath, ["-e", "setTimeout(() => {}, 1e9)"], {
    env: { ...process.env, NODE_OPTIONS: "" },
    stdio: "ignore",
  });
  onCleanup(() => stop(bare));
  say(`provider-idle-memory: both idle for ${IDLE_S} s`);
  await sleep(IDLE_S * 1000);
  if (provider.exitCode !== null) throw new Error(`the provider ended early:\n${said}`);
  const p = await status(provider.pid as number);
  const b = await status(bare.pid as number);
  await stop(provider);
  await stop(bare);
  printResult(
    "provider-idle-memory",
    [
      `mesh provider postgres (built CLI, plain node, no bus, no consumer) and bare node, after ${IDLE_S} s idle:`,
      "",
      table(
        ["process", "VmRSS", "VmHWM"],
        [
          ["mesh provider postgres", `${p.rss.toFixed(1)} MB`, `${p.hwm.toFixed(1)} MB`],
          ["bare node", `${b.rss.toFixed(1)} MB`, `${b.hwm.toFixed(1)} MB`],
        ],
      ),
      "",
      `idle provider: ${verdict(`${p.rss.toFixed(1)} MB`, `≤ ${GOAL_MB} MB`, p.rss <= GOAL_MB)}; ` +
        `beyond bare node ${(p.rss - b.rss).toFixed(1)} MB`,
    ].join("\n"),
  );
});
