// What one verify pass asks of the server: N consumers made by the Postgres adapter, then each
// checked once with `holdsMany` (the batched check the harness uses) and, for comparison, with one
// `holds` per consumer (8 at a time, as the harness does for an adapter without `holdsMany`).
// Round trips are counted by wrapping `pg.Client.prototype.query` and `connect` in this process
// before any adapter exists. Twice over: a superuser admin (can read pg_authid, so the verifiers are
// compared here: a constant number of queries) and a non-superuser admin (cannot, so it logs in as
// each consumer). Each database takes about 7.5 MB of disk: 1,000 take about 7.5 GB.
//
//   node --import tsx bench/postgres-verification.ts   (MESH_BENCH_CONSUMERS=1000 to change N)

import { readFile } from "node:fs/promises";
import pg from "pg";
import { guardAdapter, type Provision } from "@mesh/sdk";
import { createPostgresAdapter } from "@mesh/provider-postgres";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import {
  envInt,
  fmtMs,
  loginOf,
  meterMethod,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
} from "./lib.ts";

const INSTANCE = "bench-verify";
/** How long the harness waits for one verifying call before it gives up on the rest of the pass. */
const HOLDS_TIMEOUT = 30_000;

async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

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
  readonly method: string;
  readonly wallMs: number;
  readonly queries: number;
  readonly connects: number;
  readonly held: number;
  readonly errors: number;
  /** The longest single call, to set against the harness's holds timeout. */
  readonly longestCallMs: number;
}

runBench("postgres-verification", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 1000);
  // Wrapped before any adapter exists, so every query and every new connection is seen.
  const queries = meterMethod(pg.Client.prototype, "query");
  const connects = meterMethod(pg.Client.prototype, "connect");
  onCleanup(() => {
    queries.restore();
    connects.restore();
  });

  say("postgres-verification: starting a private PostgreSQL");
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const adminUrl = await server.createAdmin("mesh_admin");

  say(
    `postgres-verification: making ${n} consumers (role + database each; about ${((n * 7.5) / 1000).toFixed(1)} GB)`,
  );
  const consumers: Provision[] = Array.from({ length: n }, (_, i) => ({
    as: loginOf("v", i, 5),
    password: mintPassword(),
    values: {},
    derived: {},
  }));
  const maker = createPostgresAdapter({ adminUrl, instance: INSTANCE, logger: quietLogger() });
  onCleanup(() => maker.close());
  const makeStarted = now();
  let made = 0;
  const failures: string[] = [];
  await forEachLimited(consumers, 8, async (p) => {
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
  await maker.close();

  const measure = async (admin: string, url: string, method: "holdsMany" | "holds"): Promise<Measured> => {
    say(`postgres-verification: one verify pass with ${method}, ${admin} admin`);
    // A fresh adapter each time: its first question about the admin is part of the pass it serves.
    const adapter = guardAdapter(
      createPostgresAdapter({ adminUrl: url, instance: INSTANCE, logger: quietLogger() }),
      {
        instance: INSTANCE,
      },
    );
    onCleanup(() => adapter.close());
    const signal = new AbortController().signal;
    let held = 0;
    let errors = 0;
    let longestCallMs = 0;
    queries.reset();
    connects.reset();
    const started = now();
    if (method === "holdsMany") {
      const answers = await adapter.holdsMany(consumers, signal);
      longestCallMs = now() - started;
      for (const p of consumers) {
        const answer = answers.get(p.as);
        if (answer === true) held++;
        else if (answer instanceof Error) errors++;
      }
    } else {
      await forEachLimited(consumers, 8, async (p) => {
        const t = now();
        try {
          if (await adapter.holds(p, signal)) held++;
        } catch {
          errors++;
        }
        longestCallMs = Math.max(longestCallMs, now() - t);
      });
    }
    const wallMs = now() - started;
    const counted = { queries: queries.calls, connects: connects.calls };
    await adapter.close();
    return { admin, method, wallMs, ...counted, held, errors, longestCallMs };
  };

  const results: Measured[] = [];
  for (const [admin, url] of [
    ["superuser", server.superuserUrl],
    ["non-superuser", adminUrl],
  ] as const) {
    results.push(await measure(admin, url, "holdsMany"));
    results.push(await measure(admin, url, "holds"));
  }

  const perConsumer = (x: number): string => (x / n).toFixed(4);
  const superMany = results.find((r) => r.admin === "superuser" && r.method === "holdsMany");
  const goal = superMany ? superMany.queries / n : Number.NaN;
  printResult(
    "postgres-verification",
    [
      `${n} consumers (made in ${fmtMs(makeMs)} by the adapter, 8 at a time, non-superuser admin); one verify`,
      "pass each way, with a fresh adapter (its first connection and its question about the admin count).",
      "queries = calls of pg.Client#query; connections = calls of pg.Client#connect (admin pool + consumer logins).",
      `creates that failed and were tried again: ${failures.length}` +
        (failures.length > 0 ? `\n  ${failures.join("\n  ")}` : ""),
      "",
      table(
        [
          "admin",
          "method",
          "wall",
          "queries",
          "queries/consumer",
          "connections",
          "conn/consumer",
          "held",
          "errors",
          "longest call",
        ],
        results.map((r) => [
          r.admin,
          r.method,
          fmtMs(r.wallMs),
          r.queries,
          perConsumer(r.queries),
          r.connects,
          perConsumer(r.connects),
          `${r.held}/${n}`,
          r.errors,
          fmtMs(r.longestCallMs),
        ]),
      ),
      "",
      `goal, superuser holdsMany ≤ 0.01 round trips per consumer: ${goal.toFixed(4)} queries + ` +
        `${superMany ? perConsumer(superMany.connects) : "n/a"} connections per consumer — ` +
        `${superMany && (superMany.queries + superMany.connects) / n <= 0.01 ? "met" : "NOT met"}`,
      ...results
        .filter((r) => r.longestCallMs > HOLDS_TIMEOUT)
        .map(
          (r) =>
            `WARNING: ${r.admin} ${r.method} took ${fmtMs(r.longestCallMs)} in one call, longer than the harness's ` +
            `${HOLDS_TIMEOUT / 1000} s holds timeout: the harness would give up on that pass's checks`,
        ),
    ].join("\n"),
  );
  if (results.some((r) => r.held !== n)) process.exitCode = 1;
});
