// Where each module serves its metrics: the address the agent gives it (a free loopback port unless
// the fleet file says otherwise, whatever the agent inherited), the URL it writes once it listens,
// and what the agent reports of it.
import assert from "node:assert/strict";
import { until } from "@mesh/testkit";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Delivery } from "@mesh/manifest";
import { metricsUrlPath } from "@mesh/sdk/provider";
import { decideLaunch, DEFAULT_MODULE_METRICS, moduleEnv } from "../src/module-launch.ts";
import { InvalidDeliveryError, parseDelivery } from "../src/delivery.ts";
import { ModuleProcess, type ModuleStatus } from "../src/module-process.ts";
import { readModuleMetricsUrl, withMetricsUrls } from "../src/module-metrics.ts";
import { recordingLogger } from "./test-mesh.ts";

const delivery = (modules: Delivery["modules"]): Delivery => ({
  node: "n1",
  generation: 1,
  fleetFile: "/srv/mesh.yaml",
  modules,
  plan: { instances: [] },
  secrets: {},
});

void describe("a module's metrics address", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-module-metrics-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("is a free loopback port, whatever MESH_METRICS the agent inherited, unless the fleet sets one", async () => {
    const d = delivery([
      { name: "postgres", manifest: join(dir, "postgres", "module.json") },
      { name: "redis", manifest: join(dir, "redis", "module.json"), metrics: "0.0.0.0:9464" },
    ]);
    const ctx = { node: "n1", stateDir: dir, baseEnv: { MESH_METRICS: "127.0.0.1:9100", KEEP: "yes" } };
    assert.equal(DEFAULT_MODULE_METRICS, "127.0.0.1:0");
    assert.equal(moduleEnv("postgres", d, ctx)["MESH_METRICS"], "127.0.0.1:0");
    assert.equal(moduleEnv("redis", d, ctx)["MESH_METRICS"], "0.0.0.0:9464");

    // The whole launch: neither the inherited address nor anything else of the agent's reaches a module.
    for (const m of d.modules) {
      await mkdir(join(dir, m.name), { recursive: true });
      await writeFile(m.manifest, JSON.stringify({ name: m.name, run: { command: "node", args: [] } }));
    }
    const launches = await Promise.all(d.modules.map((m) => decideLaunch(m, d, ctx)));
    const env = launches.map((l) => (l.kind === "run" ? l.launch.env : {}));
    assert.deepEqual(
      env.map((e) => [e["MESH_METRICS"], e["KEEP"]]),
      [
        ["127.0.0.1:0", undefined],
        ["0.0.0.0:9464", undefined],
      ],
    );
    const staleFiles = launches.map((l) => (l.kind === "run" ? l.launch.staleFiles : undefined));
    assert.deepEqual(staleFiles, [[metricsUrlPath(dir, "postgres")], [metricsUrlPath(dir, "redis")]]);
  });

  void it("is refused in a delivery when it is not HOST:PORT, and nothing of that delivery is applied", () => {
    const good = delivery([{ name: "app", manifest: "/srv/app/module.json", metrics: "127.0.0.1:0" }]);
    assert.deepEqual(parseDelivery(good, "n1"), good);
    for (const metrics of ["not an address", 9464, "host.example:80"]) {
      assert.throws(
        () => parseDelivery({ ...good, modules: [{ ...good.modules[0], metrics }] }, "n1"),
        (err: unknown) =>
          err instanceof InvalidDeliveryError && /modules\[0\]\.metrics is not HOST:PORT/.test(err.message),
      );
    }
  });
});

void describe("the metrics URL a module wrote", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-module-metrics-url-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const status = (name: string, state: ModuleStatus["state"]): ModuleStatus => ({
    name,
    state,
    restarts: 0,
    log: "",
  });
  const write = async (module: string, text: string): Promise<void> => {
    await mkdir(dirname(metricsUrlPath(dir, module)), { recursive: true });
    await writeFile(metricsUrlPath(dir, module), text);
  };

  void it("is reported for a running module, never for one that is not running", async () => {
    await write("postgres", "http://127.0.0.1:41234/metrics\n");
    await write("redis", "http://127.0.0.1:41235/metrics\n");
    const reported = withMetricsUrls(dir, [
      status("postgres", "running"),
      status("redis", "crashing"),
      status("notes", "running"),
    ]);
    assert.deepEqual(
      reported.map((s) => [s.name, s.metrics]),
      [
        ["postgres", "http://127.0.0.1:41234/metrics"],
        ["redis", undefined],
        ["notes", undefined],
      ],
    );
  });

  void it("is read only when it is an http(s) URL without credentials, of reasonable length", async () => {
    for (const bad of [
      "javascript:alert(1)",
      "file:///etc/passwd",
      "http://user:secret@127.0.0.1:1/metrics",
      "not a url",
      "",
      `http://127.0.0.1:1/${"x".repeat(3000)}`,
    ]) {
      await write("app", bad);
      assert.equal(readModuleMetricsUrl(dir, "app"), undefined, bad);
    }
    await write("app", "https://10.0.0.2:9464/metrics");
    assert.equal(readModuleMetricsUrl(dir, "app"), "https://10.0.0.2:9464/metrics");
  });

  void it("left by a process that is gone is removed before the module starts again", async () => {
    const file = metricsUrlPath(dir, "worker");
    await write("worker", "http://127.0.0.1:1/metrics\n");
    // The new run writes its URL only once the test says so (a file), so that what is looked at
    // below is what start() left, however long this process is kept off the CPU meanwhile.
    const go = join(dir, "worker-may-write");
    const script =
      `const fs = require("node:fs");` +
      `const t = setInterval(() => { if (fs.existsSync(${JSON.stringify(go)})) {` +
      ` clearInterval(t); fs.writeFileSync(${JSON.stringify(file)}, "http://127.0.0.1:2/metrics\\n"); } }, 20);` +
      `setInterval(() => {}, 1000);`;
    const seen: string[] = [];
    const logger = recordingLogger();
    const proc = new ModuleProcess(
      {
        name: "worker",
        command: process.execPath,
        args: ["-e", script],
        cwd: dir,
        env: {},
        logFile: join(dir, "modules", "worker", "log"),
        staleFiles: [file],
      },
      logger,
      { restartFirstMs: 50, restartMaxMs: 400, stopGraceMs: 2_000, crashWindowMs: 60_000, crashExits: 5 },
      () => seen.push(readModuleMetricsUrl(dir, "worker") ?? "none"),
    );
    proc.start();
    try {
      // The stale file is gone as soon as start() returns.
      assert.equal(existsSync(file), false);
      await writeFile(go, "");
      await until("the new run's URL", () => readModuleMetricsUrl(dir, "worker") !== undefined);
      assert.equal(readModuleMetricsUrl(dir, "worker"), "http://127.0.0.1:2/metrics");
      assert.ok(!seen.includes("http://127.0.0.1:1/metrics"), "the old URL was never there to read");
    } finally {
      await proc.stop();
    }
  });
});
