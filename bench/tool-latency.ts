// How long the read-only tools (`status`, `retire list`, `cleanup list`) take to answer on the
// control socket while the harness passes over 100,000 consumers, each with its own secret file.
// Baseline, in the same run: the same tools asked while no pass runs. Goal: every answer within 1 s.
//
//   node --import tsx bench/tool-latency.ts     (MESH_BENCH_CONSUMERS=100000, MESH_BENCH_ASK_EVERY=50 to change)

import { spawn } from "node:child_process";
import { join } from "node:path";
import { FakeClock, runProvisioner } from "@mesh/sdk";
import { serveControl, type ControlTool } from "@mesh/sdk/provider";
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
  /** Date.now() when the answer had been read and parsed. */
  readonly end: number;
}

// The asker runs in a process of its own, as `mesh tool` does, so parsing a status of 100,000
// consumers does not weigh on the provider's event loop. Plain JavaScript, no tsx: it starts at once.
const ASKER = `
import { connect } from "node:net";
const [socket, pause] = [process.argv[1], Number(process.argv[2])];
const tools = ${JSON.stringify(TOOLS)};
let stop = false;
process.stdin.on("data", () => { stop = true; });
const ask = (tool) => new Promise((resolve, reject) => {
  const s = connect(socket);
  const chunks = [];
  s.on("connect", () => s.write(JSON.stringify({ tool, args: [], who: "bench" }) + "\\n"));
  s.on("error", reject);
  s.on("data", (c) => {
    const nl = c.indexOf(10);
    chunks.push(nl === -1 ? c : c.subarray(0, nl));
    if (nl === -1) return;
    const reply = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    s.destroy();
    reply.ok ? resolve() : reject(new Error(reply.error.message));
  });
});
for (let i = 0; !stop; i++) {
  const tool = tools[i % tools.length];
  const asked = performance.now();
  await ask(tool);
  process.stdout.write(JSON.stringify({ tool, ms: performance.now() - asked, end: Date.now() }) + "\\n");
  await new Promise((r) => setTimeout(r, pause));
}
process.exit(0);
`;

/** Starts the asker; `stop()` ends it and answers every sample it took. */
function startAsker(socket: string, pause: number): { stop(): Promise<Sample[]> } {
  const child = spawn(process.execPath, ["--input-type=module", "-e", ASKER, socket, String(pause)], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  onCleanup(() => {
    child.kill("SIGKILL");
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("close", resolve));
  return {
    async stop() {
      child.stdin.end("stop\n");
      const code = await exited;
      if (code !== 0) throw new Error(`the asker exited ${code}`);
      return out
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as Sample);
    },
  };
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

  // One asker all along; each answer is counted in the phase in which it arrived.
  const asker = startAsker(control.path, pause);
  const window = async (work: () => Promise<void>): Promise<{ from: number; to: number; ms: number }> => {
    const [from, started] = [Date.now(), now()];
    await work();
    return { from, to: Date.now(), ms: now() - started };
  };
  say(`tool-latency: first pass (creates ${n})`);
  const create = await window(() => handle.ready);
  if (adapter.backend.size !== n) throw new Error(`the first pass made ${adapter.backend.size} of ${n}`);

  // A pass that applies every consumer again (each one's values changed), with a full snapshot to answer from.
  for (const g of file.given) (g.values as Record<string, unknown>)["changed"] = true;
  await file.write();
  say(`tool-latency: second pass (applies ${n} again)`);
  const apply = await window(() => handle.pass("watch"));

  say("tool-latency: baseline, no pass running");
  const idle = await window(() => new Promise((resolve) => setTimeout(resolve, 30 * (pause + 100))));
  const samples = await asker.stop();
  const within = (w: { from: number; to: number }): Sample[] =>
    samples.filter((x) => x.end >= w.from && x.end <= w.to);
  const [duringCreate, applySamples, idleSamples] = [within(create), within(apply), within(idle)];

  const status = handle.status();
  if (status.consumers.length !== n) throw new Error(`status lists ${status.consumers.length} of ${n}`);
  if (logger.errors.length > 0)
    throw new Error(`the harness complained: ${logger.errors.slice(0, 3).join(" | ")}`);

  const passing_ = [...duringCreate, ...applySamples];
  const worst = Math.max(...passing_.map((s) => s.ms));
  const body = [
    `${n} consumers, each with its own secret file; in-memory backend (MemoryAdapter); FakeClock;`,
    `tools asked one at a time over the control socket, ${pause} ms apart, from a process of their own`,
    "(as `mesh tool` asks), each timed from the request to the parsed answer.",
    `first pass (creates all): ${fmtMs(create.ms)}; second pass (values changed, all applied again): ${fmtMs(apply.ms)}.`,
    "during the first pass the snapshot is still empty; during the second it lists every consumer.",
    "",
    table(
      ["phase", "tool", "answers", "p50", "p99", "max"],
      [
        ...rows("during create", duringCreate),
        ...rows("during re-apply", applySamples),
        ...rows("baseline: idle", idleSamples),
      ],
    ),
    "",
    `worst answer while a pass ran: ${fmtMs(worst)} (goal ≤ ${fmtMs(GOAL_MS)}: ${worst <= GOAL_MS ? "met" : "NOT met"})`,
  ];
  printResult("tool-latency", body.join("\n"));
});
