// How long a new consumer takes to exist after the agent writes it into the contributions file,
// with a private PostgreSQL, the Postgres adapter under a non-superuser admin, and the harness
// watching the file (every 5 s periodic pass as the safety net, the real default). Baselines, in
// the same run: the statements the adapter needs for a new consumer sent raw over one admin
// connection (CREATE ROLE with its SCRAM verifier ready, COMMENT, GRANT, CREATE DATABASE, REVOKE),
// one right after each watched change, so what the mesh adds is the watched time beyond them
// (goal: ≤ 20 ms at p50, ≤ 100 ms at p99), and no change waiting more than 50 ms on a verify pass
// (its rename → create() begins, for a change whose wait overlapped one: the part the harness owns);
// and the same harness with watching off, so only the 5 s periodic pass notices a change.
//
// "Exists" is the harness's `created` action, appended right after create returned, which is after
// the role and its database exist; a few are cross-checked in the catalog and by logging in.
//
//   node --import tsx bench/convergence.ts   (MESH_BENCH_CHANGES=200, MESH_BENCH_BASELINE_CHANGES=20)

import pg from "pg";
import { runProvisioner, type ProvisionerHandle } from "@mesh/sdk";
import { createPostgresAdapter, formatMark, scramVerifier } from "@mesh/provider-postgres";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  sleep,
  summarize,
  table,
  tempDir,
  type QuietLogger,
  type Summary,
  verdict,
} from "./lib.ts";

const IFACE = "postgres-database";
const CREATED_TIMEOUT = 120_000;
const GOAL_P50 = 20;
const GOAL_P99 = 100;
const GOAL_VERIFY_WAIT = 50;

const signed = (ms: number): string => `${ms < 0 ? "-" : "+"}${fmtMs(Math.abs(ms))}`;

/**
 * The adapter's statements for one new consumer sent raw over one admin connection, its verifier
 * computed before the clock starts (as a generated script would carry it). Answers their time.
 */
async function rawCreate(client: pg.Client, admin: string, login: string): Promise<number> {
  const verifier = await scramVerifier(mintPassword());
  const role = pg.escapeIdentifier(login);
  const mark = formatMark({ instance: "bench-raw", database: login, state: "active" });
  const started = now();
  await client.query(`CREATE ROLE ${role} LOGIN PASSWORD ${pg.escapeLiteral(verifier)}`);
  await client.query(`COMMENT ON ROLE ${role} IS ${pg.escapeLiteral(mark)}`);
  await client.query(`GRANT ${role} TO ${pg.escapeIdentifier(admin)}`);
  await client.query(`CREATE DATABASE ${role} OWNER ${role}`);
  await client.query(`REVOKE CONNECT, TEMPORARY ON DATABASE ${role} FROM PUBLIC`);
  return now() - started;
}

/** The harness over one contributions file, with the monotonic time of each `created` action. */
interface Loop {
  readonly file: ContributionsFile;
  readonly handle: ProvisionerHandle;
  readonly logger: QuietLogger;
  /** Resolves with the monotonic time `login` was recorded created. */
  created(login: string): Promise<number>;
  /** Catalog checks started at the very moment of a `created` action, for the logins sampled. */
  readonly checks: Promise<string | null>[];
  sample(login: string): void;
  /** Monotonic time each create began and how long it took, by login. */
  readonly creates: Map<string, { startedAt: number; tookMs: number }>;
  /**
   * When each verify call (`holdsMany`) ran, over how many consumers, and until when its answers
   * were judged (`judged`: the last consumer's verdict, under the harness's lock).
   */
  readonly verifies: { from: number; to: number; judged: number; consumers: number }[];
}

