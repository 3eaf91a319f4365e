// What the harness's own verify pass asks of the server: N consumers made by the Postgres adapter,
// then a harness (under a FakeClock, so a pass runs only when asked) over all of them, and its verify
// passes counted: every query and every new connection, by wrapping `pg.Client.prototype.query` and
// `connect` in this process before any adapter exists, and the server's own count of transactions
// (pg_stat_database xact_commit + xact_rollback, read after the server has flushed its statistics).
// Twice over: a superuser admin (reads pg_authid, so the verifiers are compared here: one query for
// all) and a non-superuser admin (cannot, so it logs in as each consumer: in its first verify pass,
// then spread over the time between passes, which the next pass takes the answers of). Each database
// takes about 7.5 MB of disk: 1,000 take about 7.5 GB. Goal: ≤ 0.01 round trips per consumer per
// pass with the superuser admin.
//
//   node --import tsx bench/postgres-verification.ts   (MESH_BENCH_CONSUMERS=1000 to change N)

import { readFile } from "node:fs/promises";
import pg from "pg";
import { createPostgresAdapter } from "@mesh/provider-postgres";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import {
  ContributionsFile,
  eachLimited,
  envInt,
  fmtMs,
  loginOf,
  meterMethod,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  sleep,
  table,
  tempDir,
  verdict,
  VerifyingHarness,
} from "./lib.ts";

const INSTANCE = "bench-verify";
const IFACE = "postgres-database";
const GOAL = 0.01;
/** Longer than PostgreSQL 15's idle flush of a backend's statistics (10 s). */
const STATS_FLUSH_MS = 11_000;

/** A failed create, with what the catalog and the server's log said about it right after. */
async function describeFailure(
  server: PostgresServer,
  login: string,
  err: unknown,
  attempt: number,
): Promise<string> {
  const what = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  const rows = await server
    .query<{ acl: string | null; open: boolean }>(
      `SELECT datacl::text AS acl, has_database_privilege('public', oid, 'CONNECT') AS open
         FROM pg_catalog.pg_database WHERE datname = $1`,
      [login],
    )
    .catch(() => []);
  const log = await readFile(server.logFile, "utf8").catch(() => "");
  const said = log
    .split("\n")
    .filter((l) => l.includes(login) && /WARNING|ERROR/.test(l))
    .slice(-3);
  return (
    `${login} (attempt ${attempt}): ${what.slice(0, 200)}; catalog just after: ` +
    `${rows[0] ? `datacl ${rows[0].acl ?? "NULL"}, PUBLIC may connect: ${rows[0].open}` : "no database"}` +
    (said.length > 0 ? `; server log: ${said.join(" / ")}` : "")
  );
}

interface Measured {
  readonly admin: string;
  readonly pass: string;
  readonly wallMs: number;
  readonly queries: number;
  readonly adminConnects: number;
  readonly logins: number;
  /** Transactions the server counted in the pass (its own statistics). */
  readonly serverXacts: number;
  readonly held: number;
  readonly unknown: number;
  readonly adapterCalls: number;
}

