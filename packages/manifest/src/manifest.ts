import { constants } from "node:os";
import { z } from "zod";
import {
  eventNameProblem,
  INTERFACE_PATTERN,
  INTERFACE_RULE,
  MODULE_NAME_PATTERN,
  MODULE_NAME_RULE,
  SPEC_KEY_PATTERN,
  subscriptionProblem,
  TOOL_PATTERN,
} from "./names.ts";
import { describeValue, fieldPath, ownObject, ProblemsError, readBounded, type Problem } from "./problem.ts";
import { runTemplateProblem, type RunTemplatePlace } from "./run-template.ts";
import { SourcePositions } from "./source-positions.ts";
import type { SpecField, SpecType } from "./spec.ts";
import { templateKeys, templateProblem } from "./template.ts";
import { keyed, mustBe, strict, text, zodProblems } from "./zod-problems.ts";

/**
 * How a consumer reaches a provided interface, as a template: the credential file's URL is built
 * from it with the consumer's login and values (`"/{name}"`), never with the password.
 */
export interface EndpointTemplate {
  /** `postgresql`, `redis`, `mysql`, `https`. */
  readonly scheme: string;
  /** When absent: the provider node's `address` in the fleet, else 127.0.0.1. */
  readonly host?: string | undefined;
  readonly port?: number | undefined;
  /** A template, `""` or starting with `/`: `"/{name}"`. */
  readonly path: string;
  /** Query parameters, each value a template. */
  readonly query: ReadonlyMap<string, string>;
  /**
   * Named URLs on the same host and port, each a path template (`"/api/oidc"`), written into the
   * credential without the login: what a consumer needs besides its connection URL (an issuer).
   */
  readonly links: ReadonlyMap<string, string>;
}

/** One interface a module provides. */
export interface Provided {
  readonly interface: string;
  /**
   * Where the module expects its contributions file inside its own view of the filesystem. On a
   * node that runs modules without containers the agent writes `receivesPath(...)` instead and
   * hands the module that path in MESH_RECEIVES.
   */
  readonly receives: string;
  /** The values a consumer may give, by key. */
  readonly spec: ReadonlyMap<string, SpecField>;
  /** Values the mesh derives for every consumer (`prefix: "{login}:"`); a consumer cannot set them. */
  readonly derives: ReadonlyMap<string, string>;
  readonly endpoint?: EndpointTemplate | undefined;
  readonly description?: string | undefined;
  /**
   * The backend holds one password per login, so each rotation moves the consumer to its other
   * login (`secondLogin`) and back: its credential file names the login and password file in use.
   */
  readonly alternatesLogins?: boolean | undefined;
}

/** One interface a module needs, with the values it asks for (the fleet file may add to them). */
export interface Need {
  readonly interface: string;
  readonly values: Readonly<Record<string, unknown>>;
}

/**
 * How the agent starts a module: a program and its arguments, run with the manifest's directory as
 * the working directory, so relative paths in `args` (and a `command` like `./bin/app`) are read
 * from there. `command` without a `/` is looked up on the agent's PATH (`"node"`).
 */
export interface RunCommand {
  readonly command: string;
  /** Each may be a template (see run-template.ts) that hands over no password. */
  readonly args: readonly string[];
  /** Variables set for the program, each value a template: `{ "DATABASE_URL": "{postgres-database.url}" }`. */
  readonly env: ReadonlyMap<string, string>;
  /**
   * Files rendered from templates before each start, 0600 and owned by the module's user, at
   * `renderedFilePath(stateDir, module, name)`; `{files.<name>}` names that path.
   */
  readonly files: ReadonlyMap<string, string>;
  /** What a new password needs once its provider has applied it; `restart` when not said. */
  readonly onNewPassword: OnNewPassword;
}

/**
 * What the agent does with a running app once its provider has applied a new password: start it
 * again (a value in `env` always needs this), send it a signal (it reads its files again), or nothing.
 */
export type OnNewPassword =
  | { readonly kind: "restart" }
  | { readonly kind: "signal"; readonly signal: string }
  | { readonly kind: "none" };

/**
 * A module's manifest (`module.json`): what it provides, what it needs, the events it emits and
 * subscribes to, the seats it holds and the tools it offers. Maps, not plain objects, so that a
 * key like `constructor` is only ever data.
 */
