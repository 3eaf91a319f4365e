import { dirname, isAbsolute, join } from "node:path";
import { z } from "zod";
import { LineCounter, parseDocument } from "yaml";
import { ListenAddressError, parseListenAddress } from "./listen-address.ts";
import { ManifestError, parseManifest, readManifestText, type Manifest } from "./manifest.ts";
import {
  INTERFACE_PATTERN,
  INTERFACE_RULE,
  MODULE_NAME_PATTERN,
  MODULE_NAME_RULE,
  NODE_NAME_PATTERN,
  NODE_NAME_RULE,
} from "./names.ts";
import { fieldPath, ownObject, ProblemsError, readBounded, type Problem } from "./problem.ts";
import { SourcePositions } from "./source-positions.ts";
import { keyed, mustBe, strict, text, zodProblems } from "./zod-problems.ts";
import { limitsSchema, type ModuleLimits } from "./module-limits.ts";
import { formatRotationPeriod, parseRotationPeriod, rotateMinimumMs } from "./rotation-period.ts";

/** A machine of the fleet. */
export interface FleetNode {
  readonly name: string;
  /** How other nodes reach it (a host name or IP address); the default host of its providers' endpoints. */
  readonly address?: string | undefined;
  readonly line?: number | undefined;
}

/** What the fleet file says about one need of one module. */
export interface FleetNeed {
  readonly interface: string;
  /** Values added to (and overriding, key by key) the manifest's values for this need. */
  readonly values: Readonly<Record<string, unknown>>;
  /** The module that serves this need, when the fleet must choose among several. */
  readonly provider?: string | undefined;
  readonly line?: number | undefined;
}

/** One module of the fleet: which manifest, on which node, with what values. */
export interface FleetModule {
  /** The module's name in the fleet: its login, namespace and directories derive from it. */
  readonly name: string;
  /** The manifest's path, resolved against the fleet file's directory. */
  readonly manifest: string;
  readonly node: string;
  readonly needs: ReadonlyMap<string, FleetNeed>;
  /** Where this module's server really listens, when not where its manifest's endpoint says. */
  readonly endpoint?: { readonly host?: string | undefined; readonly port?: number | undefined } | undefined;
  /**
   * HOST:PORT where the module serves its Prometheus metrics, as written; absent: the agent gives
   * it 127.0.0.1 and a free port. Another host than loopback only ever comes from here.
   */
  readonly metrics?: string | undefined;
  /** Variables added to the module's environment, as written (the mesh's own MESH_* win over them). */
  readonly env?: Readonly<Record<string, string>> | undefined;
  /** Where a provider's agent finds its admin URL, which it hands to that provider alone. */
  readonly admin?: AdminUrlSource | undefined;
  /** What it may use of its node, as written (`effectiveLimits` fills in the defaults). */
  readonly limits?: ModuleLimits | undefined;
  /**
   * How often the controller rotates this module's password for an interface it needs (ms), by
   * interface, over the fleet's `rotate.every`.
   */
  readonly rotate?: Readonly<Record<string, number>> | undefined;
  readonly line?: number | undefined;
}

/**
 * Where a provider's admin URL comes from on its node: a file (0600, the URL alone; absolute, or
 * relative to the fleet file), or a variable of the agent's own environment. The agent reads it
 * and sets it in that provider's environment only, as `ADMIN_URL_VARIABLE` for a file and under
 * the variable's own name for a variable (`MESH_POSTGRES_URL`).
 */
export type AdminUrlSource = { readonly file: string } | { readonly env: string };

/** The variable a provider finds its admin URL in when the fleet names a file for it. */
export const ADMIN_URL_VARIABLE = "MESH_ADMIN_URL";

/** What a variable name in a fleet file looks like. */
export const ENV_NAME_PATTERN = /^[A-Z_][A-Z0-9_]{0,127}$/;

/**
 * A fleet file (`mesh.yaml`): the nodes, and which module runs on which node with what values.
 * Maps, not plain objects, so that a name like `constructor` is only ever data.
 */
export interface Fleet {
  /** The file it was read from, as given. */
  readonly file: string;
  readonly nodes: ReadonlyMap<string, FleetNode>;
  readonly modules: ReadonlyMap<string, FleetModule>;
  /** Line of every field by dotted path (`modules.notes.node`). */
  readonly lines: ReadonlyMap<string, number>;
  /** How often the controller rotates every consumer's password (ms), unless a module says otherwise; absent: never by itself. */
  readonly rotateEvery?: number | undefined;
}

/** A fleet file that cannot be used; each problem names the file, the line, the field and the fix. */
export class FleetError extends ProblemsError {
  override name = "FleetError";
}

