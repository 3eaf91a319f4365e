// How long a `mesh` call takes with plain node, against bare `node -e 0` in the same run:
// `mesh --version`, `mesh --help`, `mesh status` with no mesh (its exit-3 answer), and `mesh status`
// against a running one-module mesh this starts. Goal: `--version` and `status` within 300 ms.
//
//   node --conditions=source --import tsx bench/cli-latency.ts      (MESH_BENCH_RUNS=10 to change)
//   MESH_BENCH_BIN=/opt/mesh/bin/mesh …                              times an installed mesh instead

import { spawnSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { MESH_BIN, startMesh } from "../packages/cli/test/run-mesh.ts";

const RUNS = Number(process.env["MESH_BENCH_RUNS"] ?? 10);
const BIN = process.env["MESH_BENCH_BIN"];
const GOAL_MS = 300;

const mesh = (args: readonly string[]): [string, string[]] =>
  BIN === undefined ? [process.execPath, [MESH_BIN, ...args]] : [BIN, [...args]];

function time(
  command: string,
  args: readonly string[],
  cwd: string,
): { median: number; min: number; max: number; code: number | null } {
  const ms: number[] = [];
  let code: number | null = null;
  for (let i = 0; i < RUNS; i++) {
    const started = process.hrtime.bigint();
    code = spawnSync(command, args, { cwd, stdio: "ignore" }).status;
    ms.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  ms.sort((a, b) => a - b);
  return { median: ms[Math.floor(RUNS / 2)] ?? 0, min: ms[0] ?? 0, max: ms.at(-1) ?? 0, code };
}

const dir = await mkdtemp(join(tmpdir(), "mesh-bench-cli-"));
// Readable by the module's own user, which the agent runs it as.
await chmod(dir, 0o755);
const state = join(dir, "state");
await mkdir(join(dir, "sleeper"));
await writeFile(
  join(dir, "sleeper", "module.json"),
  JSON.stringify({ name: "sleeper", run: { command: "sleep", args: ["100000"] } }),
);
await writeFile(
  join(dir, "mesh.yaml"),
  "nodes:\n  node-a: {}\nmodules:\n  sleeper: { manifest: ./sleeper/module.json, node: node-a }\n",
);
const up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state], {}, dir);
try {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    up.waitFor(/sleeper started/),
    new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the mesh did not start sleeper within 90 s:\n${up.output()}`)),
        90_000,
      );
    }),
  ]).finally(() => clearTimeout(timer));
  const cases: [string, [string, string[]]][] = [
    ["node -e 0 (bare node)", [process.execPath, ["-e", "0"]]],
    ["mesh --version", mesh(["--version"])],
    ["mesh --help", mesh(["--help"])],
    ["mesh status (no mesh: exit 3)", mesh(["status", "--state", join(dir, "none")])],
    ["mesh status (a running mesh)", mesh(["status", "--state", state])],
  ];
  console.log(
    `${BIN ?? MESH_BIN}, ${RUNS} runs each, load average ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")}`,
  );
  for (const [name, [command, args]] of cases) {
    const t = time(command, args, dir);
    const goal =
      name.startsWith("mesh --version") || name.includes("running")
        ? t.median <= GOAL_MS
          ? "  within 300 ms"
          : "  over 300 ms"
        : "";
    console.log(
      `  ${name.padEnd(32)} exit ${t.code}  median ${t.median.toFixed(0).padStart(5)} ms  (min ${t.min.toFixed(0)}, max ${t.max.toFixed(0)})${goal}`,
    );
  }
  console.log(
    `  load average after: ${loadavg()
      .map((l) => l.toFixed(1))
      .join(" ")}`,
  );
} finally {
  up.child.kill("SIGINT");
  await up.done;
  await rm(dir, { recursive: true, force: true });
}
