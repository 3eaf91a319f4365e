// What the Postgres provider costs over doing the same by hand: N new consumers (role + database)
// through the harness and the adapter, against a plain SQL script issuing the same statements at
// the same concurrency: 8 connections, each consumer's statements in order on one, against the
// harness's 8 creates at once; and one connection against the harness at concurrency 1. Same
// private server, same non-superuser admin, each with its own N logins. Each script runs in two
// halves around the provider's runs, so whatever drifts on the server over the run (WAL growth,
// checkpoints, a noisy neighbour) weighs on both alike. Goal: provider ≤ 1.10× the script.
//
//   node --import tsx bench/postgres-provisioning.ts   (MESH_BENCH_CONSUMERS=200 to change N)

import pg from "pg";
import { runProvisioner } from "@mesh/sdk";
import { createPostgresAdapter, formatMark, scramVerifier } from "@mesh/provider-postgres";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  meterMethod,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  sqlKind,
  table,
  tempDir,
  type CallMeter,
  type MeterKind,
  verdict,
} from "./lib.ts";

const IFACE = "postgres-database";

interface Run {
  readonly wallMs: number;
  readonly kinds: Map<string, MeterKind>;
  readonly queries: number;
}

function copyKinds(meter: CallMeter): Map<string, MeterKind> {
  return new Map([...meter.kinds].map(([k, v]) => [k, { ...v }]));
}

function addKinds(into: Map<string, MeterKind>, more: ReadonlyMap<string, MeterKind>): void {
  for (const [k, v] of more) {
    const was = into.get(k) ?? { count: 0, totalMs: 0 };
    into.set(k, { count: was.count + v.count, totalMs: was.totalMs + v.totalMs });
  }
}

/**
 * The by-hand way: verifiers ready (as a generated script would carry them), `concurrency`
 * connections, each consumer's statements in order on one of them.
 */
async function rawRun(
  server: PostgresServer,
  adminUrl: string,
  logins: readonly string[],
  meter: CallMeter,
  concurrency: number,
): Promise<Run & { verifierMs: number }> {
  const admin = decodeURIComponent(new URL(adminUrl).username);
  let t = now();
  const verifiers: string[] = [];
  for (let i = 0; i < logins.length; i++) verifiers.push(await scramVerifier(mintPassword()));
  const verifierMs = now() - t;

  const clients = Array.from({ length: concurrency }, () => new pg.Client({ connectionString: adminUrl }));
  for (const client of clients) {
    client.on("error", () => {});
    await client.connect();
  }
  try {
    await server.query("CHECKPOINT");
    meter.reset();
    t = now();
    let next = 0;
    await Promise.all(
      clients.map(async (client) => {
        while (next < logins.length) {
          const i = next++;
          const login = logins[i] as string;
          const role = pg.escapeIdentifier(login);
          const mark = formatMark({ instance: "bench-raw", database: login, state: "active" });
          await client.query(`CREATE ROLE ${role} PASSWORD ${pg.escapeLiteral(verifiers[i] ?? "")} LOGIN`);
          await client.query(`GRANT ${role} TO ${pg.escapeIdentifier(admin)}`);
          await client.query(`COMMENT ON ROLE ${role} IS ${pg.escapeLiteral(mark)}`);
          await client.query(`CREATE DATABASE ${role} OWNER ${role}`);
          await client.query(`REVOKE CONNECT, TEMPORARY ON DATABASE ${role} FROM PUBLIC`);
        }
      }),
    );
    const wallMs = now() - t;
    return { wallMs, verifierMs, kinds: copyKinds(meter), queries: meter.calls };
  } finally {
    for (const client of clients) await client.end().catch(() => {});
  }
}