/**
 * The largest fleet file read: a bound on what a mistaken path can make the controller hold, well
 * above a real fleet (one of 100,000 consumers across 100 nodes is about 6 MB).
 */
export const FLEET_MAX_BYTES = 32 * 1024 * 1024;

const EXAMPLE = `nodes:\n  node-1: {}\nmodules:\n  notes: { manifest: ./notes/module.json, node: node-1 }`;

const METRICS_WHAT =
  "HOST:PORT where the module serves its Prometheus metrics, like 127.0.0.1:9464 (port 0: any free port)";

// A host as it goes into a consumer's URL: letters, digits, dots, dashes, and an IPv6 address's
// colons and brackets; nothing that could end the host (`@`, `/`, `?`) or the URL.
const HOST_PATTERN = /^[A-Za-z0-9.:[\]-]+$/;

const PERIOD_WHAT = "a period like 30d, 7d or 12h (units: d, h, m, s)";

// A rotation period: read as one, and no shorter than the minimum (1h, unless MESH_ROTATE_MIN says
// less), so a typo cannot rotate every password every few seconds.
const periodSchema = text(PERIOD_WHAT).superRefine((value, ctx) => {
  const ms = parseRotationPeriod(value);
  if (ms === undefined) {
    ctx.addIssue({
      code: "custom",
      input: value,
      message: `must be ${PERIOD_WHAT}, not ${JSON.stringify(value)}`,
    });
    return;
  }
  const min = rotateMinimumMs();
  if (ms < min) {
    ctx.addIssue({
      code: "custom",
      input: value,
      message: `is shorter than ${formatRotationPeriod(min)}, the shortest rotation period: write ${formatRotationPeriod(min)} or more`,
    });
  }
});

const everySchema = strict({ every: periodSchema }, "an object like { every: 30d }");

const nodeSchema = strict(
  { address: text("a host name or IP address", HOST_PATTERN).optional() },
  "a node's settings, like { address: 10.0.0.2 } or {}",
).nullable();

const needSchema = strict(
  {
    values: z
      .record(z.string(), z.unknown(), { error: mustBe("an object of values like { name: notes }") })
      .optional(),
    provider: text(
      `the name of the module that provides it: ${MODULE_NAME_RULE}`,
      MODULE_NAME_PATTERN,
    ).optional(),
  },
  "an object like { values: { name: notes } } or { provider: postgres }",
).nullable();

const moduleSchema = strict(
  {
    manifest: text("the path of the module's module.json, relative to this file").min(1, {
      error: "must not be empty: it must be the path of the module's module.json",
    }),
    node: text(`a node name: ${NODE_NAME_RULE}`, NODE_NAME_PATTERN),
    needs: keyed(
      INTERFACE_PATTERN,
      `an interface name: ${INTERFACE_RULE}`,
      needSchema,
      "an object of interfaces",
    ).optional(),
    endpoint: strict(
      {
        host: text(
          "a host name or IP address consumers reach this provider's server at",
          HOST_PATTERN,
        ).optional(),
        port: z.number({ error: "must be a port number (1–65535)" }).int().min(1).max(65_535).optional(),
      },
      "an object like { host: 10.0.0.2, port: 5433 }",
    ).optional(),
    env: keyed(
      ENV_NAME_PATTERN,
      "a variable name of A-Z, 0-9 and _, like MESH_EVERY",
      z.union([z.string(), z.number(), z.boolean()], {
        error: mustBe("a string, a number or true/false, like 1s"),
      }),
      "an object of variables like { MESH_EVERY: 1s }",
    ).optional(),
    admin: z
      .union(
        [
          strict({ file: text("the path of a 0600 file holding the admin URL").min(1) }, "{ file: PATH }"),
          strict({ env: text("a variable name like MESH_POSTGRES_URL", ENV_NAME_PATTERN) }, "{ env: NAME }"),
        ],
        {
          error: mustBe(
            "where the provider's admin URL is: { file: /etc/mesh/postgres.url } or { env: MESH_POSTGRES_URL }",
          ),
        },
      )
      .optional(),
    metrics: text(METRICS_WHAT)
      .superRefine((value, ctx) => {
        try {
          parseListenAddress(value);
        } catch (err) {
          if (!(err instanceof ListenAddressError)) throw err;
          ctx.addIssue({
            code: "custom",
            input: value,
            message: `must be ${METRICS_WHAT}, not ${JSON.stringify(value)} (${err.reason})`,
          });
        }
      })
      .optional(),
    limits: limitsSchema.optional(),
    rotate: keyed(
      INTERFACE_PATTERN,
      `an interface the module needs: ${INTERFACE_RULE}`,
      everySchema,
      "an object of interfaces like { postgres-database: { every: 7d } }",
    ).optional(),
  },
  "an object like { manifest: ./notes/module.json, node: node-1 }",
);

