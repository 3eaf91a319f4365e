// The alerts as an operator runs them: Debian's Prometheus loads deploy/prometheus/mesh.rules.yml
// (a copy whose `for:` are seconds, so the test need not wait minutes) and scrapes a real `mesh up`
// through the file_sd JSON the mesh keeps, the controller with its scrape token; it sends to
// Debian's Alertmanager. A consumer is broken in its backend (the provider's admin password changed
// under it: its provider can no longer check it), and the alert is seen at Alertmanager's own API.
// The same running mesh's /metrics, scraped by hand, serve every metric a rule or the Grafana
// dashboard (deploy/grafana/mesh.json) names.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, scrapeProm, startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { alertRules, dashboardQueries, metricNames, RULES_FILE } from "./alert-files.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const PG_MANIFEST = JSON.stringify(join(root, "providers", "postgres", "module.json"));
const NOTES_MANIFEST = JSON.stringify(join(root, "examples", "fleet", "notes", "module.json"));
const PROMETHEUS = "/usr/bin/prometheus";
const ALERTMANAGER = "/usr/bin/prometheus-alertmanager";

interface AmAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  status: { state: string };
}

/** A server this test started, stopped by its PID in `after`. */
interface Started {
  readonly child: ChildProcess;
  output(): string;
}

function run(binary: string, args: readonly string[]): Started {
  const child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.stderr?.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  child.on("error", (err) => (out += `\ncould not run ${binary}: ${err.message}`));
  return { child, output: () => out };
}

async function stop(s: Started | undefined): Promise<void> {
  const child = s?.child;
  if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const closed = new Promise((resolve) => child.once("close", resolve));
  child.kill("SIGTERM");
  const killed = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await closed;
  clearTimeout(killed);
}