export interface Manifest {
  /** The file it was read from, as given. */
  readonly file: string;
  readonly name: string;
  readonly description?: string | undefined;
  readonly provides: ReadonlyMap<string, Provided>;
  readonly needs: ReadonlyMap<string, Need>;
  /** Local event names (`bucket.created`); the mesh places them under the module's namespace. */
  readonly emits: readonly string[];
  /** `**`, `<module or seat>.<event>` or `<module or seat>.**`. */
  readonly subscribes: readonly string[];
  readonly seats: readonly string[];
  readonly tools: readonly string[];
  /** How to start the module; undefined for a module some other way starts (or nothing runs). */
  readonly run?: RunCommand | undefined;
  /**
   * Whether the module, when it provides an interface, is handed an admin URL (`admin:` in the fleet
   * file): true unless the manifest says `"adminUrl": false` (a provider whose backend needs no admin).
   */
  readonly takesAdminUrl: boolean;
  /** Line of every field by dotted path, so a later check can point into this file. */
  readonly lines: ReadonlyMap<string, number>;
}

/**
 * A manifest that cannot be used: it names the file, and for each problem the line, the field and
 * the fix. `problems` holds them all (a file is reported whole, not one mistake per attempt).
 */
export class ManifestError extends ProblemsError {
  override name = "ManifestError";
}

/** The largest manifest read: a manifest is a page of JSON, and a huge one is a mistake. */
export const MANIFEST_MAX_BYTES = 1024 * 1024;

const specFieldSchema = strict(
  {
    type: z.enum(["string", "number", "boolean", "string[]", "array"], {
      error: mustBe('one of "string", "number", "boolean", "string[]"'),
    }),
    required: z.boolean({ error: mustBe("true or false") }).optional(),
    optional: z.boolean({ error: mustBe("true or false") }).optional(),
    pattern: text("a regular expression").optional(),
    enum: z
      .array(z.union([z.string(), z.number()]), { error: mustBe("a list of allowed values") })
      .optional(),
    items: strict(
      {
        type: z.literal("string", { error: mustBe('"string" (lists hold strings)') }).optional(),
        pattern: text("a regular expression").optional(),
        enum: z.array(z.string(), { error: mustBe("a list of allowed strings") }).optional(),
      },
      "an object describing each item",
    ).optional(),
    default: z.unknown().optional(),
    unique: z.boolean({ error: mustBe("true or false") }).optional(),
    description: text("a sentence").optional(),
  },
  'an object like { "type": "string", "required": true }',
);

const endpointSchema = strict(
  {
    scheme: text('a URL scheme like "postgresql"', /^[a-z][a-z0-9+.-]*$/),
    host: text('a host name like "db.example.net"', /^[A-Za-z0-9.:[\]-]+$/).optional(),
    port: z
      .number({ error: mustBe("a port number") })
      .int()
      .min(1)
      .max(65535)
      .optional(),
    path: text('a path template like "/{name}"', /^(\/.*)?$/).optional(),
    query: keyed(
      /^[A-Za-z0-9_.-]+$/,
      "a query parameter name",
      text("a template"),
      "an object of query parameters",
    ).optional(),
    links: keyed(
      /^[A-Za-z][A-Za-z0-9_]*$/,
      'a link name like "issuer"',
      text('a path template like "/api/oidc"', /^\/.*$/),
      "an object of named paths",
    ).optional(),
  },
  'an object like { "scheme": "postgresql", "port": 5432, "path": "/{name}" }',
);

const providedSchema = strict(
  {
    receives: text('an absolute file path like "/run/mesh/postgres-database.json"', /^\/./),
    spec: keyed(
      SPEC_KEY_PATTERN,
      'a value name like "name"',
      specFieldSchema,
      "an object of value names",
    ).optional(),
    derives: keyed(
      SPEC_KEY_PATTERN,
      'a value name like "prefix"',
      text('a template like "{login}:"'),
      "an object",
    ).optional(),
    endpoint: endpointSchema.optional(),
    description: text("a sentence").optional(),
    alternatesLogins: z.boolean({ error: mustBe("true or false") }).optional(),
  },
  'an object like { "receives": "/run/mesh/postgres-database.json", "spec": {} }',
);

const needSchema = strict(
  {
    values: z
      .record(z.string(), z.unknown(), { error: mustBe('an object of values like { "name": "app" }') })
      .optional(),
    description: text("a sentence").optional(),
  },
  'an object like { "values": { "name": "app" } }',
);