async function startLoop(
  server: PostgresServer,
  adminUrl: string,
  instance: string,
  watch: boolean,
): Promise<Loop> {
  const dir = await tempDir(`conv-${instance}`);
  const file = new ContributionsFile(dir, IFACE);
  await file.write(); // an empty list, so the first pass reads a file, not a missing one
  const logger = quietLogger();
  const at = new Map<string, number>();
  const waiting = new Map<string, (t: number) => void>();
  const sampled = new Set<string>();
  const checks: Promise<string | null>[] = [];
  const adapter = createPostgresAdapter({ adminUrl, instance, logger });
  const creates = new Map<string, { startedAt: number; tookMs: number }>();
  const create = adapter.create.bind(adapter);
  // Splits each wait into "the harness noticed and got to it" and "the server did the work".
  adapter.create = async (p, signal) => {
    const startedAt = now();
    try {
      await create(p, signal);
    } finally {
      if (!creates.has(p.as)) creates.set(p.as, { startedAt, tookMs: now() - startedAt });
    }
  };
  const verifies: { from: number; to: number; judged: number; consumers: number }[] = [];
  const holdsMany = adapter.holdsMany.bind(adapter);
  // A verify pass holds the harness's lock: a change arriving meanwhile waits for it to end.
  adapter.holdsMany = async (ps, signal) => {
    const from = now();
    try {
      return await holdsMany(ps, signal);
    } finally {
      const to = now();
      verifies.push({ from, to, judged: to, consumers: ps.length });
    }
  };
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    instance,
    watch,
    logger,
    // Each verdict moves the end of the last verify pass: its answers are judged after holdsMany.
    metrics: {
      passed: () => {},
      created: () => {},
      failed: () => {},
      roundTrip: () => {},
      retired: () => {},
      deleted: () => {},
      verified: () => {
        const last = verifies.at(-1);
        if (last !== undefined) last.judged = now();
      },
    },
    actions: {
      append(entry) {
        if (entry.action !== "created") return;
        const t = now();
        at.set(entry.login, t);
        waiting.get(entry.login)?.(t);
        if (sampled.has(entry.login)) checks.push(crossCheck(server, file, entry.login));
      },
    },
  });
  onCleanup(() => handle.stop());
  await handle.ready;
  return {
    file,
    handle,
    logger,
    checks,
    creates,
    verifies,
    sample: (login) => sampled.add(login),
    created(login) {
      const known = at.get(login);
      if (known !== undefined) return Promise.resolve(known);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`${login} was not created within ${CREATED_TIMEOUT / 1000}s`)),
          CREATED_TIMEOUT,
        );
        waiting.set(login, (t) => {
          clearTimeout(timer);
          waiting.delete(login);
          resolve(t);
        });
      });
    },
  };
}

/** Whether, right at the `created` action, the role and its database are there and the password works. */
async function crossCheck(
  server: PostgresServer,
  file: ContributionsFile,
  login: string,
): Promise<string | null> {
  const rows = await server.query<{ login: boolean; owner: string | null }>(
    `SELECT r.rolcanlogin AS login, (SELECT pg_catalog.pg_get_userbyid(d.datdba) FROM pg_catalog.pg_database d
        WHERE d.datname = r.rolname) AS owner FROM pg_catalog.pg_roles r WHERE r.rolname = $1`,
    [login],
  );
  const row = rows[0];
  if (!row) return `${login}: no role at its created action`;
  if (!row.login) return `${login}: role cannot log in at its created action`;
  if (row.owner !== login) return `${login}: database missing or not owned by it at its created action`;
  const client = new pg.Client({
    host: server.host,
    port: server.port,
    user: login,
    password: file.passwordOf(login),
    database: login,
  });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (err) {
    return `${login}: cannot log in with its password (${err instanceof Error ? err.message : String(err)})`;
  } finally {
    await client.end().catch(() => {});
  }
  return null;
}

/** How many consumers are active, and how many are anything else (none should be). */
function tally(handle: ProvisionerHandle): { active: number; other: number } {
  const consumers = handle.status().consumers;
  const active = consumers.filter((c) => c.state === "active").length;
  return { active, other: consumers.length - active };
}

async function settleChecks(loop: Loop): Promise<{ ok: number; problems: string[] }> {
  const results = await Promise.all(loop.checks);
  const problems = results.filter((r): r is string => r !== null);
  return { ok: results.length - problems.length, problems };
}

