// How long a `mesh` call takes with plain node, against bare `node -e 0` in the same run:
// `mesh --version`, `mesh --help`, `mesh status` with no mesh (its exit-3 answer), and `mesh status`
// against a running one-module mesh this starts. Goals, each as its time over bare node (the median
// of the rounds' differences, which a loaded machine inflates less than the time itself):
// `--version` within bare node + 20 ms, `status` (running) within bare node + 60 ms. The cases take
// turns, one run of each per round, so a machine whose load changes during the run slows them alike.
//
//   node --conditions=source --import tsx bench/cli-latency.ts      (MESH_BENCH_RUNS=10 to change)
//   MESH_BENCH_BIN=/opt/mesh/bin/mesh …                              times an installed mesh instead
//   MESH_BENCH_BASELINE=/path/to/other/bin/mesh.js …                 and another build beside it, in
//                                                                    the same rounds (before/after)

import { spawnSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { MESH_BIN, startMesh } from "../packages/cli/test/run-mesh.ts";

const RUNS = Number(process.env["MESH_BENCH_RUNS"] ?? 10);
const BIN = process.env["MESH_BENCH_BIN"];
const BASELINE = process.env["MESH_BENCH_BASELINE"];

/** How to run `mesh args…` of `bin` (this checkout's bin/mesh.js by default). */
const meshOf =
  (bin: string | undefined) =>
  (args: readonly string[]): [string, string[]] =>
    bin === undefined
      ? [process.execPath, [MESH_BIN, ...args]]
      : bin.endsWith(".js")
        ? [process.execPath, [bin, ...args]]
        : [bin, [...args]];

/** How long one run of `command args…` took, in ms, and its exit code. */
function once(command: string, args: readonly string[], cwd: string): { ms: number; code: number | null } {
  const started = process.hrtime.bigint();
  const code = spawnSync(command, args, { cwd, stdio: "ignore" }).status;
  return { ms: Number(process.hrtime.bigint() - started) / 1e6, code };
}

const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
};

const load = (): string =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(" ");

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
  // The goal of a case, in ms over bare node in the same round; undefined: none.
  const cases: { name: string; run: [string, string[]]; goal: number | undefined }[] = [];
  const bare = {
    name: "node -e 0 (bare node)",
    run: [process.execPath, ["-e", "0"]] as [string, string[]],
    goal: undefined,
  };
  cases.push(bare);
  for (const [label, bin] of [["", BIN], ...(BASELINE !== undefined ? [["baseline ", BASELINE]] : [])] as [
    string,
    string | undefined,
  ][]) {
    const mesh = meshOf(bin);
    cases.push(
      { name: `${label}mesh --version`, run: mesh(["--version"]), goal: label === "" ? 20 : undefined },
      { name: `${label}mesh --help`, run: mesh(["--help"]), goal: undefined },
      {
        name: `${label}mesh status (no mesh: exit 3)`,
        run: mesh(["status", "--state", join(dir, "none")]),
        goal: undefined,
      },
      {
        name: `${label}mesh status (a running mesh)`,
        run: mesh(["status", "--state", state]),
        goal: label === "" ? 60 : undefined,
      },
    );
  }
  console.log(`${BIN ?? MESH_BIN}${BASELINE !== undefined ? ` (baseline: ${BASELINE})` : ""}`);
  console.log(
    `${RUNS} rounds, each case once per round; load average ${load()} on ${availableParallelism()} cores`,
  );
  const times = new Map(cases.map((c) => [c, [] as number[]]));
  const codes = new Map<(typeof cases)[number], number | null>();
  for (let round = 0; round < RUNS; round++) {
    for (const c of cases) {
      const { ms, code } = once(c.run[0], c.run[1], dir);
      times.get(c)?.push(ms);
      codes.set(c, code);
    }
  }
  const bareMs = times.get(bare) ?? [];
  const goals: string[] = [];
  let met = true;
  for (const c of cases) {
    const ms = times.get(c) ?? [];
    const m = median(ms);
    const overMs = median(ms.map((t, i) => t - (bareMs[i] ?? 0)));
    const over = c === bare ? "" : `  bare node +${overMs.toFixed(0)} ms`;
    let goal = "";
    if (c.goal !== undefined) {
      const within = overMs <= c.goal;
      if (!within) met = false;
      goal = within ? `  within bare node + ${c.goal} ms` : `  over bare node + ${c.goal} ms`;
      goals.push(
        `${c.name.replace(" (a running mesh)", " (running)")} +${overMs.toFixed(0)} ms (goal +${c.goal}, ${within ? "met" : "not met"})`,
      );
    }
    console.log(
      `  ${c.name.padEnd(41)} exit ${codes.get(c)}  median ${m.toFixed(0).padStart(5)} ms  (min ${Math.min(...ms).toFixed(0)}, max ${Math.max(...ms).toFixed(0)})${over}${goal}`,
    );
  }
  const loaded = loadavg()[0] ?? 0;
  console.log(
    `  goal ${met ? "met" : "not met"}: ${goals.join(", ")}; bare node ${median(bareMs).toFixed(0)} ms` +
      (loaded > availableParallelism()
        ? ` (load average ${loaded.toFixed(1)} on ${availableParallelism()} cores: every figure is the load's as much as mesh's)`
        : ""),
  );
  console.log(`  load average after: ${load()}`);
} finally {
  up.child.kill("SIGINT");
  await up.done;
  await rm(dir, { recursive: true, force: true });
}
