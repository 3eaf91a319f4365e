// Prometheus scrapes the mesh as an operator runs it: the controller `mesh up` started (its address
// read from what mesh up prints), and a real Postgres provider process, each over HTTP, read in the
// text format, while the fleet and the contributions change.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { provider as postgres } from "@mesh/provider-postgres";
import { startProviderProcess, type ProviderProcess } from "@mesh/sdk";
import { scrapeProm, startPostgres, type PostgresServer, type PromScrape } from "@mesh/testkit";

const root = fileURLToPath(new URL("..", import.meta.url));
const MESH = join(root, "packages", "cli", "bin", "mesh.js");
const PG_MANIFEST = JSON.stringify(join(root, "providers", "postgres", "module.json"));
const NOTES_MANIFEST = JSON.stringify(join(root, "examples", "fleet", "notes", "module.json"));

/** Polls `probe` until it answers something; the deadline only ends a test that would hang. */
async function until<T>(what: string, probe: () => Promise<T | undefined>, seconds = 120): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`gave up waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Waits until a scrape of `url` satisfies `check`, and answers that scrape. */
function scrapeUntil(what: string, url: string, check: (s: PromScrape) => boolean): Promise<PromScrape> {
  return until(what, async () => {
    const s = await scrapeProm(url);
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
  let adminUrl: string;
  let dir: string;
  before(async () => {
    server = await startPostgres();
    adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-metrics-"));
  });
  after(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  describe("the controller mesh up starts", () => {
    let up: ChildProcess | undefined;
    let output = "";
    after(async () => {
      if (up && up.exitCode === null) {
        const closed = new Promise((resolve) => up?.once("close", resolve));
        up.kill("SIGINT");
        await closed;
      }
    });

    it("shows its nodes, modules and consumers, and counts reloads and mints as the fleet changes", async () => {
      const fleet = join(dir, "mesh.yaml");
      await writeAtomic(fleet, fleetYaml(server.port, false));
      up = spawn(process.execPath, [MESH, "up", fleet, "--state", join(dir, "state")], {
        env: { ...process.env, MESH_POSTGRES_URL: adminUrl, MESH_EVERY: "1s" },
        stdio: ["ignore", "pipe", "pipe"],
      });
      up.stdout?.on("data", (d: Buffer) => (output += d.toString()));
      up.stderr?.on("data", (d: Buffer) => (output += d.toString()));
      const base = await until("mesh up to print its HTTP address", () => {
        if (up?.exitCode !== null) throw new Error(`mesh up exited ${up?.exitCode}:\n${output}`);
        return Promise.resolve(/HTTP server: (http:\/\/127\.0\.0\.1:\d+) /.exec(output)?.[1]);
      });
      const url = `${base}/metrics`;

      let s = await scrapeUntil("both nodes reporting and both modules running", url, (x) => {
        return (
          x.value("mesh_controller_nodes", { state: "reporting" }) === 2 &&
          x.value("mesh_controller_modules", { state: "running" }) === 2
        );
      });
      assert.equal(s.value("mesh_controller_nodes", { state: "enrolled" }), 2);
      assert.equal(s.value("mesh_controller_nodes", { state: "not-enrolled" }), 0);
      assert.equal(s.value("mesh_controller_nodes", { state: "silent" }), 0);
      assert.equal(s.value("mesh_controller_consumers"), 1, "notes' database");
      assert.equal(s.value("mesh_controller_failing_consumers"), 0);
      assert.equal(s.value("mesh_controller_passwords_minted_total"), 1);
      assert.ok((s.value("mesh_controller_deliveries_published_total") ?? 0) >= 2, "one per node at least");
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 0);
      assert.ok(s.value("process_resident_memory_bytes") !== undefined, "the process's own metrics too");

      await writeAtomic(fleet, fleetYaml(server.port, true));
      s = await scrapeUntil(
        "blog's password minted, once the change is published",
        url,
        (x) => x.value("mesh_controller_passwords_minted_total") === 2,
      );
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 1);
      assert.equal(s.value("mesh_controller_consumers"), 2);
      assert.equal(s.value("mesh_controller_fleet_refused"), 0);

      await writeAtomic(fleet, "nodes: [this is not a fleet");
      s = await scrapeUntil(
        "the broken fleet refused",
        url,
        (x) => x.value("mesh_controller_reloads_total", { result: "refused" }) === 1,
      );
      assert.equal(s.value("mesh_controller_fleet_refused"), 1);
      assert.equal(s.value("mesh_controller_consumers"), 2, "the last good fleet is still served");

      const head = await fetch(url, { method: "HEAD" });
      assert.equal(head.status, 200);
      assert.equal((await fetch(`${base}/no-such-page`)).status, 404);
      assert.equal((await fetch(url, { method: "POST" })).status, 405);
    });

    it("mesh up refuses --http on an address other machines reach, before starting anything", async () => {
      const fleet = join(dir, "refused.yaml");
      await writeAtomic(fleet, fleetYaml(server.port, false));
      const child = spawn(
        process.execPath,
        [MESH, "up", fleet, "--state", join(dir, "refused-state"), "--http", "0.0.0.0:0"],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let said = "";
      child.stdout.on("data", (d: Buffer) => (said += d.toString()));
      child.stderr.on("data", (d: Buffer) => (said += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
      assert.equal(code, 2, said);
      assert.match(said, /--http: .*0\.0\.0\.0:0.*operator token/s);
      assert.doesNotMatch(said, /nats-server answers/, "the bus never started");
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