/** The provider's way: the agent writes N consumers at once; timed from the rename to the Nth `created`. */
async function providerRun(
  server: PostgresServer,
  adminUrl: string,
  logins: readonly string[],
  meter: CallMeter,
  concurrency: number,
): Promise<Run & { problems: string[] }> {
  const instance = `bench-prov-${concurrency}`;
  const dir = await tempDir(instance);
  const file = new ContributionsFile(dir, IFACE);
  await file.write();
  const logger = quietLogger();
  const adapter = createPostgresAdapter({ adminUrl, instance, logger });
  const created = new Set<string>();
  let lastAt = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (allDone = resolve));
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    instance,
    concurrency,
    logger,
    actions: {
      append(entry) {
        if (entry.action !== "created") return;
        created.add(entry.login);
        lastAt = now();
        if (created.size === logins.length) allDone();
      },
    },
  });
  onCleanup(() => handle.stop());
  await handle.ready;
  await server.query("CHECKPOINT");
  meter.reset();
  // Secrets are written first (not timed: the agent writes them before the file), then the file.
  const renamedAt = await file.add(logins);
  const timeout = setTimeout(allDone, 600_000);
  await done;
  clearTimeout(timeout);
  const kinds = copyKinds(meter);
  const queries = meter.calls;
  await handle.stop();
  const problems = [...logger.errors, ...logger.warnings];
  if (created.size !== logins.length)
    problems.unshift(`only ${created.size} of ${logins.length} were created`);
  return { wallMs: lastAt - renamedAt, kinds, queries, problems };
}