/** A list of distinct strings, each checked by `problem` (which says why one is not valid). */
function listOf(item: z.ZodString, what: string, problem?: (item: string) => string | undefined) {
  const checked = problem
    ? item.superRefine((value, ctx) => {
        const why = problem(value);
        if (why !== undefined) ctx.addIssue({ code: "custom", message: why, input: value });
      })
    : item;
  return z
    .array(checked, { error: mustBe(what) })
    .superRefine((items, ctx) => {
      const seen = new Set<string>();
      items.forEach((value, i) => {
        if (seen.has(value)) {
          ctx.addIssue({
            code: "custom",
            path: [i],
            message: `lists ${JSON.stringify(value)} a second time`,
            input: value,
          });
        }
        seen.add(value);
      });
    })
    .optional();
}

// A NUL byte cannot be passed to a process at all, and a line break in a command is a pasting
// mistake more often than a name: both are refused here rather than failing at start on some node.
const RUN_COMMAND_PATTERN = /^[^\s\0][^\0\n\r]*$/;
const RUN_ARG_PATTERN = /^[^\0]*$/;
const RUN_MAX_ARGS = 256;

const runSchema = strict(
  {
    command: text('a program to start, like "node" or "./bin/app"', RUN_COMMAND_PATTERN),
    args: z
      .array(text("an argument (a string without NUL bytes)", RUN_ARG_PATTERN), {
        error: mustBe('a list of arguments like ["dist/main.js"]'),
      })
      .max(RUN_MAX_ARGS, { error: `must list at most ${RUN_MAX_ARGS} arguments` })
      .optional(),
    env: keyed(
      /^[A-Za-z_][A-Za-z0-9_]*$/,
      'a variable name like "DATABASE_URL"',
      text("a template (a string without NUL bytes)", RUN_ARG_PATTERN),
      'an object of variables like { "DATABASE_URL": "{postgres-database.url}" }',
    ).optional(),
    files: keyed(
      /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/,
      'a file name like "pgpass" (letters, digits, "_", "." and "-", not starting with ".")',
      text("a template (a string without NUL bytes)", RUN_ARG_PATTERN),
      'an object of files like { "pgpass": "{postgres-database.host}:..." }',
    ).optional(),
    onNewPassword: z
      .union(
        [
          z.enum(["restart", "none"]),
          strict({ signal: text('a signal name like "SIGHUP"', /^SIG[A-Z0-9]+$/) }, '{ "signal": "SIGHUP" }'),
        ],
        { error: mustBe('"restart", "none" or { "signal": "SIGHUP" }') },
      )
      .optional(),
  },
  'an object like { "command": "node", "args": ["dist/main.js"] }',
);

const eventName = (e: string): string | undefined => {
  const why = eventNameProblem(e);
  return why === undefined ? undefined : `must be a local event name like "bucket.created": ${why}`;
};
const subscription = (s: string): string | undefined => {
  const why = subscriptionProblem(s);
  return why === undefined ? undefined : `must be "**", "<module>.<event>" or "<module>.**": ${why}`;
};

const manifestSchema = strict(
  {
    name: text(`a module name: ${MODULE_NAME_RULE}`, MODULE_NAME_PATTERN),
    description: text("a sentence").optional(),
    provides: keyed(
      INTERFACE_PATTERN,
      `an interface name: ${INTERFACE_RULE}`,
      providedSchema,
      "an object of interfaces",
    ).optional(),
    needs: keyed(
      INTERFACE_PATTERN,
      `an interface name: ${INTERFACE_RULE}`,
      needSchema,
      "an object of interfaces",
    ).optional(),
    emits: listOf(text('a local event name like "bucket.created"'), "a list of local event names", eventName),
    subscribes: listOf(
      text('an event pattern like "photos.uploaded" or "**"'),
      "a list of event patterns",
      subscription,
    ),
    seats: listOf(text(`a seat name: ${MODULE_NAME_RULE}`, MODULE_NAME_PATTERN), "a list of seat names"),
    tools: listOf(text('a tool like "status" or "retire list"', TOOL_PATTERN), "a list of tools"),
    run: runSchema.optional(),
    adminUrl: z
      .literal(false, {
        error: mustBe("false (this provider takes no admin URL), or left out"),
      })
      .optional(),
  },
  'a JSON object like { "name": "notes", "needs": {} }',
);