describe("alerts from a running mesh, through Prometheus to Alertmanager", { timeout: 420_000 }, () => {
  let postgres: PostgresServer;
  let dir: string;
  let up: MeshProcess | undefined;
  let prometheus: Started | undefined;
  let alertmanager: Started | undefined;
  const state = () => join(dir, "state");

  before(async () => {
    postgres = await startPostgres();
    dir = await mkdtemp(join(tmpdir(), "mesh-alerts-"));
    // Readable by the modules' own users.
    await chmod(dir, 0o755);
  });
  after(async () => {
    await stop(prometheus);
    await stop(alertmanager);
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await postgres?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("a consumer broken in its backend is alerted at Alertmanager, and every metric the rules and the dashboard name is served", async () => {
    const adminUrl = await postgres.createAdmin("mesh_admin");
    const fleet = join(dir, "mesh.yaml");
    await writeFile(
      fleet,
      `nodes:
  node-1: {}
modules:
  postgres:
    manifest: ${PG_MANIFEST}
    node: node-1
    endpoint: { host: 127.0.0.1, port: ${postgres.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  notes: { manifest: ${NOTES_MANIFEST}, node: node-1 }
`,
    );
    const mesh = startMesh(["up", fleet, "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
      MESH_EVERY: "1s",
    });
    up = mesh;
    const said = (err: unknown): never => {
      throw new Error(`${(err as Error).message}\nmesh up said:\n${mesh.output().slice(-6000)}`);
    };
    await mesh.waitFor(/the modules start/).catch(said);
    const base = /HTTP server: (http:\/\/127\.0\.0\.1:\d+) /.exec(mesh.output())?.[1];
    assert.ok(base, "mesh up prints its HTTP address");
    const tokenFile = join(state(), "controller", "scrape.token");
    const token = (await readFile(tokenFile, "utf8")).trim();
    const controller = () => scrapeProm(`${base}/metrics`, { token });
    const L = { consumer: "notes", provider: "postgres", interface: "postgres-database" };
    await until("notes served and its provider heard, nothing failing", async () => {
      const s = await controller();
      return (
        s.value("mesh_consumer_failing", L) === 0 &&
        s.value("mesh_provider_heard", { provider: "postgres" }) === 1 &&
        s.value("mesh_node_reporting", { node: "node-1" }) === 1 &&
        s.value("mesh_module_state", { module: "notes", state: "running" }) === 1
      );
    }).catch(said);

    // Alertmanager, then Prometheus sending to it, on free loopback ports; no gossip.
    const amPort = await freePort();
    const am = `http://127.0.0.1:${amPort}`;
    await mkdir(join(dir, "am"), { recursive: true });
    await writeFile(
      join(dir, "am", "alertmanager.yml"),
      `route:
  receiver: operator
  group_by: [alertname]
  group_wait: 1s
receivers:
  - name: operator
`,
    );
    alertmanager = run(ALERTMANAGER, [
      `--config.file=${join(dir, "am", "alertmanager.yml")}`,
      `--storage.path=${join(dir, "am", "data")}`,
      `--web.listen-address=127.0.0.1:${amPort}`,
      "--cluster.listen-address=",
    ]);
    const amAlerts = async (): Promise<AmAlert[]> => {
      const res = await fetch(`${am}/api/v2/alerts`);
      assert.equal(res.status, 200);
      return (await res.json()) as AmAlert[];
    };
    await until("Alertmanager to answer", () => amAlerts().then(() => true), 60).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\nalertmanager said:\n${alertmanager?.output()}`);
    });

    // The rules as shipped, but for seconds: each `for:` shortened, nothing else changed.
    const rules = (await readFile(RULES_FILE, "utf8")).replace(/^(\s+)for: \S+$/gm, "$1for: 2s");
    assert.notEqual(rules, await readFile(RULES_FILE, "utf8"));
    const promDir = join(dir, "prometheus");
    await mkdir(promDir, { recursive: true });
    await writeFile(join(promDir, "mesh.rules.yml"), rules);
    await writeFile(join(promDir, "scrape.token"), token, { mode: 0o600 });
    const targets = join(state(), "scrape", "targets.json");
    await writeFile(
      join(promDir, "prometheus.yml"),
      `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: ["${join(promDir, "mesh.rules.yml")}"]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["127.0.0.1:${amPort}"]
scrape_configs:
  - job_name: mesh-controller
    authorization:
      credentials_file: "${join(promDir, "scrape.token")}"
    file_sd_configs:
      - files: ["${targets}"]
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [mesh]
        regex: controller
        action: keep
  - job_name: mesh
    file_sd_configs:
      - files: ["${targets}"]
        refresh_interval: 1s
    relabel_configs:
      - source_labels: [mesh]
        regex: controller
        action: drop
`,
    );
    const promPort = await freePort();
    const api = `http://127.0.0.1:${promPort}`;
    prometheus = run(PROMETHEUS, [
      `--config.file=${join(promDir, "prometheus.yml")}`,
      `--storage.tsdb.path=${join(promDir, "data")}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
    ]);
    const promSaid = (err: unknown): never => {
      throw new Error(`${(err as Error).message}\nprometheus said:\n${prometheus?.output().slice(-4000)}`);
    };
    const query = async (q: string): Promise<number | undefined> => {
      const res = await fetch(`${api}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = (await res.json()) as { data?: { result: { value: [number, string] }[] } };
      const v = body.data?.result[0]?.value[1];
      return v === undefined ? undefined : Number(v);
    };
    await until(
      "Prometheus to scrape the controller with the token",
      async () => (await query('up{mesh="controller"}')) === 1,
      90,
    ).catch(promSaid);
    await until(
      "Prometheus to load the rules",
      async () => {
        const res = await fetch(`${api}/api/v1/rules`);
        const body = (await res.json()) as { data: { groups: { rules: unknown[] }[] } };
        return body.data.groups.reduce((n, g) => n + g.rules.length, 0) === (await alertRules()).length;
      },
      60,
    ).catch(promSaid);
    // All is well: no consumer is alerted.
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const failingAlerts = (all: AmAlert[]): AmAlert[] =>
      all.filter((a) => a.labels["alertname"] === "MeshConsumerFailing");
    assert.deepEqual(failingAlerts(await amAlerts()), [], "nothing fails before the break");

    // The break: the provider's admin password changes under it and its sessions end, so it cannot
    // check notes' login any more.
    await postgres.query("ALTER ROLE mesh_admin PASSWORD 'changed-behind-the-mesh-9Xq'");
    await postgres.query(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'mesh_admin'",
    );
    const broke = Date.now();
    const [alert] = await until(
      "MeshConsumerFailing for notes at Alertmanager",
      async () => {
        const found = failingAlerts(await amAlerts()).filter(
          (a) => a.labels["consumer"] === "notes" && a.status.state === "active",
        );
        return found.length > 0 ? found : undefined;
      },
      240,
    ).catch((err: unknown) =>
      promSaid(new Error(`${(err as Error).message}\nmesh up said:\n${mesh.output().slice(-3000)}`)),
    );
    console.log(`Alertmanager had the alert ${((Date.now() - broke) / 1000).toFixed(1)} s after the break`);
    assert.equal(alert?.labels["provider"], "postgres");
    assert.equal(alert?.labels["interface"], "postgres-database");
    assert.equal(alert?.labels["login"], "notes_postgres");
    assert.equal(alert?.labels["node"], "node-1");
    assert.equal(alert?.labels["severity"], "critical");
    assert.match(alert?.annotations["summary"] ?? "", /notes's postgres-database fails at postgres/);

    // Every metric a rule or the dashboard names, in a real scrape: the controller's, and the
    // provider's own (its failures are counted now that it fails).
    const providerUrl = await until("the provider's metrics address", async () => {
      const groups = JSON.parse(await readFile(targets, "utf8")) as {
        targets: string[];
        labels: Record<string, string>;
      }[];
      const g = groups.find((x) => x.labels["module"] === "postgres");
      return g === undefined ? undefined : `http://${g.targets[0]}/metrics`;
    });
    const seen = new Set<string>();
    await until("the provider to count its failure", async () => {
      const p = await scrapeProm(providerUrl);
      return (p.value("mesh_provider_failures_total") ?? 0) > 0;
    });
    for (const s of [await controller(), await scrapeProm(providerUrl)]) {
      for (const sample of s.samples) seen.add(sample.name);
    }
    const named = new Set<string>();
    for (const r of await alertRules()) metricNames(r.expr).forEach((n) => named.add(n));
    for (const q of await dashboardQueries()) metricNames(q).forEach((n) => named.add(n));
    assert.ok(named.size >= 15, [...named].join(", "));
    const missing = [...named].filter((n) => !seen.has(n));
    assert.deepEqual(missing, [], "named by a rule or the dashboard, served by no scrape");
  });
});