const fleetSchema = strict(
  {
    nodes: keyed(
      NODE_NAME_PATTERN,
      `a node name: ${NODE_NAME_RULE}`,
      nodeSchema,
      "an object of nodes like { node-1: {} }",
    ),
    modules: keyed(
      MODULE_NAME_PATTERN,
      `a module name: ${MODULE_NAME_RULE}`,
      moduleSchema,
      "an object of modules like { notes: { manifest: ./notes/module.json, node: node-1 } }",
    ),
    rotate: everySchema.optional(),
  },
  "a YAML mapping with nodes: and modules:",
);

function firstLine(message: string): string {
  return (message.split("\n")[0] ?? message).replace(/ at line \d+, column \d+:?$/, "");
}

/**
 * Parses and validates a fleet file read from `file`. Manifest paths are resolved against the
 * fleet file's directory; the manifests themselves are read by `loadFleetManifests`.
 * @throws FleetError listing every problem: not YAML (with the line), a module or node or key
 * written twice (YAML's last-one-wins would hide a module), a field missing, misspelt or of the
 * wrong shape, a bad module, node or interface name.
 */
export function parseFleet(text: string, file: string): Fleet {
  const problems: Problem[] = [];
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: false, prettyErrors: false });
  const positions = SourcePositions.of(doc, counter);
  for (const err of [...doc.errors, ...doc.warnings]) {
    problems.push({
      code: "not-yaml",
      file,
      line: err.linePos?.[0].line ?? counter.linePos(err.pos[0]).line,
      field: "(file)",
      message: `is not valid YAML (${firstLine(err.message)})`,
      fix: "fix the syntax at that line",
    });
  }
  if (problems.length > 0) throw new FleetError(problems);
  if (doc.contents === null) {
    throw new FleetError([
      {
        code: "invalid",
        file,
        line: 1,
        field: "(file)",
        message: "is empty",
        fix: `describe the fleet, like:\n${EXAMPLE}`,
      },
    ]);
  }
  for (const dup of positions.duplicates) {
    const inModules = dup.path.length === 1 && dup.path[0] === "modules";
    const inNodes = dup.path.length === 1 && dup.path[0] === "nodes";
    problems.push({
      code: inModules ? "duplicate-module" : "duplicate-key",
      file,
      line: dup.lines[1],
      field: fieldPath([...dup.path, dup.key]),
      message: `is written ${dup.lines.length} times (lines ${dup.lines.join(", ")})`,
      fix: inModules
        ? "a module name is unique in a fleet: rename one (its login and data follow the name) or remove it"
        : inNodes
          ? "a node name is unique in a fleet: rename or remove one"
          : "keep one of them",
    });
  }
  let raw: unknown;
  try {
    raw = doc.toJS({ maxAliasCount: 100 });
  } catch (err) {
    throw new FleetError(
      [
        {
          code: "not-yaml",
          file,
          field: "(file)",
          message: `cannot be read as data (${(err as Error).message})`,
          fix: "remove the aliases that expand it",
        },
      ],
      { cause: err },
    );
  }
  const parsed = fleetSchema.safeParse(raw);
  if (!parsed.success) problems.push(...zodProblems(parsed.error.issues, file, positions));
  if (problems.length > 0 || !parsed.success) throw new FleetError(problems);

  const dir = dirname(file);
  const nodes = new Map<string, FleetNode>();
  for (const [name, node] of Object.entries(parsed.data.nodes)) {
    nodes.set(name, { name, address: node?.address, line: positions.lineOf(["nodes", name]) });
  }
  const modules = new Map<string, FleetModule>();
  const rawModules = ownObject(raw, "modules");
  for (const [name, m] of Object.entries(parsed.data.modules)) {
    const needs = new Map<string, FleetNeed>();
    const rawNeeds = ownObject(ownObject(rawModules, name), "needs");
    for (const [iface, need] of Object.entries(m.needs ?? {})) {
      // Values as written (not zod's copy), so that a key such as "__proto__" stays data to report.
      const values = Object.fromEntries(Object.entries(ownObject(ownObject(rawNeeds, iface), "values")));
      needs.set(iface, {
        interface: iface,
        values,
        provider: need?.provider,
        line: positions.lineOf(["modules", name, "needs", iface]),
      });
    }
    modules.set(name, {
      name,
      manifest: isAbsolute(m.manifest) ? m.manifest : join(dir, m.manifest),
      node: m.node,
      needs,
      endpoint: m.endpoint,
      ...(m.metrics === undefined ? {} : { metrics: m.metrics.trim() }),
      ...(m.limits === undefined ? {} : { limits: m.limits }),
      ...(m.rotate === undefined
        ? {}
        : {
            rotate: Object.fromEntries(
              Object.entries(m.rotate).map(([iface, r]) => [iface, parseRotationPeriod(r.every) ?? 0]),
            ),
          }),
      ...(m.env === undefined
        ? {}
        : { env: Object.fromEntries(Object.entries(m.env).map(([k, v]) => [k, String(v)])) }),
      ...(m.admin === undefined
        ? {}
        : {
            admin:
              "file" in m.admin
                ? { file: isAbsolute(m.admin.file) ? m.admin.file : join(dir, m.admin.file) }
                : { env: m.admin.env },
          }),
      line: positions.lineOf(["modules", name]),
    });
  }
  problems.push(...metricsPortClashes(modules, file, positions));
  if (problems.length > 0) throw new FleetError(problems);
  const rotateEvery =
    parsed.data.rotate === undefined ? undefined : parseRotationPeriod(parsed.data.rotate.every);
  return {
    file,
    nodes,
    modules,
    lines: positions.lines,
    ...(rotateEvery === undefined ? {} : { rotateEvery }),
  };
}