type RawManifest = z.infer<typeof manifestSchema>;
type RawSpecField = z.infer<typeof specFieldSchema>;

/** Collects problems against one file, with lines from its positions. */
class Report {
  readonly problems: Problem[] = [];
  constructor(
    readonly file: string,
    readonly positions: SourcePositions,
  ) {}
  add(
    path: readonly (string | number)[],
    message: string,
    fix: string,
    code: Problem["code"] = "invalid",
  ): void {
    this.problems.push({
      code,
      file: this.file,
      line: this.positions.lineOf(path),
      field: fieldPath(path),
      message,
      fix,
    });
  }
}

function compileRegex(source: string, report: Report, path: (string | number)[]): RegExp | undefined {
  try {
    return new RegExp(source, "u");
  } catch (err) {
    report.add(path, `is not a regular expression (${(err as Error).message})`, "fix the expression");
    return undefined;
  }
}

function normalizeSpecField(
  raw: RawSpecField,
  report: Report,
  path: (string | number)[],
): SpecField | undefined {
  const before = report.problems.length;
  const type: SpecType = raw.type === "array" ? "string[]" : raw.type;
  if (raw.required === true && raw.optional === true) {
    report.add([...path, "optional"], "contradicts required: true", "keep one of them");
  }
  const isList = type === "string[]";
  if (raw.items && !isList)
    report.add([...path, "items"], `only fits a list, and this value is a ${type}`, "remove it");
  if (raw.pattern !== undefined && type !== "string" && !isList) {
    report.add([...path, "pattern"], `only fits a string, and this value is a ${type}`, "remove it");
  }
  if (raw.enum !== undefined && type === "boolean") {
    report.add([...path, "enum"], "does not fit a boolean", "remove it");
  }
  if (raw.items && (raw.pattern !== undefined || raw.enum !== undefined)) {
    report.add(
      [...path, "items"],
      "repeats what pattern or enum already say for each item",
      "keep one of them",
    );
  }
  const patternSource = raw.items?.pattern ?? raw.pattern;
  const patternPath = raw.items?.pattern !== undefined ? [...path, "items", "pattern"] : [...path, "pattern"];
  const pattern = patternSource === undefined ? undefined : compileRegex(patternSource, report, patternPath);
  const allowed = raw.items?.enum ?? raw.enum;
  if (allowed && (type === "string" || isList) && allowed.some((v) => typeof v !== "string")) {
    report.add([...path, "enum"], "must list strings only, for a value of strings", "quote the numbers");
  }
  if (allowed && type === "number" && allowed.some((v) => typeof v !== "number")) {
    report.add([...path, "enum"], "must list numbers only, for a number", "remove the strings");
  }
  const def = raw.default;
  if (def !== undefined) {
    const fits =
      (type === "string" && typeof def === "string") ||
      (type === "number" && typeof def === "number" && Number.isFinite(def)) ||
      (type === "boolean" && typeof def === "boolean") ||
      (isList && Array.isArray(def) && def.every((d) => typeof d === "string"));
    if (!fits) {
      report.add(
        [...path, "default"],
        `must be a ${type === "string[]" ? "list of strings" : type}, not ${describeValue(def)}`,
        "fix the value",
      );
    } else if (typeof def === "string") {
      const why = templateProblem(def, ["login"]);
      if (why !== undefined)
        report.add([...path, "default"], why, 'write a plain value, or "{login}" for the consumer\'s login');
    }
    if (raw.required === true)
      report.add(
        [...path, "default"],
        "never applies to a required value",
        "remove it, or make the value optional",
      );
  }
  if (report.problems.length > before) return undefined;
  return {
    type,
    required: raw.required === true,
    pattern,
    enum: allowed,
    default: def as SpecField["default"],
    unique: raw.unique === true,
    description: raw.description,
  };
}

