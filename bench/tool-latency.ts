// How long the read-only tools (`status`, `retire list`, `cleanup list`) take to answer on the
// control socket while the harness passes over 100,000 consumers, each with its own secret file.
// Baseline, in the same run: the same tools asked while no pass runs. Goal: every answer within 1 s.
//
//   node --import tsx bench/tool-latency.ts     (MESH_BENCH_CONSUMERS=100000, MESH_BENCH_ASK_EVERY=50 to change)

import { join } from "node:path";
import { FakeClock, callControl, runProvisioner, serveControl, type ControlTool } from "@mesh/sdk";
import { MemoryAdapter } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  loginOf,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  summarize,
  table,
  tempDir,
} from "./lib.ts";

const IFACE = "postgres-database";
const TOOLS: readonly ControlTool[] = ["status", "retire list", "cleanup list"];
const GOAL_MS = 1_000;

interface Sample {
  readonly tool: ControlTool;
  readonly ms: number;
}

/** Asks the tools in turn, one at a time with `pause` ms between, until `until()` says stop. */
async function askWhile(socket: string, pause: number, until: () => boolean): Promise<Sample[]> {
  const samples: Sample[] = [];
  for (let i = 0; !until(); i++) {
    const tool = TOOLS[i % TOOLS.length] as ControlTool;
    const asked = now();
    await callControl(socket, { tool, who: "bench" }, { timeoutMs: 120_000 });
    samples.push({ tool, ms: now() - asked });
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
  return samples;
}

function rows(phase: string, samples: readonly Sample[]): (string | number)[][] {
  return TOOLS.map((tool) => {
    const s = summarize(samples.filter((x) => x.tool === tool).map((x) => x.ms));
    return [phase, tool, s.n, fmtMs(s.p50), fmtMs(s.p99), fmtMs(s.max)];
  });
}

runBench("tool-latency", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 100_000);
  const pause = envInt("MESH_BENCH_ASK_EVERY", 50);
  const dir = await tempDir("tool-latency");
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  say(`tool-latency: writing ${n} secret files and the contributions file`);
  const logins = Array.from({ length: n }, (_, i) => loginOf("c", i, 6));
  await file.add(logins);

  const adapter = new MemoryAdapter();
  adapter.recordCalls = false;
  const logger = quietLogger();
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    clock: new FakeClock(),
    logger,
    watch: false,
    // Every pass measured is one asked for here.
    every: 1e12,
  });
  onCleanup(() => handle.stop());
  const control = await serveControl(handle, join(dir, "control.sock"));
  onCleanup(() => control.close());

  // The first pass creates every consumer, with the tools asked all along.
  say(`tool-latency: first pass (creates ${n})`);
  let passing = true;
  let started = now();
  const during = askWhile(control.path, pause, () => !passing);
  await handle.ready;
  const firstPass = now() - started;
  passing = false;
  const duringCreate = await during;
  if (adapter.backend.size !== n) throw new Error(`the first pass made ${adapter.backend.size} of ${n}`);

  // A pass that applies every consumer again (each one's values changed), with a full snapshot to answer from.
  for (const g of file.given) (g.values as Record<string, unknown>)["changed"] = true;
  await file.write();
  say(`tool-latency: second pass (applies ${n} again)`);
  passing = true;
  started = now();
  const duringApply = askWhile(control.path, pause, () => !passing);
  await handle.pass("watch");
  const secondPass = now() - started;
  passing = false;
  const applySamples = await duringApply;

  say("tool-latency: baseline, no pass running");
  let count = 0;
  const idle = await askWhile(control.path, pause, () => count++ >= 30);

  const status = handle.status();
  if (status.consumers.length !== n) throw new Error(`status lists ${status.consumers.length} of ${n}`);
  if (logger.errors.length > 0)
    throw new Error(`the harness complained: ${logger.errors.slice(0, 3).join(" | ")}`);

  const passing_ = [...duringCreate, ...applySamples];
  const worst = Math.max(...passing_.map((s) => s.ms));
  const body = [
    `${n} consumers, each with its own secret file; in-memory backend (MemoryAdapter); FakeClock;`,
    `tools asked one at a time over the control socket, ${pause} ms apart, from the same process.`,
    `first pass (creates all): ${fmtMs(firstPass)}; second pass (values changed, all applied again): ${fmtMs(secondPass)}.`,
    "during the first pass the snapshot is still empty; during the second it lists every consumer.",
    "",
    table(
      ["phase", "tool", "answers", "p50", "p99", "max"],
      [
        ...rows("during create", duringCreate),
        ...rows("during re-apply", applySamples),
        ...rows("baseline: idle", idle),
      ],
    ),
    "",
    `worst answer while a pass ran: ${fmtMs(worst)} (goal ≤ ${fmtMs(GOAL_MS)}: ${worst <= GOAL_MS ? "met" : "NOT met"})`,
  ];
  printResult("tool-latency", body.join("\n"));
});