// Two modules of one node told to serve their metrics on one fixed port: the second could not start.
function metricsPortClashes(
  modules: ReadonlyMap<string, FleetModule>,
  file: string,
  positions: SourcePositions,
): Problem[] {
  const problems: Problem[] = [];
  const taken = new Map<string, string>();
  for (const m of modules.values()) {
    if (m.metrics === undefined) continue;
    const { port } = parseListenAddress(m.metrics);
    if (port === 0) continue;
    const key = `${m.node} ${port}`;
    const first = taken.get(key);
    if (first === undefined) {
      taken.set(key, m.name);
      continue;
    }
    problems.push({
      code: "invalid",
      file,
      line: positions.lineOf(["modules", m.name, "metrics"]),
      field: fieldPath(["modules", m.name, "metrics"]),
      message: `takes port ${port} on node ${m.node}, where module ${first} serves its metrics already`,
      fix: `give one of them another port, or write port 0 (or leave metrics out) for a free one`,
    });
  }
  return problems;
}

/**
 * Reads and validates the fleet file at `path`.
 * @throws FleetError when it cannot be read or does not validate.
 */
export async function loadFleet(path: string): Promise<Fleet> {
  return parseFleet(await readFleetText(path), path);
}

/**
 * The text of the fleet file at `path`, as `loadFleet` reads it.
 * @throws FleetError when it cannot be read (too large, missing).
 */
export function readFleetText(path: string): Promise<string> {
  return readBounded(path, {
    what: "a fleet file",
    maxBytes: FLEET_MAX_BYTES,
    tooLargeFix: "point at the fleet's mesh.yaml",
    unreadableFix: `check the path, or write a fleet file like:\n${EXAMPLE}`,
    fail: (problems, cause) => new FleetError(problems, cause === undefined ? undefined : { cause }),
  });
}

/** How many manifest files `loadFleetManifests` reads at once. */
const MANIFESTS_AT_ONCE = 64;

/**
 * Reads the manifest of every module of `fleet`, each file once.
 * @param readText reads a manifest's text (default `readManifestText`); a caller that keeps the
 * texts, or has read some already, gives its own
 * @returns the manifests by fleet module name.
 * @throws ManifestError listing the problems of every manifest that cannot be used.
 */
export async function loadFleetManifests(
  fleet: Fleet,
  readText: (path: string) => Promise<string> = readManifestText,
): Promise<Map<string, Manifest>> {
  const paths = [...new Set([...fleet.modules.values()].map((m) => m.manifest))];
  const loaded: (Manifest | ManifestError)[] = new Array(paths.length);
  // A few files open at a time: a fleet of 100,000 modules read all at once ran out of descriptors.
  let next = 0;
  const reader = async (): Promise<void> => {
    for (let i = next++; i < paths.length; i = next++) {
      const path = paths[i] as string;
      try {
        loaded[i] = parseManifest(await readText(path), path);
      } catch (err) {
        if (!(err instanceof ManifestError)) throw err;
        loaded[i] = err;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(MANIFESTS_AT_ONCE, paths.length) }, reader));
  const byPath = new Map(paths.map((path, i) => [path, loaded[i]]));
  const problems = loaded.flatMap((got) => (got instanceof ManifestError ? got.problems : []));
  if (problems.length > 0) throw new ManifestError(problems);
  const manifests = new Map<string, Manifest>();
  for (const m of fleet.modules.values()) {
    const got = byPath.get(m.manifest);
    if (got && !(got instanceof ManifestError)) manifests.set(m.name, got);
  }
  return manifests;
}
