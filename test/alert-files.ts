// The alert rules and the Grafana dashboard the repository ships (deploy/), read as an operator's
// Prometheus and Grafana read them: which alerts there are, and every metric their queries name,
// so the tests can hold them to what a running mesh serves.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";

const root = fileURLToPath(new URL("..", import.meta.url));
/** deploy/prometheus/mesh.rules.yml. */
export const RULES_FILE = join(root, "deploy", "prometheus", "mesh.rules.yml");
/** Its promtool unit tests. */
export const RULES_TEST_FILE = join(root, "deploy", "prometheus", "mesh.rules.test.yml");
/** deploy/grafana/mesh.json. */
export const DASHBOARD_FILE = join(root, "deploy", "grafana", "mesh.json");

/** One alerting rule of the rules file. */
export interface AlertRule {
  readonly alert: string;
  readonly expr: string;
  readonly for?: string;
}

/** Every alerting rule of `file` (mesh.rules.yml unless told). */
export async function alertRules(file = RULES_FILE): Promise<AlertRule[]> {
  const doc = parse(await readFile(file, "utf8")) as { groups: { rules: Partial<AlertRule>[] }[] };
  return doc.groups.flatMap((g) =>
    g.rules.filter((r): r is AlertRule => typeof r.alert === "string" && typeof r.expr === "string"),
  );
}

/** Every PromQL expression of the Grafana dashboard's panels (their targets' `expr`). */
export async function dashboardQueries(file = DASHBOARD_FILE): Promise<string[]> {
  const found: string[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (typeof v === "object" && v !== null) {
      for (const [k, inner] of Object.entries(v)) {
        if (k === "expr" && typeof inner === "string") found.push(inner);
        else walk(inner);
      }
    }
  };
  walk(JSON.parse(await readFile(file, "utf8")));
  return found;
}

// What Prometheus makes itself (for each scrape, and for each alert), never served by a target.
const SYNTHETIC = new Set([
  "up",
  "scrape_duration_seconds",
  "scrape_samples_scraped",
  "ALERTS",
  "ALERTS_FOR_STATE",
]);
// PromQL's own words: functions, aggregations and keywords, which look like metric names.
const PROMQL_WORDS = new Set([
  "sum",
  "min",
  "max",
  "avg",
  "count",
  "topk",
  "bottomk",
  "stddev",
  "stdvar",
  "quantile",
  "group",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "and",
  "or",
  "unless",
  "bool",
  "offset",
  "rate",
  "irate",
  "increase",
  "delta",
  "idelta",
  "deriv",
  "changes",
  "resets",
  "time",
  "timestamp",
  "abs",
  "ceil",
  "floor",
  "round",
  "clamp_min",
  "clamp_max",
  "absent",
  "absent_over_time",
  "vector",
  "scalar",
  "sort",
  "sort_desc",
  "label_replace",
  "label_join",
  "histogram_quantile",
  "max_over_time",
  "min_over_time",
  "avg_over_time",
  "sum_over_time",
  "count_over_time",
  "last_over_time",
  "inf",
  "nan",
]);

/**
 * The metric names an expression reads (label names, label values in quotes, durations and PromQL's
 * own words left out); without Prometheus's own `up` and `scrape_*`.
 */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, "{}")
    .replace(/\[[^\]]*\]/g, "[]")
    // `by (a, b)`, `without (…)`, `on (…)`, `group_left (…)`: label lists, not metrics.
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, "$1");
  const names = new Set<string>();
  for (const m of bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const word = m[0];
    const next = bare.slice((m.index ?? 0) + word.length).trimStart();
    if (PROMQL_WORDS.has(word) || SYNTHETIC.has(word) || /^\d/.test(word)) continue;
    if (next.startsWith("(")) continue; // a function
    if (/^\$/.test(word)) continue;
    names.add(word);
  }
  return [...names].sort();
}
