// What the whole mesh costs to bring a fleet-file change to the databases: `mesh up` runs for real
// (nats-server, the controller, one agent, the Postgres provider at its default 5 s pass) against a
// private PostgreSQL, then one atomic rename adds N consumers (100 by default) to the fleet file.
// Timed from that rename, by polling every 50 ms: the provider's contributions file listing them
// all (controller + agent), each consumer's credential file (the agent), each consumer's role and
// database in the catalog (the provider). The consumers' manifest has no `run`, so the agent writes
// their files and starts nothing: only the mesh's own work is measured.
// Baseline in the same run, same server, same non-superuser admin: the statements the adapter runs
// for N consumers, as a plain script at the provider's concurrency (8 connections, each consumer's
// statements in order on one; half before the change, half after). Goal: the provider's part (its
// contributions file to the last role + database) ≤ 1.10× the script, as in postgres-provisioning.
//
//   node --import tsx bench/fleet-change.ts   (MESH_BENCH_CONSUMERS=100 to change N; 1000 for the
//                                              large run, whose wait for convergence grows with N)

import { spawn, type ChildProcess } from "node:child_process";
import { readFile, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { credentialPath, deriveLogin, receivesPath } from "@mesh/manifest";
import { formatMark, scramVerifier } from "@mesh/provider-postgres";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import {
  envInt,
  fmtMs,
  fmtRatio,
  median,
  meterMethod,
  mintPassword,
  now,
  onCleanup,
  percentile,
  printResult,
  runBench,
  say,
  sleep,
  sqlKind,
  table,
  verdict,
  summarize,
  tempDir,
  writeAtomic,
  type MeterKind,
} from "./lib.ts";

const IFACE = "postgres-database";
const NODE = "node-1";
const POLL_MS = 50;
/** How long the mesh may take to start, and then to converge, before the run is called failed. */
const START_TIMEOUT_MS = 90_000;
const CONVERGE_TIMEOUT_MS = 120_000;
/** Beyond 100 consumers, each one more may take this much longer (1,000: 10 min in all). */
const CONVERGE_PER_CONSUMER_MS = 540;

const root = fileURLToPath(new URL("..", import.meta.url));
const MESH = join(root, "packages", "cli", "bin", "mesh.js");

/** `mesh up` as a child, with the tail of what it printed kept for a failure's message. */
interface MeshUp {
  readonly child: ChildProcess;
  tail(): string;
  /** What it printed, line by line, with the monotonic time each line arrived (the last 2,000). */
  heard(): readonly { at: number; line: string }[];
  stop(): Promise<void>;
}

function startMeshUp(fleet: string, state: string, adminUrl: string): MeshUp {
  const env: NodeJS.ProcessEnv = { ...process.env, MESH_POSTGRES_URL: adminUrl };
  // The provider's default pass interval is part of what is measured.
  delete env["MESH_EVERY"];
  const child = spawn(process.execPath, [MESH, "up", fleet, "--state", state, "--isolation", "auto"], {
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  const heard: { at: number; line: string }[] = [];
  const keep = (d: Buffer): void => {
    const at = now();
    for (const line of d.toString().trimEnd().split("\n")) {
      lines.push(line);
      heard.push({ at, line });
    }
    lines.splice(0, Math.max(0, lines.length - 40));
    heard.splice(0, Math.max(0, heard.length - 2000));
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  const closed = new Promise<void>((resolve) => child.once("close", () => resolve()));
  return {
    child,
    tail: () => lines.join("\n"),
    heard: () => heard,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      say("fleet-change: stopping mesh up (SIGINT)");
      child.kill("SIGINT");
      const killer = setTimeout(() => {
        say("fleet-change: mesh up did not stop within 30 s; SIGKILL");
        child.kill("SIGKILL");
      }, 30_000);
      await closed;
      clearTimeout(killer);
    },
  };
}

function fleetYaml(
  pgPort: number,
  providerManifest: string,
  appManifest: string,
  apps: readonly string[],
): string {
  const lines = [
    "nodes:",
    `  ${NODE}: {}`,
    "modules:",
    "  postgres:",
    `    manifest: ${JSON.stringify(providerManifest)}`,
    `    node: ${NODE}`,
    `    endpoint: { host: 127.0.0.1, port: ${pgPort} }`,
    "    admin: { env: MESH_POSTGRES_URL }",
    ...apps.map((app) => `  ${app}: { manifest: ${JSON.stringify(appManifest)}, node: ${NODE} }`),
  ];
  return `${lines.join("\n")}\n`;
}

/** Waits for `probe` to answer something, polling every 250 ms. @throws Error naming `what` at the deadline. */
async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (now() > deadline) throw new Error(`gave up after ${fmtMs(timeoutMs)} waiting for ${what}`);
    await sleep(250);
  }
}

/**
 * Runs `probe` every POLL_MS (from the start of one to the start of the next) until it says it is
 * done or the deadline passes; answers how long each probe took.
 */
async function poll(deadline: number, probe: () => Promise<boolean>): Promise<number[]> {
  const took: number[] = [];
  for (;;) {
    const started = now();
    const done = await probe();
    took.push(now() - started);
    if (done || now() > deadline) return took;
    await sleep(Math.max(0, POLL_MS - (now() - started)));
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

/** The provider's concurrency (the harness's default), which the raw script runs at too. */
const CONCURRENCY = 8;
const PROVIDER_GOAL = 1.1;
/** The control plane's part (controller and agent: from the rename to the provider's contributions file) ≤ this share of the provider's part. */
const CONTROL_PLANE_GOAL = 0.1;

/** The raw script: what the adapter issues per consumer, verifiers computed beforehand, 8 connections. */
async function rawScript(
  server: PostgresServer,
  adminUrl: string,
  logins: readonly string[],
): Promise<{ wallMs: number; verifierMs: number; kinds: Map<string, MeterKind> }> {
  const admin = pg.escapeIdentifier(decodeURIComponent(new URL(adminUrl).username));
  let t = now();
  const verifiers: string[] = [];
  for (let i = 0; i < logins.length; i++) verifiers.push(await scramVerifier(mintPassword()));
  const verifierMs = now() - t;
  const clients = Array.from({ length: CONCURRENCY }, () => new pg.Client({ connectionString: adminUrl }));
  for (const client of clients) {
    client.on("error", () => {});
    await client.connect();
  }
  const meter = meterMethod(pg.Client.prototype, "query", sqlKind);
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
          await client.query(`CREATE ROLE ${role} LOGIN PASSWORD ${pg.escapeLiteral(verifiers[i] ?? "")}`);
          await client.query(`COMMENT ON ROLE ${role} IS ${pg.escapeLiteral(mark)}`);
          await client.query(`GRANT ${role} TO ${admin}`);
          await client.query(`CREATE DATABASE ${role} OWNER ${role}`);
          await client.query(`REVOKE CONNECT, TEMPORARY ON DATABASE ${role} FROM PUBLIC`);
        }
      }),
    );
    const wallMs = now() - t;
    return { wallMs, verifierMs, kinds: new Map([...meter.kinds].map(([k, v]) => [k, { ...v }])) };
  } finally {
    meter.restore();
    for (const client of clients) await client.end().catch(() => {});
  }
}

