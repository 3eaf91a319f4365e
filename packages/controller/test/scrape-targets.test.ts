// The file_sd JSON the controller keeps for Prometheus: what it lists, and that it follows the
// modules as they come, go and move, written whole each time.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import type { ControllerStatus } from "../src/controller-status.ts";
import type { ModuleReport } from "../src/node-reports.ts";
import { keepScrapeTargets, scrapeTargetGroups } from "../src/scrape-targets.ts";

function statusWith(nodes: Record<string, Partial<ModuleReport>[]>): ControllerStatus {
  return {
    nodes: Object.entries(nodes).map(([name, modules]) => ({
      name,
      enrolled: true,
      lastReportAt: new Date().toISOString(),
      generation: 1,
      modules: modules.map((m) => ({ name: "x", state: "running", restarts: 0, log: "/log", ...m })),
    })),
    consumers: [],
    failing: [],
    providers: [],
    fleet: { file: "/fleet/mesh.yaml", readAt: new Date().toISOString(), refused: null },
  } as unknown as ControllerStatus;
}

describe("the scrape targets", () => {
  it("list the controller, then every running module with a metrics URL, labelled by module and node", () => {
    const groups = scrapeTargetGroups(
      statusWith({
        "node-b": [{ name: "redis", metrics: "http://127.0.0.1:4002/metrics" }],
        "node-a": [
          { name: "postgres", metrics: "http://127.0.0.1:4001/metrics" },
          { name: "exporter", metrics: "http://10.0.0.5:4003/probe" },
          { name: "notes" },
          { name: "crashed", state: "crashing", metrics: "http://127.0.0.1:4004/metrics" },
        ],
      }),
      "http://127.0.0.1:4000",
    );
    assert.deepEqual(groups, [
      { targets: ["127.0.0.1:4000"], labels: { mesh: "controller" } },
      {
        targets: ["10.0.0.5:4003"],
        labels: { mesh: "module", module: "exporter", node: "node-a", __metrics_path__: "/probe" },
      },
      { targets: ["127.0.0.1:4001"], labels: { mesh: "module", module: "postgres", node: "node-a" } },
      { targets: ["127.0.0.1:4002"], labels: { mesh: "module", module: "redis", node: "node-b" } },
    ]);
  });

  it("leave out a URL that is not http(s)", () => {
    const groups = scrapeTargetGroups(
      statusWith({ n: [{ name: "odd", metrics: "file:///etc/passwd" }] }),
      undefined,
    );
    assert.deepEqual(groups, []);
  });
});

describe("the kept scrape targets file", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-scrape-"));
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("is written at once, world-readable, and again as modules come, go and move", async () => {
    const file = join(dir, "scrape", "targets.json");
    let status = statusWith({ "node-a": [{ name: "postgres", metrics: "http://127.0.0.1:4001/metrics" }] });
    const kept = await keepScrapeTargets({
      file,
      status: () => status,
      controllerUrl: "http://127.0.0.1:4000",
      everyMs: 20,
    });
    try {
      const read = async () =>
        (JSON.parse(await readFile(file, "utf8")) as { targets: string[] }[]).map((g) => g.targets[0]);
      assert.deepEqual(await read(), ["127.0.0.1:4000", "127.0.0.1:4001"]);
      assert.equal((await stat(file)).mode & 0o777, 0o644, "it names no secret: Prometheus's user reads it");
      assert.equal((await stat(dirname(file))).mode & 0o777, 0o755);

      status = statusWith({
        "node-a": [
          { name: "postgres", metrics: "http://127.0.0.1:4011/metrics" },
          { name: "exporter", metrics: "http://127.0.0.1:4012/metrics" },
        ],
      });
      await until("the file to follow a moved module and a new one", async () => {
        const now = await read();
        return now.join(",") === "127.0.0.1:4000,127.0.0.1:4012,127.0.0.1:4011" ? true : undefined;
      });
      status = statusWith({ "node-a": [{ name: "exporter", state: "stopped" }] });
      await kept.refresh();
      assert.deepEqual(await read(), ["127.0.0.1:4000"], "a module gone is no target");
    } finally {
      kept.stop();
    }
  });
});
