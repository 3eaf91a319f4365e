// What the MariaDB provider costs over doing the same by hand, and what verifying costs.
//
// 1. N new consumers (user + mark + database + grant) through the adapter, one `create` after
//    another as the harness calls it, against a plain SQL script sending the same writes piped
//    into one `mariadb` client process. Same private server, same non-root admin, each with its own
//    N logins. The script runs in two halves around the adapter's run, so whatever drifts on the
//    server over the run weighs on both alike.
// 2. A verification pass over M consumers with `holdsMany`: statements sent per consumer and wall
//    time, next to `holds` asked one consumer at a time.
//
//   node --import tsx bench/mariadb-provisioning.ts
//   (MESH_BENCH_CONSUMERS=200 and MESH_BENCH_VERIFY=1000 change N and M)

import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import mysql from "mysql2/promise";
import { guardAdapter, type GuardedAdapter, type Provision } from "@mesh/sdk";
import {
  createMariadbAdapter,
  grantPattern,
  MARKS_SCHEMA,
  nativePasswordHash,
  type MariadbPool,
} from "@mesh/provider-mariadb";
import { startMariadb } from "@mesh/testkit";
import {
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  median,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const INSTANCE = "bench";
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
function rawScript(consumers: readonly { login: string; password: string }[]): string {
  const marks = `${mysql.escapeId(MARKS_SCHEMA)}.${mysql.escapeId("marks")}`;
  const lines: string[] = [];
  for (const { login, password } of consumers) {
    lines.push(
      mysql.format(`INSERT INTO ${marks} (login, instance, db, state) VALUES (?, ?, ?, 'active');`, [
        login,
        INSTANCE,
        login,
      ]),
      mysql.format("CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY PASSWORD ?;", [
        login,
        nativePasswordHash(password),
      ]),
      mysql.format("CREATE DATABASE IF NOT EXISTS ?? CHARACTER SET utf8mb4;", [login]),
      mysql.format(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(grantPattern(login))}.* TO ?@'%';`, [login]),
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Statements per consumer in `rawScript`. */
const RAW_STATEMENTS = 4;

/** Pipes `script` into one `mariadb` client process as the admin; answers its wall time. */
async function runScript(clientCnf: string, script: string): Promise<number> {
  const started = now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn("mariadb", [`--defaults-file=${clientCnf}`, "--batch", "--silent"], {
      stdio: ["pipe", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`mariadb client exited ${code}: ${stderr.trim()}`)),
    );
    child.stdin.end(script);
  });
  return now() - started;
}

function consumers(prefix: string, from: number, count: number): { login: string; password: string }[] {
  return Array.from({ length: count }, (_, i) => ({
    login: loginOf(prefix, from + i, 4),
    password: mintPassword(),
  }));
}

runBench("mariadb-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 200);
  const m = Math.max(envInt("MESH_BENCH_VERIFY", 1000), n);
  const half = Math.floor(n / 2);

  say("mariadb-provisioning: starting a private MariaDB");
  const server = await startMariadb();
  onCleanup(() => server.stop());
  const adminUrl = new URL(await server.createAdmin("mesh_admin"));
  const dir = await tempDir("mariadb");
  const clientCnf = join(dir, "client.cnf");
  await writeFile(
    clientCnf,
    `[client]\nhost=${server.host}\nport=${server.port}\nuser=${decodeURIComponent(adminUrl.username)}\n` +
      `password=${decodeURIComponent(adminUrl.password)}\n`,
    { mode: 0o600 },
  );

  let counting: CountingPool | undefined;
  const logger = quietLogger();
  const adapter: GuardedAdapter = guardAdapter(
    createMariadbAdapter({
      adminUrl: adminUrl.toString(),
      instance: INSTANCE,
      logger,
      wrapPool: (pool) => (counting = new CountingPool(pool)),
    }),
    { instance: INSTANCE },
  );
  onCleanup(() => adapter.close());
  const pool = counting!;
  // The marks table is made once by the first create; the script needs it before.
  await adapter.create({ as: "warm_up", password: mintPassword(), values: {}, derived: {} }, never);

  // ---- 1. provisioning ----
  const rawA = consumers("r", 0, half);
  say(`mariadb-provisioning: raw SQL script, first ${half} consumers`);
  const rawAMs = await runScript(clientCnf, rawScript(rawA));

  const made: Provision[] = consumers("m", 0, n).map(({ login, password }) => ({
    as: login,
    password,
    values: {},
    derived: {},
  }));
  say(`mariadb-provisioning: adapter, ${n} consumers one create after another`);
  pool.reset();
  let t = now();
  for (const p of made) await adapter.create(p, never);
  const adapterMs = now() - t;
  const createStatements = pool.count;
  const createKinds = new Map(pool.kinds);

  const rawB = consumers("r", half, n - half);
  say(`mariadb-provisioning: raw SQL script, last ${n - half} consumers`);
  const rawBMs = await runScript(clientCnf, rawScript(rawB));
  const rawMs = rawAMs + rawBMs;

  // ---- 2. verification ----
  const extra = consumers("r", n, m - n);
  say(`mariadb-provisioning: ${m - n} more consumers by script, for a verification pass over ${m}`);
  await runScript(clientCnf, rawScript(extra));
  const all: Provision[] = [
    ...made,
    ...[...rawA, ...rawB, ...extra].slice(0, m - n).map(({ login, password }) => ({
      as: login,
      password,
      values: {},
      derived: {},
    })),
  ];

  say(`mariadb-provisioning: holdsMany over ${all.length} consumers, 5 rounds`);
  const manyMs: number[] = [];
  let manyStatements = 0;
  let held = 0;
  for (let round = 0; round < 5; round++) {
    pool.reset();
    t = now();
    const answers = await adapter.holdsMany(all, never);
    manyMs.push(now() - t);
    manyStatements = pool.count;
    held = [...answers.values()].filter((a) => a === true).length;
  }

  say(`mariadb-provisioning: holds one consumer at a time over ${all.length} consumers`);
  pool.reset();
  t = now();
  let heldOneByOne = 0;
  for (const p of all) if (await adapter.holds(p, never)) heldOneByOne++;
  const oneMs = now() - t;
  const oneStatements = pool.count;

  const ratio = adapterMs / rawMs;
  printResult(
    "mariadb-provisioning",
    [
      `${n} new consumers (mark, user with the native-password hash, utf8mb4 database, grant on it alone)`,
      `MariaDB private server, the same non-root admin for both; the adapter one create after another.`,
      "",
      table(
        ["way", "wall", "per consumer", "statements"],
        [
          ["adapter (create, sequential)", fmtMs(adapterMs), fmtMs(adapterMs / n), createStatements],
          ["raw SQL piped into one mariadb client", fmtMs(rawMs), fmtMs(rawMs / n), RAW_STATEMENTS * n],
        ],
      ),
      "",
      `ratio adapter/raw: ${fmtRatio(ratio)} (the adapter first reads what is there, five catalog queries in`,
      "parallel, so that it writes only what is missing and never touches what it did not make)",
      `adapter statements per consumer: ${(createStatements / n).toFixed(2)} ` +
        `(${[...createKinds].map(([k, c]) => `${k} ${(c / n).toFixed(2)}`).join(", ")})`,
      "",
      `verification over ${all.length} consumers:`,
      table(
        ["way", "wall (median)", "per consumer", "statements", "statements per consumer", "held"],
        [
          [
            "holdsMany (batched)",
            fmtMs(median(manyMs)),
            fmtMs(median(manyMs) / all.length),
            manyStatements,
            (manyStatements / all.length).toFixed(3),
            held,
          ],
          [
            "holds, one at a time",
            fmtMs(oneMs),
            fmtMs(oneMs / all.length),
            oneStatements,
            (oneStatements / all.length).toFixed(3),
            heldOneByOne,
          ],
        ],
      ),
      `holdsMany rounds: ${manyMs.map(fmtMs).join(", ")}`,
      logger.warnings.length + logger.errors.length > 0
        ? `adapter said: ${[...logger.errors, ...logger.warnings].slice(0, 3).join(" | ")}`
        : "adapter warnings: none",
    ].join("\n"),
  );
  if (held !== all.length || heldOneByOne !== all.length) {
    say(`only ${held} (batched) and ${heldOneByOne} (one by one) of ${all.length} held`);
    process.exitCode = 1;
  }
});
