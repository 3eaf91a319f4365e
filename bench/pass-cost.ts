// What one pass of the harness costs over N consumers that have not changed, with an in-memory
// backend so only the harness itself is measured. The harness watches its files, as it does when
// run by the agent, so a plain pass reads only what the watcher said changed (nothing, here) and
// the contributions file. Baselines, in the same run: the I/O of a pass that trusts nothing (read
// the contributions file, parse it, read every secret file), and the same harness unwatched, which
// does exactly that. Goal: a plain pass over 10,000 unchanged consumers in at most 20 ms.
//
//   node --import tsx bench/pass-cost.ts          (MESH_BENCH_SIZES=1000,10000 and MESH_BENCH_PASSES=15 to change)

import { readFile } from "node:fs/promises";
import { FakeClock, runProvisioner } from "@mesh/sdk";
import { MemoryAdapter } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  median,
  now,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const IFACE = "postgres-database";
const VERIFY_EVERY = 60_000;
const GOAL_MS = 20;
const GOAL_AT = 10_000;

function sizes(): number[] {
  const raw = process.env["MESH_BENCH_SIZES"];
  if (!raw) return [1_000, 2_000, 5_000, 10_000];
  const list = raw.split(",").map((s) => Number(s.trim()));
  if (list.some((n) => !Number.isInteger(n) || n <= 0)) {
    throw new Error(`MESH_BENCH_SIZES=${JSON.stringify(raw)} is not a list of positive whole numbers`);
  }
  return list;
}

/** The baseline: what any pass must read, read as plainly as node can, 64 files at once as the harness does. */
async function readOnly(path: string): Promise<number> {
  const doc = JSON.parse(await readFile(path, "utf8")) as { given: { secret: string }[] };
  let next = 0;
  let bytes = 0;
  const worker = async (): Promise<void> => {
    while (next < doc.given.length) {
      const entry = doc.given[next++];
      if (entry) bytes += (await readFile(entry.secret, "utf8")).length;
    }
  };
  await Promise.all(Array.from({ length: Math.min(64, doc.given.length) }, worker));
  return bytes;
}

interface Row {
  n: number;
  plain: number;
  verifying: number;
  unwatched: number;
  baseline: number;
}

async function measure(n: number, passes: number): Promise<Row> {
  const watched = await measureOne(n, passes, true);
  const unwatched = await measureOne(n, Math.max(3, Math.ceil(passes / 5)), false);
  return {
    n,
    plain: watched.plain,
    verifying: watched.verifying,
    unwatched: unwatched.plain,
    baseline: watched.baseline,
  };
}

async function measureOne(
  n: number,
  passes: number,
  watch: boolean,
): Promise<{ plain: number; verifying: number; baseline: number }> {
  const dir = await tempDir(`pass-${n}-${watch ? "watched" : "unwatched"}`);
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  await file.add(Array.from({ length: n }, (_, i) => loginOf("c", i)));

  const adapter = new MemoryAdapter();
  adapter.recordCalls = false;
  const clock = new FakeClock();
  const logger = quietLogger();
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    clock,
    logger,
    watch,
    // The periodic timer never fires on its own: every pass measured is one asked for here.
    every: 1e12,
    verifyEvery: VERIFY_EVERY,
  });
  try {
    await handle.ready; // creates all N
    if (adapter.backend.size !== n)
      throw new Error(`first pass made ${adapter.backend.size} of ${n} consumers`);
    await handle.pass("periodic"); // warm-up: nothing changed, nothing verified

    const plain: number[] = [];
    const verifying: number[] = [];
    const baseline: number[] = [];
    for (let i = 0; i < passes; i++) {
      // Interleaved, so a noisy neighbour on a shared machine weighs on all three alike.
      let t = now();
      await readOnly(file.path);
      baseline.push(now() - t);

      t = now();
      await handle.pass("periodic");
      plain.push(now() - t);

      clock.advance(VERIFY_EVERY); // the next pass is due to verify every consumer with `holds`
      t = now();
      await handle.pass("periodic");
      verifying.push(now() - t);
    }
    const held = handle.status().consumers.filter((c) => c.state === "active" && c.why === "held as asked");
    if (held.length !== n) throw new Error(`after the passes ${held.length} of ${n} consumers are held`);
    if (logger.errors.length > 0 || logger.warnings.length > 0) {
      throw new Error(
        `the harness complained: ${[...logger.errors, ...logger.warnings].slice(0, 3).join(" | ")}`,
      );
    }
    return { plain: median(plain), verifying: median(verifying), baseline: median(baseline) };
  } finally {
    await handle.stop();
  }
}

