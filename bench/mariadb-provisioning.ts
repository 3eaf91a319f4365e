// What the MariaDB provider costs over doing the same by hand, and what verifying costs, both on
// the harness's own path.
//
// 1. N new consumers (user + mark + database + grant) through the harness (watching, 8 creates at
//    once) and the adapter, timed from the contributions file's rename until the pass that made
//    them has ended, against a plain script sending the same writes at the same concurrency (8
//    connections, one consumer's statements after another on each). Same private server, same
//    non-root admin, each with its own N logins; the script runs in two halves around the harness.
//    Goal: harness ≤ 2× the script (the goal set for Redis, held to here too).
// 2. The harness's own verify passes over the N consumers, counted by the server itself (the
//    global status counter Questions, read by root before and after) and by a wrapper round the
//    adapter's pool. Goal: ≤ 0.01 round trips per consumer per pass.
//
//   node --import tsx bench/mariadb-provisioning.ts   (MESH_BENCH_CONSUMERS=1000 changes N)

import mysql from "mysql2/promise";
import {
  createMariadbAdapter,
  grantPattern,
  MARKS_SCHEMA,
  nativePasswordHash,
  type MariadbPool,
} from "@mesh/provider-mariadb";
import { startMariadb } from "@mesh/testkit";
import {
  ContributionsFile,
  eachLimited,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  median,
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
  verdict,
  VerifyingHarness,
} from "./lib.ts";

const INSTANCE = "bench";
const IFACE = "mysql-database";
const CONCURRENCY = 8;
/** The issue's goal for Redis (N consumers against a plain client), held to here too. */
const GOAL = 2;
const VERIFY_GOAL = 0.01;
const VERIFY_PASSES = 5;
const never = new AbortController().signal;

