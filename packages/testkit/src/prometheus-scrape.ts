// Scraping a Prometheus endpoint in a test as Prometheus would: over HTTP, reading the text
// exposition format, so a test asserts on what a scraper sees rather than on a registry's insides.

/** One sample line: a series and its value. */
export interface PromSample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** A parsed exposition: every sample, and each metric family's declared type and help. */
export interface PromScrape {
  readonly samples: readonly PromSample[];
  /** `counter`, `gauge`, `histogram`... by family name. */
  readonly types: ReadonlyMap<string, string>;
  readonly help: ReadonlyMap<string, string>;
  /**
   * The sum of the samples named `name` whose labels include every one of `labels`; undefined when
   * no series matches (which is not the same as 0).
   */
  value(name: string, labels?: Readonly<Record<string, string>>): number | undefined;
}

/** The text exposition was not what Prometheus would accept; names the line. */
export class PromParseError extends Error {
  override name = "PromParseError";
  constructor(
    readonly line: string,
    why: string,
  ) {
    super(`not Prometheus text (${why}): ${JSON.stringify(line)}`);
  }
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y;

/**
 * Parses Prometheus text format 0.0.4.
 * @throws PromParseError on a line that is not a comment, blank, or a well-formed sample.
 */
export function parsePromText(text: string): PromScrape {
  const samples: PromSample[] = [];
  const types = new Map<string, string>();
  const help = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    if (line.startsWith("#")) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (m?.[1] === "TYPE") types.set(m[2] ?? "", m[3] ?? "");
      if (m?.[1] === "HELP") help.set(m[2] ?? "", m[3] ?? "");
      continue;
    }
    const m = SAMPLE.exec(line);
    if (m === null) throw new PromParseError(line, "not NAME{LABELS} VALUE");
    const labels: Record<string, string> = {};
    const body = m[3] ?? "";
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const l = LABEL.exec(body);
      if (l === null) throw new PromParseError(line, "bad labels");
      labels[l[1] ?? ""] = (l[2] ?? "").replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c));
    }
    // As Prometheus reads a value (Go's ParseFloat): NaN and Inf in any case (prom-client writes "Nan").
    const raw = (m[4] ?? "").toLowerCase();
    const value = /^[+]?inf$/.test(raw)
      ? Infinity
      : raw === "-inf"
        ? -Infinity
        : raw === "nan"
          ? NaN
          : Number(raw);
    if (Number.isNaN(value) && raw !== "nan") throw new PromParseError(line, "the value is not a number");
    samples.push({ name: m[1] ?? "", labels, value });
  }
  return {
    samples,
    types,
    help,
    value(name, want = {}) {
      let sum: number | undefined;
      for (const s of samples) {
        if (s.name !== name) continue;
        if (!Object.entries(want).every(([k, v]) => s.labels[k] === v)) continue;
        sum = (sum ?? 0) + s.value;
      }
      return sum;
    },
  };
}

/**
 * GETs `url` (a /metrics endpoint) and parses what it answers. `options.token` is sent as
 * `Authorization: Bearer` (the controller's /metrics asks for its scrape token).
 * @throws Error when the answer is not 200 with a text/plain (or OpenMetrics) body; PromParseError.
 */
export async function scrapeProm(url: string, options: { token?: string } = {}): Promise<PromScrape> {
  const res = await fetch(
    url,
    options.token === undefined ? {} : { headers: { authorization: `Bearer ${options.token}` } },
  );
  const body = await res.text();
  if (res.status !== 200) throw new Error(`GET ${url} answered ${res.status}: ${body.slice(0, 200)}`);
  const type = res.headers.get("content-type") ?? "";
  if (!type.startsWith("text/plain") && !type.startsWith("application/openmetrics-text")) {
    throw new Error(`GET ${url} answered ${type || "no content type"}, not the Prometheus text format`);
  }
  return parsePromText(body);
}