/** Logs in as each consumer with what its credential file gives it; answers the ones that could not. */
async function loginsThatFail(credentials: readonly string[]): Promise<string[]> {
  const failed: string[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < credentials.length) {
      const path = credentials[next++] as string;
      try {
        const cred = JSON.parse(await readFile(path, "utf8")) as { url?: string; passwordFile: string };
        const password = (await readFile(cred.passwordFile, "utf8")).trim();
        // Given field by field: pg lets a connection string's (absent) password win over `password`.
        const url = new URL(cred.url ?? "");
        const client = new pg.Client({
          host: url.hostname,
          port: Number(url.port),
          user: decodeURIComponent(url.username),
          database: decodeURIComponent(url.pathname.slice(1)),
          password,
        });
        client.on("error", () => {});
        await client.connect();
        await client.query("SELECT 1");
        await client.end();
      } catch (err) {
        failed.push(`${path}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return failed;
}

runBench("fleet-change", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 100);
  const width = Math.max(3, String(n).length);
  const apps = Array.from({ length: n }, (_, i) => `app-${String(i + 1).padStart(width, "0")}`);
  const logins = apps.map((app) => deriveLogin(app, IFACE));

  say("fleet-change: starting a private PostgreSQL");
  const server = await startPostgres();
  onCleanup(() => server.stop());
  const adminUrl = await server.createAdmin("mesh_admin");

  const dir = await tempDir("fleet-change");
  const state = join(dir, "state");
  const nodeState = join(state, "nodes", NODE);
  const fleet = join(dir, "mesh.yaml");
  const appManifest = join(dir, "app.json");
  const providerManifest = join(root, "providers", "postgres", "module.json");
  // No `run`: the agent writes the consumer's files and starts nothing.
  await writeFile(appManifest, JSON.stringify({ name: "app", needs: { [IFACE]: { values: {} } } }));
  await writeFile(fleet, fleetYaml(server.port, providerManifest, appManifest, []));

  say("fleet-change: mesh up with the Postgres provider and no consumers");
  const mesh = startMeshUp(fleet, state, adminUrl);
  onCleanup(() => mesh.stop());
  const providerLog = join(nodeState, "modules", "postgres", "log");
  try {
    await until("the Postgres provider's first pass", START_TIMEOUT_MS, async () => {
      if (mesh.child.exitCode !== null) throw new Error("mesh up exited");
      return /first pass done/.test(await readFile(providerLog, "utf8")) ? true : undefined;
    });
  } catch (err) {
    throw new Error(`${(err as Error).message}; mesh up said:\n${mesh.tail()}`, { cause: err });
  }

  const half = Math.floor(n / 2);
  const rawLogins = Array.from({ length: n }, (_, i) => `raw_${String(i + 1).padStart(width, "0")}`);
  say(`fleet-change: baseline, first half (${half} consumers as a raw script)`);
  const rawA = await rawScript(server, adminUrl, rawLogins.slice(0, half));
  await sleep(6_000); // a provider pass in between, so the change lands on an idle mesh

  const credentials = apps.map((app) => credentialPath(nodeState, app, IFACE));
  const contributions = receivesPath(nodeState, "postgres", IFACE);
  const credentialAt = new Map<string, number>();
  const catalogAt = new Map<string, number>();
  let listedAt: number | undefined;
  const poller = new pg.Client({ connectionString: server.superuserUrl });
  poller.on("error", () => {});
  await poller.connect();
  onCleanup(() => poller.end());
  await server.query("CHECKPOINT");

  say(`fleet-change: adding ${n} consumers to the fleet file`);
  const renamedAt = await writeAtomic(fleet, fleetYaml(server.port, providerManifest, appManifest, apps), {
    mode: 0o644,
  });
  const convergeMs = CONVERGE_TIMEOUT_MS + Math.max(0, n - 100) * CONVERGE_PER_CONSUMER_MS;
  const deadline = renamedAt + convergeMs;
  const [fileProbes, catalogProbes] = await Promise.all([
    poll(deadline, async () => {
      await Promise.all(
        credentials.map(async (path, i) => {
          const login = logins[i] as string;
          if (!credentialAt.has(login) && (await exists(path))) credentialAt.set(login, now());
        }),
      );
      if (listedAt === undefined) {
        const doc = await readFile(contributions, "utf8").then(
          (t) => JSON.parse(t) as { given?: { as?: string }[] },
          () => undefined,
        );
        const listed = new Set((doc?.given ?? []).map((g) => g.as));
        if (logins.every((l) => listed.has(l))) listedAt = now();
      }
      return credentialAt.size === n && listedAt !== undefined;
    }),
    // The consumers ask for no database name, so each one's database is named after its login.
    poll(deadline, async () => {
      const missing = logins.filter((l) => !catalogAt.has(l));
      const { rows } = await poller.query<{ login: string }>(
        `SELECT r.rolname AS login FROM pg_roles r JOIN pg_database d ON d.datname = r.rolname
          WHERE r.rolname = ANY($1::text[])`,
        [missing],
      );
      const at = now();
      for (const row of rows) catalogAt.set(row.login, at);
      return catalogAt.size === n;
    }),
  ]);
  if (credentialAt.size < n || catalogAt.size < n || listedAt === undefined) {
    throw new Error(
      `after ${fmtMs(convergeMs)}: ${credentialAt.size} of ${n} credential files, ` +
        `${catalogAt.size} of ${n} roles + databases, contributions ${listedAt === undefined ? "incomplete" : "complete"}; ` +
        `mesh up said:\n${mesh.tail()}`,
    );
  }
  say("fleet-change: every consumer converged; checking logins");
  // Checked with a credential file's own URL and password, so a wrong login or password shows up here.
  const refused = await loginsThatFail(credentials);
  const firstCred = JSON.parse(await readFile(credentials[0] as string, "utf8")) as { login: string };

  await sleep(6_000); // the provider settles (its next pass) before the second half is timed
  say(`fleet-change: baseline, second half (${n - half} consumers as a raw script)`);
  const rawB = await rawScript(server, adminUrl, rawLogins.slice(half));

  const rel = (t: number): number => t - renamedAt;
  // Lines arrive through a pipe as they are written: no polling delay in these two.
  const heardAt = (pattern: RegExp): number =>
    mesh.heard().find((h) => h.at >= renamedAt && pattern.test(h.line))?.at ?? Number.NaN;
  const publishedAt = heardAt(/controller\s*│ read the fleet file .* again/);
  const appliedAt = heardAt(new RegExp(`${NODE}\\s*│ node ${NODE} applied delivery`));
  const credTimes = [...credentialAt.values()].map(rel);
  const catTimes = [...catalogAt.values()].map(rel);
  const allCred = Math.max(...credTimes);
  const allCatalog = Math.max(...catTimes);
  const rawMs = rawA.wallMs + rawB.wallMs;
  const providerMs = listedAt === undefined ? Number.NaN : allCatalog - rel(listedAt);
  const kinds = new Map<string, MeterKind>();
  for (const [k, v] of [...rawA.kinds, ...rawB.kinds]) {
    const was = kinds.get(k) ?? { count: 0, totalMs: 0 };
    kinds.set(k, { count: was.count + v.count, totalMs: was.totalMs + v.totalMs });
  }
  const pairMs = (kinds.get("CREATE ROLE")?.totalMs ?? 0) + (kinds.get("CREATE DATABASE")?.totalMs ?? 0);
  const probe = [...fileProbes, ...catalogProbes];
  const row = (what: string, times: readonly number[]): string[] => {
    const s = summarize(times);
    return [what, fmtMs(s.min), fmtMs(s.p50), fmtMs(s.p90), fmtMs(s.max)];
  };

  // MESH_BENCH_TIMELINE=FILE: what mesh up said from the rename on, each line with its time from the rename.
  const timeline = process.env["MESH_BENCH_TIMELINE"];
  if (timeline !== undefined && timeline !== "") {
    const lines = mesh
      .heard()
      .filter((h) => h.at >= renamedAt)
      .map((h) => `${String(Math.round(rel(h.at))).padStart(7)} ms  ${h.line}`);
    await writeFile(timeline, `${lines.join("\n")}\n`);
  }

  const problems: string[] = [];
  if (firstCred.login !== logins[0])
    problems.push(`credential login ${firstCred.login}, expected ${logins[0]}`);
  problems.push(...refused);

  printResult(
    "fleet-change",
    [
      `one atomic rename adds ${n} consumers (${apps[0]}..${apps.at(-1)}, logins ${logins[0]}..) to a fleet with one node`,
      `and the Postgres provider (mesh up: nats-server, controller, one agent; provider at its default 5 s pass;`,
      `non-superuser admin; consumers' manifest has no "run", so nothing else starts)`,
      `polled every ${POLL_MS} ms (files and catalog in two loops): each time is late by up to ${POLL_MS} ms plus one`,
      `probe (file probe p50 ${fmtMs(median(fileProbes))}, catalog probe p50 ${fmtMs(median(catalogProbes))}, p99 of both ${fmtMs(percentile(probe, 99))})`,
      "",
      table(
        ["from the rename to", "first", "p50", "p90", "all done"],
        [
          [
            "the controller has published the new delivery (its log line)",
            "",
            "",
            "",
            fmtMs(rel(publishedAt)),
          ],
          ["the agent has applied it (its log line)", "", "", "", fmtMs(rel(appliedAt))],
          [
            `the provider's contributions file lists all ${n}`,
            "",
            "",
            "",
            fmtMs(listedAt === undefined ? Number.NaN : rel(listedAt)),
          ],
          row("a consumer's credential file", credTimes),
          row("a consumer's role + database", catTimes),
        ],
      ),
      "",
      `wall time to all ${n} credential files:   ${fmtMs(allCred)}  (${fmtMs(allCred / n)} per consumer)`,
      `wall time to all ${n} roles + databases:   ${fmtMs(allCatalog)}  (${fmtMs(allCatalog / n)} per consumer)`,
      `baseline, the adapter's statements for ${n} consumers as a raw script over ${CONCURRENCY} connections:`,
      `                                          ${fmtMs(rawMs)}  (${fmtMs(rawMs / n)} per consumer; ` +
        `CREATE ROLE + CREATE DATABASE alone ${fmtMs(pairMs)}, summed over the ${CONCURRENCY} connections; SCRAM verifiers computed beforehand, ` +
        `${fmtMs(rawA.verifierMs + rawB.verifierMs)})`,
      `mesh / raw script: ${fmtRatio(allCatalog / rawMs)} (roles + databases), ${fmtRatio(allCred / rawMs)} (credential files)`,
      `of which the provider, from its contributions file (written once, listing all ${n}) to the last role + database:`,
      `                                          ${fmtMs(providerMs)}  (${verdict(
        `${fmtRatio(providerMs / rawMs)} the raw script`,
        `≤ ${PROVIDER_GOAL}×`,
        providerMs / rawMs <= PROVIDER_GOAL,
      )})`,
      `the rest, ${fmtMs(allCatalog - providerMs)} (${fmtMs((allCatalog - providerMs) / n)} per consumer), is the control plane (controller and agent):`,
      `                                          ${verdict(
        `${fmtRatio((allCatalog - providerMs) / providerMs)} the provider's part`,
        `≤ ${CONTROL_PLANE_GOAL}×`,
        (allCatalog - providerMs) / providerMs <= CONTROL_PLANE_GOAL,
      )}`,
      "",
      table(
        ["raw script statement", "count", "total", "mean"],
        [...kinds].map(([k, v]) => [k, v.count, fmtMs(v.totalMs), fmtMs(v.totalMs / v.count)]),
      ),
      "",
      problems.length === 0
        ? `checked: every consumer logged in with its credential file's URL and password`
        : `PROBLEMS (${problems.length}):\n${problems
            .slice(0, 5)
            .map((p) => `  ${p}`)
            .join("\n")}`,
    ].join("\n"),
  );
  if (problems.length > 0) throw new Error(`${problems.length} consumer(s) came out wrong`);
});
