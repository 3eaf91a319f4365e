// Prometheus scrapes the mesh as an operator runs it: the controller `mesh up` started (its address
// read from what mesh up prints, with the scrape token it made in the state directory), the
// Postgres and Redis providers it runs (their addresses read from `mesh status`), and a Postgres
// provider process started by hand, each over HTTP, read in the text format, while the fleet and
// the contributions change.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { access, chmod, mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { provider as postgres } from "@mesh/provider-postgres";
import { startProviderProcess, type ProviderProcess } from "@mesh/sdk/provider";
import {
  scrapeProm,
  startPostgres,
  startRedis,
  type PostgresServer,
  type PromScrape,
  type RedisServer,
  until,
} from "@mesh/testkit";
import type { StatusAnswer } from "../packages/cli/src/status-command.ts";
import { runCli } from "../packages/cli/src/cli.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const MESH = join(root, "packages", "cli", "bin", "mesh.js");
const PG_MANIFEST = JSON.stringify(join(root, "providers", "postgres", "module.json"));
const REDIS_MANIFEST = JSON.stringify(join(root, "providers", "redis", "module.json"));
const NOTES_MANIFEST = JSON.stringify(join(root, "examples", "fleet", "notes", "module.json"));

/** Waits until a scrape of `url` (with `token`, when given) satisfies `check`, and answers that scrape. */
function scrapeUntil(
  what: string,
  url: string,
  check: (s: PromScrape) => boolean,
  token?: string,
): Promise<PromScrape> {
  return until(what, async () => {
    const s = await scrapeProm(url, token === undefined ? {} : { token });
    return check(s) ? s : undefined;
  });
}

async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp-${randomBytes(4).toString("hex")}`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, path);
}

const fleetYaml = (port: number, withBlog: boolean): string => `nodes:
  node-a: {}
  node-b: {}
modules:
  postgres:
    manifest: ${PG_MANIFEST}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  redis:
    manifest: ${REDIS_MANIFEST}
    node: node-a
    admin: { env: MESH_REDIS_URL }
    env: { MESH_EVERY: 1s }
  notes: { manifest: ${NOTES_MANIFEST}, node: node-b }