function normalize(
  raw: RawManifest,
  doc: unknown,
  file: string,
  report: Report,
  positions: SourcePositions,
): Manifest {
  const provides = new Map<string, Provided>();
  for (const [iface, p] of Object.entries(raw.provides ?? {})) {
    const base: (string | number)[] = ["provides", iface];
    const spec = new Map<string, SpecField>();
    for (const [key, field] of Object.entries(p.spec ?? {})) {
      const normalized = normalizeSpecField(field, report, [...base, "spec", key]);
      if (normalized) spec.set(key, normalized);
    }
    const derives = new Map<string, string>();
    for (const [key, template] of Object.entries(p.derives ?? {})) {
      if (Object.hasOwn(p.spec ?? {}, key)) {
        report.add(
          [...base, "derives", key],
          "is also a value in spec: a consumer could set it, so the mesh cannot derive it",
          "rename one of them",
        );
        continue;
      }
      const why = templateProblem(template, ["login", ...Object.keys(p.spec ?? {})]);
      if (why !== undefined) report.add([...base, "derives", key], why, "fix the template");
      derives.set(key, template);
    }
    let endpoint: EndpointTemplate | undefined;
    if (p.endpoint) {
      const allowed = ["login", ...Object.keys(p.spec ?? {}), ...Object.keys(p.derives ?? {})];
      const path = p.endpoint.path ?? "";
      const check = (template: string, at: (string | number)[]): void => {
        const why = templateProblem(template, allowed);
        if (why !== undefined) report.add(at, why, "fix the template");
        for (const key of templateKeys(template)) {
          const field = (p.spec ?? {})[key];
          if (
            Object.hasOwn(p.spec ?? {}, key) &&
            field?.type !== undefined &&
            field.type !== "string" &&
            field.type !== "number"
          ) {
            report.add(
              at,
              `names {${key}}, which is a ${field.type} and cannot be written into a URL`,
              "name a string or number value",
            );
          }
        }
      };
      check(path, [...base, "endpoint", "path"]);
      const query = new Map<string, string>();
      for (const [name, template] of Object.entries(p.endpoint.query ?? {})) {
        check(template, [...base, "endpoint", "query", name]);
        query.set(name, template);
      }
      const links = new Map<string, string>();
      for (const [name, template] of Object.entries(p.endpoint.links ?? {})) {
        check(template, [...base, "endpoint", "links", name]);
        links.set(name, template);
      }
      endpoint = {
        scheme: p.endpoint.scheme,
        host: p.endpoint.host,
        port: p.endpoint.port,
        path,
        query,
        links,
      };
    }
    provides.set(iface, {
      interface: iface,
      receives: p.receives,
      spec,
      derives,
      endpoint,
      description: p.description,
      ...(p.alternatesLogins === true ? { alternatesLogins: true } : {}),
    });
  }
  const receivers = new Map<string, string>();
  for (const p of provides.values()) {
    const other = receivers.get(p.receives);
    if (other !== undefined) {
      report.add(
        ["provides", p.interface, "receives"],
        `is the same file as provides.${other}.receives`,
        "give each provided interface its own file",
      );
    }
    receivers.set(p.receives, p.interface);
  }

  const needs = new Map<string, Need>();
  for (const iface of Object.keys(raw.needs ?? {})) {
    // Values are the consumer's own data: taken from the document as written, because a parsed
    // copy may drop a key such as "__proto__" that must instead be reported as unknown.
    const values = ownObject(ownObject(ownObject(doc, "needs"), iface), "values");
    needs.set(iface, { interface: iface, values: Object.fromEntries(Object.entries(values)) });
  }

  return {
    file,
    name: raw.name,
    description: raw.description,
    provides,
    needs,
    emits: raw.emits ?? [],
    subscribes: raw.subscribes ?? [],
    seats: raw.seats ?? [],
    tools: raw.tools ?? [],
    run: raw.run ? normalizeRun(raw.run, Object.keys(raw.needs ?? {}), report) : undefined,
    takesAdminUrl: raw.adminUrl !== false,
    lines: positions.lines,
  };
}