runBench("postgres-verification", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 1000);
  // Wrapped before any adapter exists, so every query and every new connection is seen.
  const queries = meterMethod(pg.Client.prototype, "query");
  onCleanup(() => queries.restore());
  const connectsBy = new Map<string, number>();
  const connect = pg.Client.prototype.connect;
  pg.Client.prototype.connect = function counted(this: pg.Client, ...args: unknown[]) {
    const user = String(this.user);
    connectsBy.set(user, (connectsBy.get(user) ?? 0) + 1);
    return (connect as unknown as (...a: unknown[]) => unknown).apply(this, args);
  } as unknown as typeof connect;
  onCleanup(() => {
    pg.Client.prototype.connect = connect;
  });

  say("postgres-verification: starting a private PostgreSQL");
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const adminUrl = await server.createAdmin("mesh_admin");
  const admins = new Set(["mesh_admin", decodeURIComponent(new URL(server.superuserUrl).username)]);
  const logins = (): number =>
    [...connectsBy].filter(([user]) => !admins.has(user)).reduce((sum, [, c]) => sum + c, 0);
  const adminConnects = (): number =>
    [...connectsBy].filter(([user]) => admins.has(user)).reduce((sum, [, c]) => sum + c, 0);
  const serverXacts = async (): Promise<number> => {
    await sleep(STATS_FLUSH_MS);
    const [row] = await server.query<{ n: string }>(
      "SELECT sum(xact_commit + xact_rollback)::text AS n FROM pg_catalog.pg_stat_database",
    );
    return Number(row?.n ?? Number.NaN);
  };

  say(
    `postgres-verification: making ${n} consumers (role + database each; about ${((n * 7.5) / 1000).toFixed(1)} GB)`,
  );
  const dir = await tempDir("pg-verify");
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  const names = Array.from({ length: n }, (_, i) => loginOf("v", i, 5));
  await file.add(names);
  const maker = createPostgresAdapter({ adminUrl, instance: INSTANCE, logger: quietLogger() });
  let makerClosed = false;
  onCleanup(() => (makerClosed ? undefined : maker.close()));
  const makeStarted = now();
  let made = 0;
  const failures: string[] = [];
  await eachLimited(names, 8, async (as) => {
    const p = { as, password: file.passwordOf(as), values: {}, derived: {} };
    // A failed create is tried again, as the harness's next pass would; each failure is reported.
    for (let attempt = 1; ; attempt++) {
      try {
        await maker.create(p, new AbortController().signal);
        break;
      } catch (err) {
        failures.push(await describeFailure(server, p.as, err, attempt));
        say(`postgres-verification: create failed: ${failures[failures.length - 1] ?? ""}`);
        if (attempt >= 3) throw err;
      }
    }
    if (++made % 100 === 0) say(`postgres-verification: ${made}/${n} made (${fmtMs(now() - makeStarted)})`);
  });
  const makeMs = now() - makeStarted;
  makerClosed = true;
  await maker.close();

  const results: Measured[] = [];
  const spread: { logins: number; ms: number }[] = [];
  let passEndedAt = 0;
  let loginsAtPassEnd = 0;
  const measure = async (
    admin: string,
    harness: VerifyingHarness,
    pass: string,
    rightBefore?: () => void,
  ): Promise<void> => {
    say(`postgres-verification: the harness's verify pass (${pass}), ${admin} admin`);
    const before = await serverXacts();
    rightBefore?.();
    queries.reset();
    const [adminBefore, loginsBefore] = [adminConnects(), logins()];
    const result = await harness.verifyPass();
    const counted = {
      queries: queries.calls,
      adminConnects: adminConnects() - adminBefore,
      logins: logins() - loginsBefore,
    };
    passEndedAt = now();
    loginsAtPassEnd = logins();
    // The pass's own transactions; the bench's two reads of the counter are one each.
    const xacts = (await serverXacts()) - before - 1;
    results.push({
      admin,
      pass,
      wallMs: result.ms,
      ...counted,
      serverXacts: xacts,
      held: result.held,
      unknown: result.unknown,
      adapterCalls: result.adapterCalls,
    });
  };

  for (const [admin, url] of [
    ["superuser", server.superuserUrl],
    ["non-superuser", adminUrl],
  ] as const) {
    const logger = quietLogger();
    const adapter = createPostgresAdapter({ adminUrl: url, instance: INSTANCE, logger });
    const harness = new VerifyingHarness(IFACE, adapter, file, INSTANCE);
    say(
      `postgres-verification: ${admin} admin: the harness's first pass applies all ${n} again (not counted)`,
    );
    await harness.start();
    await measure(admin, harness, "first verify");
    if (admin === "non-superuser") {
      // The logins spread over the time between passes (54 s by default), counted from the end of
      // the pass until the next one begins (the next pass's own logins are its own).
      let last = -1;
      while (now() - passEndedAt < 240_000) {
        await sleep(2_000);
        const seen = logins() - loginsAtPassEnd;
        if (seen >= n || (seen === last && now() - passEndedAt > 56_000)) break;
        last = seen;
      }
      const betweenEnd = { logins: 0, ms: 0 };
      spread.push(betweenEnd);
      const ended = passEndedAt;
      const atEnd = loginsAtPassEnd;
      await measure(admin, harness, "next verify", () => {
        betweenEnd.logins = logins() - atEnd;
        betweenEnd.ms = now() - ended;
      });
    } else {
      await measure(admin, harness, "next verify");
    }
    await harness.stop();
    results.forEach((r) => r.admin === admin && r.unknown > 0 && say(`${r.unknown} could not be checked`));
    if (logger.errors.length > 0) say(`harness errors: ${logger.errors.slice(0, 3).join(" | ")}`);
  }

  const per = (x: number): string => (x / n).toFixed(4);
  const superNext = results.find((r) => r.admin === "superuser" && r.pass === "next verify");
  const trips = (r: Measured | undefined): number =>
    r ? r.queries + r.adminConnects + r.logins : Number.NaN;
  const nonFirst = results.find((r) => r.admin === "non-superuser" && r.pass === "first verify");
  const nonNext = results.find((r) => r.admin === "non-superuser" && r.pass === "next verify");
  const [between] = spread;
  printResult(
    "postgres-verification",
    [
      `${n} consumers (made in ${fmtMs(makeMs)} by the adapter, 8 at a time, non-superuser admin); the harness's own`,
      "verify passes over all of them (its first pass, which applies every consumer again, is not counted).",
      "queries = calls of pg.Client#query; admin conn. = new admin connections; logins = connections as a consumer;",
      "server xacts = transactions in pg_stat_database over the pass (each query outside BEGIN is one).",
      `creates that failed and were tried again: ${failures.length}` +
        (failures.length > 0 ? `\n  ${failures.join("\n  ")}` : ""),
      "",
      table(
        [
          "admin",
          "pass",
          "wall",
          "holdsMany calls",
          "queries",
          "admin conn.",
          "logins",
          "server xacts",
          "round trips/consumer",
          "held",
        ],
        results.map((r) => [
          r.admin,
          r.pass,
          fmtMs(r.wallMs),
          r.adapterCalls,
          r.queries,
          r.adminConnects,
          r.logins,
          r.serverXacts,
          per(trips(r)),
          `${r.held}/${n}`,
        ]),
      ),
      "",
      `superuser admin, round trips per consumer per verify pass: ${verdict(
        per(trips(superNext)),
        `≤ ${GOAL}`,
        trips(superNext) / n <= GOAL,
      )}`,
      `non-superuser admin: the first verify pass logs in as each consumer (${nonFirst?.logins ?? "?"} logins);`,
      `then ${between?.logins ?? "?"} logins were made between the passes over ${fmtMs(between?.ms ?? Number.NaN)}, one at a time,`,
      `and the next pass made ${nonNext?.logins ?? "?"} logins itself (${per(trips(nonNext))} round trips per consumer).`,
      `goal for this admin, no pass makes every login after the first: ${verdict(
        `${nonNext?.logins ?? "?"} of ${n}`,
        `< ${n}`,
        (nonNext?.logins ?? n) < n,
      )}`,
    ].join("\n"),
  );
  if (results.some((r) => r.held !== n)) process.exitCode = 1;
});