/** Counts the statements the adapter sends, by their first word. */
class CountingPool implements MariadbPool {
  count = 0;
  readonly kinds = new Map<string, number>();
  constructor(private readonly inner: MariadbPool) {}
  query(sql: string): Promise<[unknown, unknown]> {
    this.count++;
    const words = sql.trim().split(/\s+/, 2);
    const from = /\bFROM\s+([\w.`]+)/i.exec(sql)?.[1]?.replace(/`/g, "");
    const kind =
      words[0]?.toUpperCase() === "SELECT" ? `SELECT … ${from ?? ""}` : words.join(" ").toUpperCase();
    this.kinds.set(kind, (this.kinds.get(kind) ?? 0) + 1);
    return this.inner.query(sql);
  }
  end(): Promise<void> {
    return this.inner.end();
  }
  reset(): void {
    this.count = 0;
    this.kinds.clear();
  }
}

/** The writes the adapter sends for a new consumer, as a person would script them. */
function rawStatements(login: string, password: string): string[] {
  const marks = `${mysql.escapeId(MARKS_SCHEMA)}.${mysql.escapeId("marks")}`;
  return [
    mysql.format(`INSERT INTO ${marks} (login, instance, db, state) VALUES (?, ?, ?, 'active')`, [
      login,
      INSTANCE,
      login,
    ]),
    mysql.format("CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY PASSWORD ?", [
      login,
      nativePasswordHash(password),
    ]),
    mysql.format("CREATE DATABASE IF NOT EXISTS ?? CHARACTER SET utf8mb4", [login]),
    mysql.format(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(grantPattern(login))}.* TO ?@'%'`, [login]),
  ];
}

/** Statements per consumer in the plain script. */
const RAW_STATEMENTS = 4;

/** The plain script: each consumer's writes in order, `CONCURRENCY` connections at once. */
async function rawRun(adminUrl: string, logins: readonly string[]): Promise<number> {
  const pool = mysql.createPool({ uri: adminUrl, connectionLimit: CONCURRENCY });
  try {
    // Open the connections before the clock starts, as a script's client would have them.
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => (await pool.getConnection()).release()),
    );
    const started = now();
    await eachLimited(logins, CONCURRENCY, async (login) => {
      const connection = await pool.getConnection();
      try {
        for (const sql of rawStatements(login, mintPassword())) await connection.query(sql);
      } finally {
        connection.release();
      }
    });
    return now() - started;
  } finally {
    await pool.end();
  }
}

runBench("mariadb-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 1000);
  const half = Math.floor(n / 2);

  say("mariadb-provisioning: starting a private MariaDB");
  const server = await startMariadb();
  onCleanup(() => server.stop());
  const adminUrl = new URL(await server.createAdmin("mesh_admin"));
  const root = await mysql.createConnection(server.rootUrl);
  onCleanup(() => root.end());
  const questions = async (): Promise<number> => {
    const [rows] = await root.query("SHOW GLOBAL STATUS LIKE 'Questions'");
    return Number((rows as { Value: string }[])[0]?.Value ?? Number.NaN);
  };

  const adapterFor = (instance: string) => {
    let counting: CountingPool | undefined;
    const logger = quietLogger();
    const adapter = createMariadbAdapter({
      adminUrl: adminUrl.toString(),
      instance,
      logger,
      wrapPool: (pool) => (counting = new CountingPool(pool)),
    });
    onCleanup(() => adapter.close());
    return { adapter, pool: counting!, logger };
  };

  // The marks table is made once by the first create; the script needs it before.
  const warm = adapterFor(INSTANCE);
  await warm.adapter.create({ as: "warm_up", password: mintPassword(), values: {}, derived: {} }, never);
  await warm.adapter.close();
  const logins = (prefix: string, from: number, count: number): string[] =>
    Array.from({ length: count }, (_, i) => loginOf(prefix, from + i, 4));

  // ---- 1. provisioning ----
  say(`mariadb-provisioning: plain script at concurrency ${CONCURRENCY}, first ${half} consumers`);
  const rawAMs = await rawRun(adminUrl.toString(), logins("r", 0, half));

  say(`mariadb-provisioning: harness + adapter (concurrency ${CONCURRENCY}), ${n} consumers written at once`);
  const made = adapterFor(INSTANCE);
  const run = await provisionThroughHarness({
    iface: IFACE,
    adapter: made.adapter,
    instance: INSTANCE,
    logins: logins("m", 0, n),
    concurrency: CONCURRENCY,
    beforeChange: () => made.pool.reset(),
  });
  const createStatements = made.pool.count;
  const createKinds = new Map(made.pool.kinds);

  say(`mariadb-provisioning: plain script at concurrency ${CONCURRENCY}, last ${n - half} consumers`);
  const rawBMs = await rawRun(adminUrl.toString(), logins("r", half, n - half));
  const rawMs = rawAMs + rawBMs;

  // ---- 2. verification through the harness's own pass ----
  say(`mariadb-provisioning: the harness's verify passes over ${n} consumers, ${VERIFY_PASSES} of them`);
  const dir = await tempDir("mariadb-verify");
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  await file.add(logins("v", 0, n));
  const verifying = adapterFor(INSTANCE);
  const harness = new VerifyingHarness(IFACE, verifying.adapter, file, INSTANCE);
  say(`mariadb-provisioning: (the harness's first pass makes the ${n} it will verify)`);
  await harness.start();
  const passMs: number[] = [];
  const sent: number[] = [];
  const seen: number[] = [];
  let held = 0;
  for (let pass = 0; pass < VERIFY_PASSES; pass++) {
    const before = await questions();
    verifying.pool.reset();
    const result = await harness.verifyPass();
    // The second SHOW counts itself; the first was counted before `before` was read.
    seen.push((await questions()) - before - 1);
    passMs.push(result.ms);
    sent.push(verifying.pool.count);
    held = result.held;
  }
  await harness.stop();
  const sentPer = median(sent) / n;
  const seenPer = median(seen) / n;

  const ratio = run.wallMs / rawMs;
  const problems = [...run.problems, ...verifying.logger.errors];
  printResult(
    "mariadb-provisioning",
    [
      `${n} new consumers (mark, user with the native-password hash, utf8mb4 database, grant on it alone)`,
      `MariaDB private server, the same non-root admin for both; everything at concurrency ${CONCURRENCY}`,
      "(the adapter's pool holds 4 connections, its default; the script has 8).",
      "",
      table(
        ["way", "wall", "per consumer", "statements"],
        [
          [
            "harness + adapter (rename → pass ended)",
            fmtMs(run.wallMs),
            fmtMs(run.wallMs / n),
            createStatements,
          ],
          ["plain script, the same writes", fmtMs(rawMs), fmtMs(rawMs / n), RAW_STATEMENTS * n],
        ],
      ),
      "",
      `ratio harness/script: ${verdict(fmtRatio(ratio), `≤ ${GOAL}×`, ratio <= GOAL)}`,
      `adapter statements per consumer: ${(createStatements / n).toFixed(2)} ` +
        `(${[...createKinds].map(([k, c]) => `${k} ${(c / n).toFixed(2)}`).join(", ")}): it reads what is there first,`,
      "five catalog queries in parallel, so that it writes only what is missing and never touches what it did not make.",
      "",
      `the harness's verify pass over ${n} consumers (median of ${VERIFY_PASSES}):`,
      table(
        ["wall", "statements (client)", "statements (server's Questions)", "held"],
        [[fmtMs(median(passMs)), median(sent), median(seen), held]],
      ),
      `round trips per consumer per verify pass: ${verdict(
        `${sentPer.toFixed(4)} (server counted ${seenPer.toFixed(4)})`,
        `≤ ${VERIFY_GOAL}`,
        sentPer <= VERIFY_GOAL && seenPer <= VERIFY_GOAL,
      )}`,
      `verify pass times: ${passMs.map(fmtMs).join(", ")}`,
      problems.length > 0 ? `harness said: ${problems.slice(0, 3).join(" | ")}` : "harness warnings: none",
    ].join("\n"),
  );
  if (run.created !== n || held !== n) {
    say(`only ${run.created} created and ${held} held of ${n}`);
    process.exitCode = 1;
  }
});