runBench("postgres-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 200);
  const half = Math.floor(n / 2);

  say("postgres-provisioning: starting a private PostgreSQL");
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const adminUrl = await server.createAdmin("mesh_admin");
  const meter = meterMethod(pg.Client.prototype, "query", sqlKind);
  onCleanup(() => meter.restore());

  const logins = (prefix: string, from: number, count: number): string[] =>
    Array.from({ length: count }, (_, i) => loginOf(prefix, from + i, 4));

  say(`postgres-provisioning: raw SQL at concurrency 8, first ${half} consumers`);
  const rawA = await rawRun(server, adminUrl, logins("r", 0, half), meter, 8);
  say(`postgres-provisioning: raw SQL at concurrency 1, first ${half} consumers`);
  const rawSeqA = await rawRun(server, adminUrl, logins("q", 0, half), meter, 1);
  say(`postgres-provisioning: provider (default concurrency 8), ${n} consumers written at once`);
  const prov = await providerRun(server, adminUrl, logins("m", 0, n), meter, 8);
  say(`postgres-provisioning: provider at concurrency 1, ${n} consumers written at once`);
  const seq = await providerRun(server, adminUrl, logins("s", 0, n), meter, 1);
  say(`postgres-provisioning: raw SQL at concurrency 1, last ${n - half} consumers`);
  const rawSeqB = await rawRun(server, adminUrl, logins("q", half, n - half), meter, 1);
  say(`postgres-provisioning: raw SQL at concurrency 8, last ${n - half} consumers`);
  const rawB = await rawRun(server, adminUrl, logins("r", half, n - half), meter, 8);

  const joined = (a: typeof rawA, b: typeof rawA) => {
    const run = {
      wallMs: a.wallMs + b.wallMs,
      verifierMs: a.verifierMs + b.verifierMs,
      queries: a.queries + b.queries,
      kinds: new Map<string, MeterKind>(),
    };
    addKinds(run.kinds, a.kinds);
    addKinds(run.kinds, b.kinds);
    return run;
  };
  const raw = joined(rawA, rawB);
  const rawSeq = joined(rawSeqA, rawSeqB);
  const [{ count: dbs }] = (await server.query<{ count: number }>(
    "SELECT count(*)::int AS count FROM pg_database WHERE datname ~ '^[rmsq][0-9]{4}$'",
  )) as [{ count: number }];

  const breakdown = (run: { kinds: ReadonlyMap<string, MeterKind> }): string =>
    table(
      ["statement", "count", "per consumer", "total", "mean"],
      [...run.kinds]
        .sort(([, a], [, b]) => b.totalMs - a.totalMs)
        .map(([kind, k]) => [
          kind,
          k.count,
          (k.count / n).toFixed(2),
          fmtMs(k.totalMs),
          fmtMs(k.totalMs / k.count),
        ]),
    );
  const statementMs = (run: { kinds: ReadonlyMap<string, MeterKind> }): number =>
    [...run.kinds.values()].reduce((sum, k) => sum + k.totalMs, 0);
  const ratio = prov.wallMs / raw.wallMs;
  const seqRatio = seq.wallMs / rawSeq.wallMs;
  const problems = [...prov.problems, ...seq.problems];
  printResult(
    "postgres-provisioning",
    [
      `${n} new consumers (role with a SCRAM verifier + mark, admin membership, owned database, REVOKE from PUBLIC)`,
      "PostgreSQL 15 private server, the same non-superuser admin (CREATEROLE, CREATEDB) for every way.",
      "provider: timed from the contributions file's rename to the last `created` action.",
      "raw: verifiers computed beforehand (as a generated script carries them), then timed; at concurrency 8",
      "(8 connections) and 1 (one), each in two halves, before and after the provider's runs.",
      "",
      table(
        ["way", "wall", "per consumer", "statements", "vs raw"],
        [
          [
            "provider, harness default (8 creates at once)",
            fmtMs(prov.wallMs),
            fmtMs(prov.wallMs / n),
            prov.queries,
            fmtRatio(ratio),
          ],
          ["raw SQL, 8 connections at once", fmtMs(raw.wallMs), fmtMs(raw.wallMs / n), raw.queries, "1.00×"],
          [
            "provider, concurrency 1 (one create at a time)",
            fmtMs(seq.wallMs),
            fmtMs(seq.wallMs / n),
            seq.queries,
            fmtRatio(seqRatio),
          ],
          [
            "raw SQL, one connection, sequential",
            fmtMs(rawSeq.wallMs),
            fmtMs(rawSeq.wallMs / n),
            rawSeq.queries,
            "1.00×",
          ],
          [
            "(raw: computing its verifiers, not in its wall)",
            fmtMs(raw.verifierMs),
            fmtMs(raw.verifierMs / n),
            "-",
            "-",
          ],
        ],
      ),
      "",
      `ratio provider/raw at concurrency 8: ${verdict(fmtRatio(ratio), "≤ 1.10×", ratio <= 1.1)}`,
      `ratio provider/raw at concurrency 1: ${verdict(fmtRatio(seqRatio), "≤ 1.10×", seqRatio <= 1.1)}; ` +
        `at 8 against raw including its verifiers: ${fmtRatio(prov.wallMs / (raw.wallMs + raw.verifierMs))}`,
      `raw halves at 8 (before / after the provider's runs): ${fmtMs(rawA.wallMs)} / ${fmtMs(rawB.wallMs)}; ` +
        `at 1: ${fmtMs(rawSeqA.wallMs)} / ${fmtMs(rawSeqB.wallMs)}; CREATE DATABASE alone varies with the ` +
        `machine's load, so compare within one run only`,
      `time outside any statement (client work: verifiers, files, the loop), at concurrency 1: provider ` +
        `${fmtMs(seq.wallMs - statementMs(seq))}, raw ${fmtMs(rawSeq.wallMs - statementMs(rawSeq))}`,
      `databases present at the end: ${dbs} of ${4 * n}`,
      problems.length > 0
        ? `provider problems: ${problems.slice(0, 3).join(" | ")}`
        : "provider problems: none",
      "",
      "where the time goes, per statement kind (from the call to its answer, summed; with 8 creates at",
      "once over 5 pooled connections the provider's sums exceed its wall time):",
      "provider, default:",
      breakdown(prov),
      "provider, concurrency 1:",
      breakdown(seq),
      "raw, 8 connections:",
      breakdown(raw),
      "raw, one connection:",
      breakdown(rawSeq),
    ].join("\n"),
  );
  if (problems.length > 0 || dbs !== 4 * n) process.exitCode = 1;
});