function normalizeRun(raw: NonNullable<RawManifest["run"]>, needs: string[], report: Report): RunCommand {
  const files = Object.keys(raw.files ?? {});
  const scope = { needs, files };
  const check = (template: string, place: RunTemplatePlace, path: (string | number)[]): void => {
    const why = runTemplateProblem(template, place, scope);
    if (why === undefined) return;
    const fix =
      place === "args" && why.includes("in args")
        ? 'move it to "env" or to a rendered file in "files" (0600, the module\'s own)'
        : "name a need of this module and one of its fields, {module.dir}, {module.metrics}, {mesh.targets} or {files.<name>}";
    report.add(path, why, fix);
  };
  (raw.args ?? []).forEach((arg, i) => check(arg, "args", ["run", "args", i]));
  for (const [name, template] of Object.entries(raw.env ?? {})) {
    if (name.startsWith("MESH_") || name === "HOME")
      report.add(["run", "env", name], "is set by the mesh for every module", "choose another name");
    check(template, "env", ["run", "env", name]);
  }
  for (const [name, template] of Object.entries(raw.files ?? {}))
    check(template, "files", ["run", "files", name]);
  const said = raw.onNewPassword;
  let onNewPassword: OnNewPassword = { kind: "restart" };
  if (said === "none") onNewPassword = { kind: "none" };
  else if (typeof said === "object") {
    if (!Object.hasOwn(constants.signals, said.signal))
      report.add(
        ["run", "onNewPassword", "signal"],
        `is not a signal (${said.signal})`,
        'name one like "SIGHUP"',
      );
    onNewPassword = { kind: "signal", signal: said.signal };
  }
  return {
    command: raw.command,
    args: raw.args ?? [],
    env: new Map(Object.entries(raw.env ?? {})),
    files: new Map(Object.entries(raw.files ?? {})),
    onNewPassword,
  };
}

function jsonErrorLine(text: string, err: Error): number | undefined {
  const at = /position (\d+)/.exec(err.message);
  if (at?.[1] !== undefined) return SourcePositions.lineOfOffset(text, Number(at[1]));
  const lineCol = /line (\d+)/.exec(err.message);
  if (lineCol?.[1] !== undefined) return Number(lineCol[1]);
  if (/end of JSON input/.test(err.message)) return SourcePositions.lineOfOffset(text, text.length);
  return undefined;
}

/**
 * Parses and validates a manifest read from `file` (named in every problem).
 * @throws ManifestError listing every problem: not JSON (with the line), a key written twice, a
 * field missing, misspelt or of the wrong shape, a bad module, interface, event or seat name.
 */
export function parseManifest(text: string, file: string): Manifest {
  const source = text.startsWith("\uFEFF") ? text.slice(1) : text;
  const positions = SourcePositions.parse(source);
  const report = new Report(file, positions);
  if (source.trim() === "") {
    report.add([], "is empty", 'write a manifest: { "name": "<module>", "needs": {} }', "not-json");
    throw new ManifestError(report.problems);
  }
  let doc: unknown;
  try {
    doc = JSON.parse(source);
  } catch (err) {
    report.problems.push({
      code: "not-json",
      file,
      line: jsonErrorLine(source, err as Error),
      field: "(file)",
      message: `is not JSON (${(err as Error).message})`,
      fix: "fix the syntax at that line (a manifest is one JSON object)",
    });
    throw new ManifestError(report.problems, { cause: err });
  }
  // JSON.parse keeps the last of two equal keys; a manifest that says two things about one field
  // says neither reliably.
  for (const dup of positions.duplicates) {
    report.problems.push({
      code: "duplicate-key",
      file,
      line: dup.lines[1],
      field: fieldPath([...dup.path, dup.key]),
      message: `is written ${dup.lines.length} times (lines ${dup.lines.join(", ")})`,
      fix: "keep one of them",
    });
  }
  const parsed = manifestSchema.safeParse(doc);
  if (!parsed.success) {
    report.problems.push(...zodProblems(parsed.error.issues, file, positions));
    throw new ManifestError(report.problems, { cause: parsed.error });
  }
  const manifest = normalize(parsed.data, doc, file, report, positions);
  if (report.problems.length > 0) throw new ManifestError(report.problems);
  return manifest;
}

/**
 * The text of the manifest at `path`, as `loadManifest` reads it.
 * @throws ManifestError when the file cannot be read (too large, missing).
 */
export function readManifestText(path: string): Promise<string> {
  return readBounded(path, {
    what: "a manifest",
    maxBytes: MANIFEST_MAX_BYTES,
    tooLargeFix: "point at the module's module.json",
    unreadableFix: "check the path (a fleet file's manifest paths are relative to the fleet file)",
    fail: (problems, cause) => new ManifestError(problems, cause === undefined ? undefined : { cause }),
  });
}

/**
 * Reads and validates the manifest at `path`.
 * @throws ManifestError when the file cannot be read (too large, missing) or does not validate.
 */
export async function loadManifest(path: string): Promise<Manifest> {
  return parseManifest(await readManifestText(path), path);
}