${
  withBlog
    ? `  blog:
    manifest: ${NOTES_MANIFEST}
    node: node-a
    needs: { postgres-database: { values: { name: blog } } }
`
    : ""
}`;

describe("metrics scraped from a running mesh", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let redis: RedisServer;
  let adminUrl: string;
  let dir: string;
  before(async () => {
    [server, redis] = await Promise.all([startPostgres(), startRedis()]);
    adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-metrics-"));
  });
  after(async () => {
    await server?.stop();
    await redis?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  describe("the controller mesh up starts", () => {
    let up: ChildProcess | undefined;
    let output = "";
    // A port taken, given to mesh up as MESH_METRICS: a module that inherited it could not start.
    let taken: Server | undefined;
    const stopUp = async (): Promise<void> => {
      if (up && up.exitCode === null) {
        const closed = new Promise((resolve) => up?.once("close", resolve));
        up.kill("SIGINT");
        await closed;
      }
    };
    after(async () => {
      await stopUp();
      await new Promise((resolve) => (taken ? taken.close(resolve) : resolve(undefined)));
    });

    it("shows its nodes, modules and consumers, and counts reloads and mints as the fleet changes", async () => {
      const fleet = join(dir, "mesh.yaml");
      await writeAtomic(fleet, fleetYaml(server.port, false));
      const busy = createServer();
      taken = busy;
      await new Promise<void>((resolve) => busy.listen(0, "127.0.0.1", resolve));
      const takenPort = (busy.address() as { port: number }).port;
      up = spawn(
        process.execPath,
        [MESH, "up", fleet, "--state", join(dir, "state"), "--isolation", "auto"],
        {
          env: {
            ...process.env,
            MESH_POSTGRES_URL: adminUrl,
            MESH_REDIS_URL: redis.adminUrl,
            MESH_EVERY: "1s",
            MESH_METRICS: `127.0.0.1:${takenPort}`,
          },
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      up.stdout?.on("data", (d: Buffer) => (output += d.toString()));
      up.stderr?.on("data", (d: Buffer) => (output += d.toString()));
      const base = await until("mesh up to print its HTTP address", () => {
        if (up?.exitCode !== null) throw new Error(`mesh up exited ${up?.exitCode}:\n${output}`);
        return Promise.resolve(/HTTP server: (http:\/\/127\.0\.0\.1:\d+) /.exec(output)?.[1]);
      });
      const url = `${base}/metrics`;
      // The scrape token mesh up made (0600) opens /metrics; without it, or with a wrong one, 401.
      const tokenFile = join(dir, "state", "controller", "scrape.token");
      assert.equal((await stat(tokenFile)).mode & 0o777, 0o600);
      const token = (await readFile(tokenFile, "utf8")).trim();
      assert.equal((await fetch(url)).status, 401);
      assert.equal((await fetch(url, { headers: { authorization: "Bearer not-the-token" } })).status, 401);
      assert.equal(
        (await fetch(`${base}/api/state`, { headers: { authorization: `Bearer ${token}` } })).status,
        403,
      );
      assert.ok(!output.includes(token), "the token is never printed");
      // Refusals are in mesh up's log, naming who asked, and not one line each.
      const refusals = () => output.split("\n").filter((l) => /HTTP server refused/.test(l)).length;
      await until("the refusal to be said", () =>
        Promise.resolve(
          /HTTP server refused GET \/metrics from 127\.0\.0\.1 \(uid 0, root\)/.test(output) || undefined,
        ),
      );
      const said = refusals();
      for (let i = 0; i < 20; i++) assert.equal((await fetch(url)).status, 401);
      assert.ok(refusals() <= said + 1, `twenty more refusals, at most one more line (${refusals() - said})`);
      // mesh up holds the operator's token: it prints a link that logs a browser in, once.
      const link = await until("mesh up to print the dashboard's login link", () =>
        Promise.resolve(/the dashboard: (http:\/\/127\.0\.0\.1:\d+\/\?code=\S+) /.exec(output)?.[1]),
      );
      assert.ok(link.startsWith(`${base}/?code=`));
      const logIn = () =>
        fetch(`${base}/api/login`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ code: new URL(link).searchParams.get("code") }),
        });
      assert.equal((await logIn()).status, 200, "the link logs in");
      assert.equal((await logIn()).status, 401, "once");

      let s = await scrapeUntil(
        "both nodes reporting and every module running",
        url,
        (x) =>
          x.value("mesh_controller_nodes", { state: "reporting" }) === 2 &&
          x.value("mesh_controller_modules", { state: "running" }) === 3,
        token,
      );
      assert.equal(s.value("mesh_controller_nodes", { state: "enrolled" }), 2);
      assert.equal(s.value("mesh_controller_nodes", { state: "not-enrolled" }), 0);
      assert.equal(s.value("mesh_controller_nodes", { state: "silent" }), 0);
      assert.equal(s.value("mesh_controller_consumers"), 1, "notes' database");
      assert.equal(s.value("mesh_controller_failing_consumers"), 0);
      assert.equal(s.value("mesh_controller_passwords_minted_total"), 1);
      assert.ok((s.value("mesh_controller_deliveries_published_total") ?? 0) >= 2, "one per node at least");
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 0);
      assert.ok(s.value("process_resident_memory_bytes") !== undefined, "the process's own metrics too");

      // Each provider mesh up runs serves its own metrics on a port of its own, which mesh status names.
      const status = async (...flags: string[]): Promise<string> => {
        let out = "";
        let err = "";
        const io = { out: (t: string) => void (out += t), err: (t: string) => void (err += t), env: {} };
        const code = await runCli(["status", "--state", join(dir, "state"), ...flags], {
          ...io,
          stdin: process.stdin,
        });
        assert.equal(code, 0, `mesh status failed:\n${out}${err}`);
        return out;
      };
      type Reported = { name: string; metrics?: string; log?: string };
      const modules = await until("postgres and redis to report where they serve metrics", async () => {
        const answer = JSON.parse(await status("--json")) as StatusAnswer;
        const all = new Map(
          (answer.nodes ?? []).flatMap((n) => (n.modules ?? []) as Reported[]).map((m) => [m.name, m]),
        );
        return all.get("postgres")?.metrics && all.get("redis")?.metrics ? all : undefined;
      });
      const pgUrl = modules.get("postgres")?.metrics ?? "";
      const redisUrl = modules.get("redis")?.metrics ?? "";
      const portOf = (u: string): number => Number(new URL(u).port);
      for (const u of [pgUrl, redisUrl]) assert.match(u, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      assert.notEqual(portOf(pgUrl), portOf(redisUrl), "two providers, two ports");
      assert.ok(![portOf(pgUrl), portOf(redisUrl)].includes(takenPort), "MESH_METRICS is not inherited");
      assert.equal(modules.get("notes")?.metrics, undefined, "a module that serves no metrics has none");
      const text = await status();
      const escaped = (u: string): string => u.replaceAll(".", "\\.");
      assert.match(text, new RegExp(`\\n {2}postgres +running +\\d+ +${escaped(pgUrl)}\\n`));
      assert.match(text, new RegExp(`\\n {2}redis +running +\\d+ +${escaped(redisUrl)}\\n`));

      const PG = { interface: "postgres-database", instance: "postgres" };
      const REDIS = { interface: "redis-namespace", instance: "redis" };
      let pg = await scrapeUntil(
        "postgres to count notes' login active",
        pgUrl,
        (x) => x.value("mesh_provider_consumers", { ...PG, state: "active" }) === 1,
      );
      assert.equal(pg.value("mesh_provider_creates_total", { ...PG, kind: "created" }), 1, "notes' login");
      const rd = await scrapeUntil(
        "redis to finish a pass",
        redisUrl,
        (x) => (x.value("mesh_provider_passes_total", { ...REDIS, kind: "periodic" }) ?? 0) >= 1,
      );
      assert.equal(rd.value("mesh_provider_consumers", { ...REDIS, state: "active" }), 0, "no consumer asks");
      assert.equal(rd.value("mesh_provider_creates_total", { ...REDIS, kind: "created" }) ?? 0, 0);

      await writeAtomic(fleet, fleetYaml(server.port, true));
      s = await scrapeUntil(
        "blog's password minted, once the change is published",
        url,
        (x) => x.value("mesh_controller_passwords_minted_total") === 2,
        token,
      );
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 1);
      assert.equal(s.value("mesh_controller_consumers"), 2);
      assert.equal(s.value("mesh_controller_fleet_refused"), 0);
      // At the same address: a new consumer restarts no provider.
      pg = await scrapeUntil(
        "postgres to count blog's login active too",
        pgUrl,
        (x) => x.value("mesh_provider_consumers", { ...PG, state: "active" }) === 2,
      );
      assert.equal(pg.value("mesh_provider_creates_total", { ...PG, kind: "created" }), 2);

      await writeAtomic(fleet, "nodes: [this is not a fleet");
      s = await scrapeUntil(
        "the broken fleet refused",
        url,
        (x) => x.value("mesh_controller_reloads_total", { result: "refused" }) === 1,
        token,
      );
      assert.equal(s.value("mesh_controller_fleet_refused"), 1);
      assert.equal(s.value("mesh_controller_consumers"), 2, "the last good fleet is still served");

      const scraper = { authorization: `Bearer ${token}` };
      const head = await fetch(url, { method: "HEAD", headers: scraper });
      assert.equal(head.status, 200);
      const operator = {
        authorization: `Bearer ${(await readFile(join(dir, "state", "controller", "operator.token"), "utf8")).trim()}`,
      };
      assert.equal((await fetch(`${base}/no-such-page`, { headers: operator })).status, 404);
      assert.equal((await fetch(`${base}/no-such-page`)).status, 401, "without a credential, not even that");
      assert.equal((await fetch(url, { method: "POST", headers: operator })).status, 405);

      // A clean stop takes each provider's metrics.url with it.
      const files = [...modules.values()]
        .filter((m) => m.metrics !== undefined && m.log !== undefined)
        .map((m) => join(dirname(m.log ?? ""), "home", "metrics.url"));
      assert.equal(files.length, 2);
      await Promise.all(files.map((f) => access(f)));
      await stopUp();
      for (const f of files) await assert.rejects(access(f), { code: "ENOENT" }, f);
    });

    it("mesh up refuses an operator token file others may read, before starting anything", async () => {
      const fleet = join(dir, "refused.yaml");
      await writeAtomic(fleet, fleetYaml(server.port, false));
      const open = join(dir, "open.token");
      await writeFile(open, "a-token-anyone-on-this-machine-reads\n");
      await chmod(open, 0o644);
      const child = spawn(
        process.execPath,
        [MESH, "up", fleet, "--state", join(dir, "refused-state"), "--operator-token-file", open],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let said = "";
      child.stdout.on("data", (d: Buffer) => (said += d.toString()));
      child.stderr.on("data", (d: Buffer) => (said += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      assert.equal(code, 2, said);
      assert.match(
        said,
        /--operator-token-file: the operator token file .*open\.token may be read or written by others \(mode 644\): chmod 600/,
      );
      assert.doesNotMatch(said, /nats-server answers/, "the bus never started");
      assert.doesNotMatch(said, /a-token-anyone/, "the token is never printed");
    });
  });

  describe("a Postgres provider process", () => {
    let running: ProviderProcess | undefined;
    after(async () => {
      await running?.stop();
    });

    it("shows its creates and consumers by state moving as its contributions change", async () => {
      const receives = join(dir, "postgres-database.json");
      const ask = async (logins: readonly string[]): Promise<void> => {
        for (const login of logins) {
          await writeAtomic(join(dir, `${login}.secret`), randomBytes(18).toString("base64url"));
        }
        await writeAtomic(
          receives,
          JSON.stringify({
            requirement: "postgres-database",
            given: logins.map((as) => ({ as, secret: join(dir, `${as}.secret`), node: "n1", values: {} })),
          }),
        );
      };
      await ask(["metrics_a", "metrics_b"]);
      const lines: string[] = [];
      running = await startProviderProcess({
        provider: postgres,
        receives,
        adminUrl,
        instance: "metrics",
        every: 200,
        metrics: "127.0.0.1:0",
        logger: { info: (m) => lines.push(m), warn: (m) => lines.push(m), error: (m) => lines.push(m) },
      });
      const url = running.metrics?.url;
      assert.ok(url, "it serves metrics when given an address");
      assert.ok(
        lines.some((l) => l.includes(`metrics: ${url}`)),
        "and says where",
      );
      assert.ok(!lines.join("\n").includes(new URL(adminUrl).password), "never the admin password");
      const L = { interface: "postgres-database", instance: "metrics" };

      let s = await scrapeUntil(
        "both consumers created",
        url,
        (x) => x.value("mesh_provider_consumers", { ...L, state: "active" }) === 2,
      );
      assert.equal(s.value("mesh_provider_creates_total", { ...L, kind: "created" }), 2);
      assert.ok((s.value("mesh_provider_passes_total", { ...L, kind: "periodic" }) ?? 0) >= 1);
      assert.ok((s.value("mesh_provider_pass_duration_seconds_count", L) ?? 0) >= 1);
      assert.equal(s.value("mesh_provider_failures_total", L), undefined);
      const roles = await server.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_roles WHERE rolname IN ('metrics_a', 'metrics_b')",
      );
      assert.equal(roles[0]?.n, 2, "the metrics count what the server holds");

      await ask(["metrics_a"]);
      s = await scrapeUntil(
        "metrics_b counted unasked, then retired",
        url,
        (x) => x.value("mesh_provider_consumers", { ...L, state: "retired" }) === 1,
      );
      assert.equal(s.value("mesh_provider_consumers", { ...L, state: "active" }), 1);
      assert.equal(s.value("mesh_provider_retirements_total", { ...L, by: "provisioner" }), 1);
    });
  });
});