runBench("pass-cost", async () => {
  const passes = Math.max(10, envInt("MESH_BENCH_PASSES", 15));
  const rows: Row[] = [];
  for (const n of sizes()) {
    say(`pass-cost: ${n} consumers, ${passes} passes of each kind`);
    rows.push(await measure(n, passes));
  }

  const first = rows[0];
  const last = rows[rows.length - 1];
  const body = [
    `median of ${passes} passes each; in-memory backend (MemoryAdapter, calls not recorded); FakeClock;`,
    `the harness watches its files (its default). A "plain" pass is the 5 s periodic pass over`,
    `unchanged consumers; a "verifying" pass is the once-a-minute one that also reads every secret`,
    `again and asks holds() for every consumer (8 at a time, no holdsMany), outside the lock.`,
    `"unwatched": the same plain pass with watch: false, which reads every secret every pass.`,
    `baseline I/O (same run): read the contributions file + JSON.parse + read every secret file.`,
    "",
    table(
      [
        "consumers",
        "plain pass",
        "µs/consumer",
        "verifying pass",
        "µs/consumer",
        "unwatched plain",
        "baseline I/O",
        "plain/baseline",
      ],
      rows.map((r) => [
        r.n,
        fmtMs(r.plain),
        ((r.plain / r.n) * 1000).toFixed(1),
        fmtMs(r.verifying),
        ((r.verifying / r.n) * 1000).toFixed(1),
        fmtMs(r.unwatched),
        fmtMs(r.baseline),
        fmtRatio(r.plain / r.baseline),
      ]),
    ),
    "",
  ];
  const atGoal = rows.find((r) => r.n === GOAL_AT);
  body.push(
    atGoal
      ? `goal: a plain pass over ${GOAL_AT} unchanged consumers ≤ ${GOAL_MS} ms; measured ${fmtMs(atGoal.plain)}: ` +
          `${atGoal.plain <= GOAL_MS ? "met" : "not met"}`
      : `goal: a plain pass over ${GOAL_AT} unchanged consumers ≤ ${GOAL_MS} ms; not measured (add ${GOAL_AT} to MESH_BENCH_SIZES)`,
    "",
  );
  if (first && last && last !== first) {
    const ideal = last.n / first.n;
    body.push(
      `growth ${last.n}/${first.n}: plain ${fmtRatio(last.plain / first.plain)}, verifying ` +
        `${fmtRatio(last.verifying / first.verifying)}, baseline I/O ${fmtRatio(last.baseline / first.baseline)} ` +
        `(ideal linear: ${fmtRatio(ideal)})`,
    );
  }
  body.push(
    "",
    "a plain pass, watched: read the contributions file and compare its text with the last one (parsed",
    "again only when it differs), read the secrets the watcher named (none here), count the unasked",
    "for retirement, and stamp the status board (made again only when a record changed).",
    "unwatched, per consumer and pass: read its secret file, check the login, SHA-256 digest of",
    "(login, password, values, derived) compared with the last one applied.",
    "a verifying pass adds, per consumer: read the secret, compare it with the one applied, one holds() under its timeout.",
  );
  printResult("pass-cost", body.join("\n"));
});
