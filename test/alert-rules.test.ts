// The alert rules the repository ships (deploy/prometheus/mesh.rules.yml), held to Prometheus's own
// tools: `promtool check rules` reads them as Prometheus would load them, and `promtool test rules`
// runs their unit tests (mesh.rules.test.yml), which give every alert at least one case.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { alertRules, dashboardQueries, DASHBOARD_FILE, RULES_FILE, RULES_TEST_FILE } from "./alert-files.ts";

function promtool(...args: string[]): { code: number | null; output: string } {
  const r = spawnSync("promtool", args, { encoding: "utf8", timeout: 60_000 });
  if (r.error && (r.error as NodeJS.ErrnoException).code === "ENOENT") {
    throw new Error("promtool not found on PATH; install the Debian package prometheus");
  }
  return { code: r.status, output: `${r.stdout}${r.stderr}` };
}

describe("the alert rules in deploy/prometheus", () => {
  it("load as Prometheus loads them (promtool check rules)", () => {
    const r = promtool("check", "rules", RULES_FILE);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /SUCCESS: \d+ rules found/);
  });

  it("pass their unit tests (promtool test rules)", () => {
    const r = promtool("test", "rules", RULES_TEST_FILE);
    assert.equal(r.code, 0, r.output);
    assert.match(r.output, /SUCCESS/);
  });

  it("every alert has a unit test that sees it fire and one that sees it quiet", async () => {
    const tests = parse(await readFile(RULES_TEST_FILE, "utf8")) as {
      tests: { alert_rule_test?: { alertname: string; exp_alerts: unknown[] }[] }[];
    };
    const cases = tests.tests.flatMap((t) => t.alert_rule_test ?? []);
    const rules = await alertRules();
    assert.ok(rules.length >= 6, "a consumer, a provider, a node, a retirement, the bus, a module");
    for (const { alert } of rules) {
      const mine = cases.filter((c) => c.alertname === alert);
      assert.ok(
        mine.some((c) => c.exp_alerts.length > 0),
        `${alert}: no test sees it fire`,
      );
      assert.ok(
        mine.some((c) => c.exp_alerts.length === 0),
        `${alert}: no test sees it quiet`,
      );
    }
  });

  it("a rule that fires too soon fails its unit test: the tests can fail", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-rules-"));
    try {
      const rules = (await readFile(RULES_FILE, "utf8")).replace(/\bfor: \S+/g, "for: 0s");
      await writeFile(join(dir, "mesh.rules.yml"), rules);
      await copyFile(RULES_TEST_FILE, join(dir, "mesh.rules.test.yml"));
      const r = promtool("test", "rules", join(dir, "mesh.rules.test.yml"));
      assert.notEqual(r.code, 0, "the tests pass whatever the rules' for: says");
      assert.match(r.output, /FAILED/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the Grafana dashboard in deploy/grafana", () => {
  it("is a dashboard whose every query is PromQL Prometheus accepts", async () => {
    const dashboard = JSON.parse(await readFile(DASHBOARD_FILE, "utf8")) as {
      title?: string;
      panels?: unknown[];
    };
    assert.equal(dashboard.title, "Mesh");
    assert.ok((dashboard.panels ?? []).length > 0);
    const queries = await dashboardQueries();
    assert.ok(queries.length >= 10, `${queries.length} queries`);
    // Grafana is not in Debian: promtool parses each query as it would parse a recording rule's,
    // with Grafana's own variables given a value first.
    const dir = await mkdtemp(join(tmpdir(), "mesh-dashboard-"));
    try {
      const rules = {
        groups: [
          {
            name: "dashboard",
            rules: queries.map((q, i) => ({
              record: `dashboard:query_${i}`,
              expr: q.replaceAll("$__rate_interval", "5m"),
            })),
          },
        ],
      };
      await writeFile(join(dir, "queries.yml"), JSON.stringify(rules));
      const r = promtool("check", "rules", join(dir, "queries.yml"));
      assert.equal(r.code, 0, r.output);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