runBench("convergence", async () => {
  const changes = envInt("MESH_BENCH_CHANGES", 200);
  const baselineChanges = envInt("MESH_BENCH_BASELINE_CHANGES", 20);
  const samples = 10;

  say("convergence: starting a private PostgreSQL");
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const adminUrl = await server.createAdmin("mesh_admin");

  // ---- watching on: one change at a time, each after a short random pause ----
  say(`convergence: ${changes} changes with the harness watching (every 5 s as the safety net)`);
  const watching = await startLoop(server, adminUrl, "bench-watch", true);
  const watchLatencies: number[] = [];
  const watchNoticed: number[] = [];
  /** Per change (by index): rename → create() begins. */
  const watchNoticedAt: number[] = [];
  const watchCreate: number[] = [];
  const watchWaits: { from: number; to: number }[] = [];
  const rawLatencies: number[] = [];
  const rawClient = new pg.Client({ connectionString: adminUrl });
  rawClient.on("error", () => {});
  await rawClient.connect();
  onCleanup(() => rawClient.end());
  const adminName = decodeURIComponent(new URL(adminUrl).username);
  const started = now();
  for (let i = 0; i < changes; i++) {
    const login = loginOf("w", i, 4);
    if (i % Math.max(1, Math.floor(changes / samples)) === 0) watching.sample(login);
    const renamedAt = await watching.file.add([login]);
    const createdAt = await watching.created(login);
    watchLatencies.push(createdAt - renamedAt);
    watchWaits.push({ from: renamedAt, to: createdAt });
    const c = watching.creates.get(login);
    watchNoticedAt[i] = c === undefined ? Number.NaN : c.startedAt - renamedAt;
    if (c) {
      watchNoticed.push(c.startedAt - renamedAt);
      watchCreate.push(c.tookMs);
    }
    // The same statements raw, for another login, right after: the two share whatever load there is.
    rawLatencies.push(await rawCreate(rawClient, adminName, loginOf("x", i, 4)));
    if ((i + 1) % 50 === 0) say(`convergence: ${i + 1}/${changes} changes converged`);
    // A random pause (300 ms on average), so changes fall anywhere relative to the periodic pass, and
    // the run outlasts a minute: at least one verify pass (and what it does to a change) is in it.
    await sleep(Math.random() * 600);
  }
  const watchWall = now() - started;
  const watchChecks = await settleChecks(watching);
  await watching.handle.idle();
  const watchHeld = tally(watching.handle);
  await watching.handle.stop();

  // ---- baseline: watching off, changes at random moments, only the periodic pass notices ----
  say(`convergence: baseline, ${baselineChanges} changes with watching off (the 5 s periodic pass only)`);
  const polling = await startLoop(server, adminUrl, "bench-poll", false);
  const pending: { login: string; renamedAt: number }[] = [];
  for (let i = 0; i < baselineChanges; i++) {
    await sleep(500 + Math.random() * 3000);
    const login = loginOf("p", i, 4);
    if (i % Math.max(1, Math.floor(baselineChanges / 4)) === 0) polling.sample(login);
    pending.push({ login, renamedAt: await polling.file.add([login]) });
  }
  const pollLatencies: number[] = [];
  const pollNoticed: number[] = [];
  const pollCreate: number[] = [];
  for (const { login, renamedAt } of pending) {
    pollLatencies.push((await polling.created(login)) - renamedAt);
    const c = polling.creates.get(login);
    if (c) {
      pollNoticed.push(c.startedAt - renamedAt);
      pollCreate.push(c.tookMs);
    }
  }
  const pollChecks = await settleChecks(polling);
  await polling.handle.idle();
  const pollHeld = tally(polling.handle);
  await polling.handle.stop();

  const w = summarize(watchLatencies);
  const p = summarize(pollLatencies);
  const r = summarize(rawLatencies);
  const beyondP50 = w.p50 - r.p50;
  const beyondP99 = w.p99 - r.p99;
  const row = (name: string, s: Summary): (string | number)[] => [
    name,
    s.n,
    fmtMs(s.min),
    fmtMs(s.p50),
    fmtMs(s.p90),
    fmtMs(s.p99),
    fmtMs(s.max),
  ];
  const part = (mode: string, what: string, values: readonly number[]): string[] => {
    const s = summarize(values);
    return [mode, what, fmtMs(s.p50), fmtMs(s.p99), fmtMs(s.max)];
  };
  // Which changes waited on a verify pass: the tail of the watching run, explained.
  const overlapping = watchWaits
    .map((wait, i) => ({ i, ms: watchLatencies[i] ?? 0, wait }))
    .filter(({ wait }) => watching.verifies.some((v) => v.from < wait.to && v.judged > wait.from));
  const verifyMs = watching.verifies.map((v) => v.to - v.from);
  const judgeMs = watching.verifies.map((v) => v.judged - v.to);
  const quick = watchLatencies.filter((_, i) => !overlapping.some((o) => o.i === i));
  // What a change overlapping a verify pass waited on the harness (rename → its create began).
  const verifyWaits = overlapping.map((o) => watchNoticedAt[o.i] ?? Number.NaN);
  const longestVerifyWait = verifyWaits.reduce((a, b) => Math.max(a, Number.isNaN(b) ? a : b), 0);
  const problems = [...watchChecks.problems, ...pollChecks.problems];
  const complaints = [...watching.logger.errors, ...polling.logger.errors];
  printResult(
    "convergence",
    [
      "time from the contributions file's rename to the consumer's `created` action (role + database exist);",
      "PostgreSQL 15 private server, non-superuser admin, harness defaults (every 5 s, verify every 60 s).",
      "",
      table(
        ["mode", "changes", "min", "p50", "p90", "p99", "max"],
        [
          row("watching (default)", w),
          row("the same statements sent raw", r),
          row("baseline: periodic pass only", p),
        ],
      ),
      "",
      `beyond the raw statements, p50: ${verdict(signed(beyondP50), `≤ ${GOAL_P50} ms`, beyondP50 <= GOAL_P50)}; ` +
        `p99: ${verdict(signed(beyondP99), `≤ ${GOAL_P99} ms`, beyondP99 <= GOAL_P99)}`,
      "",
      "the same waits split: rename → create() begins (noticing, settling, the pass, the lock), and create() itself:",
      table(
        ["mode", "part", "p50", "p99", "max"],
        [
          part("watching", "rename → create begins", watchNoticed),
          part("watching", "create()", watchCreate),
          part("baseline", "rename → create begins", pollNoticed),
          part("baseline", "create()", pollCreate),
        ],
      ),
      "",
      `verify passes during the watching run: ${watching.verifies.length} (holdsMany over ` +
        `${watching.verifies.map((v) => v.consumers).join(", ") || "-"} consumers; non-superuser admin, so one ` +
        `login per consumer in a consumer's first verify pass, spread between passes after), taking ` +
        `${verifyMs.map(fmtMs).join(", ") || "-"} (asked outside the harness's lock), then judged under it, a slice at a ` +
        `time, in ${judgeMs.map(fmtMs).join(", ") || "-"}.`,
      `changes whose wait overlapped a verify pass: ${overlapping.length}, waits ` +
        `${overlapping.map((o) => fmtMs(o.ms)).join(", ") || "-"}; without them: p50 ${fmtMs(summarize(quick).p50)}, ` +
        `p99 ${fmtMs(summarize(quick).p99)}, max ${fmtMs(summarize(quick).max)}`,
      `of those waits, rename → create() begins (what the harness made them wait): ` +
        `${verifyWaits.map(fmtMs).join(", ") || "-"}; longest: ` +
        verdict(fmtMs(longestVerifyWait), `≤ ${GOAL_VERIFY_WAIT} ms`, longestVerifyWait <= GOAL_VERIFY_WAIT) +
        " (the rest of each wait is create() itself, on a server the verify pass's logins also keep busy)",
      "",
      `ratio baseline/watching: p50 ${fmtRatio(p.p50 / w.p50)}, p99 ${fmtRatio(p.p99 / w.p99)}`,
      `watching run: ${changes} changes in ${fmtMs(watchWall)}; ${watchHeld.active} consumers active at the end, ` +
        `${watchHeld.other} in any other state (every one stays in the file; none may retire)`,
      `baseline run: ${pollHeld.active} consumers active at the end, ${pollHeld.other} in any other state`,
      `cross-check at the created action (catalog + login with the password): ` +
        `${watchChecks.ok + pollChecks.ok}/${watching.checks.length + polling.checks.length} ok` +
        (problems.length > 0 ? `; PROBLEMS: ${problems.join("; ")}` : ""),
      `harness errors: ${complaints.length}${complaints.length > 0 ? ` (first: ${complaints[0]})` : ""}`,
    ].join("\n"),
  );
  if (problems.length > 0 || watchHeld.active !== changes || pollHeld.active !== baselineChanges) {
    process.exitCode = 1;
  }
});
