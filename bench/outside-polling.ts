// Whether a check "from outside" (psql polling every 50 ms until it sees every database) measures
// the provider or the polling: the same 200 consumers through the harness + Postgres adapter
// (superuser admin), and the same statements from one `psql -f`, each with and without a psql
// poller running beside it, all on one private server. Each figure is the wall time the work took
// by its own clock (the harness: rename → pass ended; the script: psql -f's run).
//
//   node --conditions=source --import tsx bench/outside-polling.ts   (MESH_BENCH_CONSUMERS=200)

import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { createPostgresAdapter } from "@mesh/provider-postgres";
import { startPostgres } from "@mesh/testkit";
import {
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  mintPassword,
  now,
  onCleanup,
  printResult,
  provisionThroughHarness,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const N = envInt("MESH_BENCH_CONSUMERS", 200);
const POLL_MS = 50;

/** Runs `psql args…` against `url`; resolves when it exits, rejects on a non-zero exit. */
function psql(url: string, args: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn("psql", [url, "-v", "ON_ERROR_STOP=1", "-Atq", ...args], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.on("exit", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`psql exited ${code}: ${err}`)),
    );
  });
}

/** Polls with a new psql every POLL_MS until `n` databases named `prefix…` exist; answers when. */
function poller(url: string, prefix: string, n: number): { seen: Promise<number>; polls: () => number } {
  let polls = 0;
  const seen = (async () => {
    for (;;) {
      polls++;
      const count = Number(
        (await psql(url, ["-c", `SELECT count(*) FROM pg_database WHERE datname LIKE '${prefix}%'`])).trim(),
      );
      if (count >= n) return now();
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  })();
  return { seen, polls: () => polls };
}

runBench("outside-polling", async () => {
  say(`outside-polling: private PostgreSQL, ${N} consumers per way`);
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const url = server.superuserUrl;
  const dir = await tempDir("outside");
  const rows: (string | number)[][] = [];
  const times = new Map<string, number>();

  const raw = async (prefix: string, polled: boolean): Promise<void> => {
    const lines: string[] = [];
    for (let i = 0; i < N; i++) {
      const login = loginOf(prefix, i, 4);
      const pw = mintPassword().replace(/'/g, "''");
      lines.push(
        `CREATE ROLE ${login} LOGIN PASSWORD '${pw}';`,
        `CREATE DATABASE ${login} OWNER ${login};`,
        `REVOKE CONNECT, TEMPORARY ON DATABASE ${login} FROM PUBLIC;`,
      );
    }
    const file = join(dir, `${prefix}.sql`);
    await writeFile(file, lines.join("\n") + "\n");
    const started = now();
    const poll = polled ? poller(url, prefix, N) : undefined;
    await psql(url, ["-f", file]);
    const took = now() - started;
    const seenMs = poll === undefined ? undefined : (await poll.seen) - started;
    times.set(`raw${polled ? "+poll" : ""}`, took);
    rows.push([
      `psql -f${polled ? ", polled" : ""}`,
      fmtMs(took),
      seenMs === undefined ? "-" : fmtMs(seenMs),
      poll?.polls() ?? "-",
    ]);
  };

  const provider = async (prefix: string, polled: boolean): Promise<void> => {
    const logger = quietLogger();
    const adapter = createPostgresAdapter({ adminUrl: url, instance: `out-${prefix}`, logger });
    let started = 0;
    let poll: ReturnType<typeof poller> | undefined;
    const run = await provisionThroughHarness({
      iface: "postgres-database",
      adapter,
      instance: `out-${prefix}`,
      logins: Array.from({ length: N }, (_, i) => loginOf(prefix, i, 4)),
      beforeChange: () => {
        started = now();
        if (polled) poll = poller(url, prefix, N);
      },
    });
    const seenMs = poll === undefined ? undefined : (await poll.seen) - started;
    if (run.problems.length > 0) throw new Error(run.problems.join("; "));
    times.set(`provider${polled ? "+poll" : ""}`, run.wallMs);
    rows.push([
      `provider${polled ? ", polled" : ""}`,
      fmtMs(run.wallMs),
      seenMs === undefined ? "-" : fmtMs(seenMs),
      poll?.polls() ?? "-",
    ]);
  };

  // Warm the server (its first CREATE DATABASE pays for the template's pages).
  await new pg.Client({ connectionString: url }).connect().then((c) => c.end());
  say("outside-polling: raw, provider, provider polled, raw polled");
  await raw("ra", false);
  await provider("pa", false);
  await provider("pb", true);
  await raw("rb", true);

  const r = times.get("raw") ?? Number.NaN;
  const rp = times.get("raw+poll") ?? Number.NaN;
  const p = times.get("provider") ?? Number.NaN;
  const pp = times.get("provider+poll") ?? Number.NaN;
  printResult(
    "outside-polling",
    [
      `${N} consumers (role + database + REVOKE) per way, superuser admin, one private PostgreSQL; the poller`,
      `runs a new psql every ${POLL_MS} ms (SELECT count(*) FROM pg_database) until it sees all ${N}.`,
      "",
      table(["way", "work took", "poller saw all after", "polls"], rows),
      "",
      `provider/raw unpolled ${fmtRatio(p / r)}; polled ${fmtRatio(pp / rp)} (by the work's own clocks)`,
      `the poller slowed the provider by ${fmtRatio(pp / p)} and the script by ${fmtRatio(rp / r)}`,
    ].join("\n"),
  );
});
