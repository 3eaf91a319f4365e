// `mesh check`: reads a set of modules — their manifests and their code — and finds where what a
// module says it emits or hears disagrees with what its code does, or with the rest of the set.
// The bus refuses an undeclared publish only at run time, and a subscription nothing feeds never
// fails at all; this says both before anything runs, with the file, the line and the fix.
import { readdir, readFile, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import type * as TS from "typescript";
import { loadManifest, ManifestError, type Manifest } from "./manifest.ts";
import { eventNameProblem } from "./names.ts";
import { STANDINGS_EVENTS } from "./events.ts";

/** What a finding is about, stable for scripts. */
export type FindingKind =
  | "manifest"
  | "undeclared-emit"
  | "unheard-subscription"
  | "foreign-event"
  | "routing-key-name"
  | "subject-mismatch"
  /** The fleet does not hold together (`checkFleet`): two consumers asking for one database, say. */
  | "fleet";

/** One thing `checkModules` found: where, what, and what to do about it. */
export interface Finding {
  readonly kind: FindingKind;
  /** An error is a mistake the bus will act on (a refused publish, a dead subscription). */
  readonly severity: "error" | "warning";
  readonly file: string;
  /** 1-based. */
  readonly line: number;
  readonly message: string;
  readonly fix: string;
}

/**
 * One module to check: its directory, and optionally its manifest's path (default
 * `<dir>/module.json`) and its name in the fleet (default the manifest's `name`), since the fleet
 * name is what the mesh derives subjects from.
 */
export interface CheckTarget {
  readonly dir: string;
  readonly manifest?: string | undefined;
  readonly name?: string | undefined;
}

const CODE_FILE = /\.(ts|mts|cts|js|mjs|cjs)$/;
// Code files larger than this are generated or bundled, not a module's own source.
const CODE_MAX_BYTES = 2 * 1024 * 1024;
const ROUTING_KEY = /^module\.([a-z][a-z0-9-]*)\.(.+)$/;

/** One `emit("…")` or `on("…")` with a string literal, as written in a module's code. */
interface CodeUse {
  readonly call: "emit" | "on";
  readonly name: string;
  readonly file: string;
  readonly line: number;
}

interface Loaded {
  readonly name: string;
  readonly manifest: Manifest;
  readonly uses: readonly CodeUse[];
}

/** `file:line: error: message; fix: fix`. */
export function formatFinding(f: Finding): string {
  return `${f.file}:${f.line}: ${f.severity}: ${f.message}; fix: ${f.fix}`;
}

/**
 * Checks the modules in `dirs` (each a module directory, a path to a `module.json`, or a
 * `CheckTarget`) against each other: manifests against their own code (every `*.ts`/`*.js` file
 * under the directory, skipping `node_modules` and nested modules) and subscriptions against what
 * the set emits. A manifest that cannot be read is itself reported, not thrown.
 * @returns the findings, sorted by file and line.
 * @throws only when a code file exists but cannot be read (permissions, I/O).
 */
export async function checkModules(dirs: readonly (string | CheckTarget)[]): Promise<Finding[]> {
  const findings: Finding[] = [];
  const modules: Loaded[] = [];
  for (const entry of dirs) {
    const target = typeof entry === "string" ? targetOf(entry) : entry;
    const manifestPath = target.manifest ?? join(target.dir, "module.json");
    let manifest: Manifest;
    try {
      manifest = await loadManifest(manifestPath);
    } catch (err) {
      if (!(err instanceof ManifestError)) throw err;
      for (const p of err.problems) {
        findings.push({
          kind: "manifest",
          severity: "error",
          file: p.file,
          line: p.line ?? 1,
          message: `${p.field === "(file)" ? "" : `${p.field} `}${p.message}`,
          fix: p.fix,
        });
      }
      continue;
    }
    const uses: CodeUse[] = [];
    for (const file of await codeFiles(target.dir, true)) uses.push(...(await scanCode(file)));
    modules.push({ name: target.name ?? manifest.name, manifest, uses });
  }
  const names = new Set(modules.map((m) => m.name));
  for (const m of modules) findings.push(...checkOne(m, names, modules));
  return findings.sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line);
}

function targetOf(path: string): CheckTarget {
  return path.endsWith(".json") ? { dir: dirname(path), manifest: path } : { dir: path };
}

/** Code files under `dir`, not following links, skipping `node_modules`, dot-dirs and nested modules. */
async function codeFiles(dir: string, top: boolean): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  if (!top && entries.some((e) => e.isFile() && e.name === "module.json")) return [];
  const out: string[] = [];
  for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, e.name);
    if (e.isDirectory()) {
      if (e.name === "node_modules" || e.name.startsWith(".")) continue;
      out.push(...(await codeFiles(path, false)));
    } else if (e.isFile() && CODE_FILE.test(e.name) && !e.name.endsWith(".d.ts")) {
      if ((await stat(path)).size <= CODE_MAX_BYTES) out.push(path);
    }
  }
  return out;
}

/**
 * Every `emit("…")` and `on("…")` whose first argument is a string literal. A bare call is always
 * taken; a method call (`bus.on("…")`) only when the name holds a dot, because every mesh event and
 * subscription does and the events of Node's own emitters (`"error"`, `"SIGTERM"`) do not.
 */
async function scanCode(file: string): Promise<CodeUse[]> {
  const ts = await typescript();
  const text = await readFile(file, "utf8");
  const kind = /\.[cm]?js$/.test(file) ? ts.ScriptKind.JS : ts.ScriptKind.TS;
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const uses: CodeUse[] = [];
  const visit = (node: TS.Node): void => {
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const bare = ts.isIdentifier(callee);
      const called = bare ? callee.text : ts.isPropertyAccessExpression(callee) ? callee.name.text : "";
      const arg = node.arguments[0];
      if (
        (called === "emit" || called === "on") &&
        arg !== undefined &&
        (ts.isStringLiteral(arg) || ts.isNoSubstitutionTemplateLiteral(arg)) &&
        (bare || arg.text.includes("."))
      ) {
        const line = source.getLineAndCharacterOfPosition(arg.getStart(source)).line + 1;
        uses.push({ call: called, name: arg.text, file, line });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return uses;
}

/**
 * The TypeScript compiler, which reads the code (only parsing it). It is loaded when code is first
 * read, from whoever runs the check: @mesh/cli depends on it, and a module that only uses
 * @mesh/sdk never pays for it.
 * @throws Error saying what to install when it is not there.
 */
async function typescript(): Promise<typeof TS.default> {
  try {
    return (await import("typescript")).default;
  } catch (err) {
    if ((err as { code?: unknown }).code !== "ERR_MODULE_NOT_FOUND") throw err;
    throw new Error(
      "reading a module's code needs the typescript package, which is not installed where @mesh/manifest runs: " +
        "install @mesh/cli (which brings it), or add typescript beside it",
      { cause: err },
    );
  }
}

/** A spelling with case, `_`/`-` and surrounding space folded, so near-misses compare equal. */
function folded(name: string): string {
  return name.trim().toLowerCase().replace(/_/g, "-");
}

/** The declared name `name` is most likely a misspelling of, if any. */
function closest(name: string, declared: readonly string[]): string | undefined {
  const f = folded(name);
  const same = declared.find((d) => folded(d) === f);
  if (same !== undefined) return same;
  // A typo is a letter or two; on short names that much is a different word, not a misspelling.
  let best: string | undefined;
  let bestDistance = Math.min(3, Math.ceil(f.length / 4));
  for (const d of declared) {
    const distance = editDistance(f, folded(d));
    if (distance < bestDistance) [best, bestDistance] = [d, distance];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      next.push(Math.min((row[j] ?? 0) + 1, (next[j - 1] ?? 0) + 1, (row[j - 1] ?? 0) + cost));
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

/** Whether the subscription `pattern` covers the subscription or subject `name`. */
function covers(pattern: string, name: string): boolean {
  if (pattern === "**" || pattern === name) return true;
  return pattern.endsWith(".**") && name.startsWith(pattern.slice(0, -2));
}

function checkOne(m: Loaded, names: ReadonlySet<string>, all: readonly Loaded[]): Finding[] {
  const out: Finding[] = [];
  const { manifest } = m;
  const file = manifest.file;
  const lineOf = (field: string, i: number): number =>
    manifest.lines.get(`${field}[${i}]`) ?? manifest.lines.get(field) ?? 1;
  const emitsLine = manifest.lines.get("emits") ?? 1;
  const subscribesLine = manifest.lines.get("subscribes") ?? 1;

  manifest.emits.forEach((event, i) => {
    const old = ROUTING_KEY.exec(event);
    if (old) {
      out.push({
        kind: "routing-key-name",
        severity: "error",
        file,
        line: lineOf("emits", i),
        message: `emits ${JSON.stringify(event)}, an old bus routing key rather than a local name: the mesh would place it under a module called "module"`,
        fix: `declare it locally as ${JSON.stringify(old[2])} (the mesh places it under ${JSON.stringify(m.name)}), and emit that name in code`,
      });
      return;
    }
    const dot = event.indexOf(".");
    const head = dot < 0 ? "" : event.slice(0, dot);
    if (head !== "" && head !== m.name && names.has(head) && !manifest.seats.includes(head)) {
      out.push({
        kind: "foreign-event",
        severity: "error",
        file,
        line: lineOf("emits", i),
        message: `emits ${JSON.stringify(event)}, named after the module ${JSON.stringify(head)}: a module publishes only under its own name`,
        fix: `name it as ${JSON.stringify(m.name)}'s own event (like ${JSON.stringify(event.slice(dot + 1))}), or, if it is about a role, put it on a seat ${JSON.stringify(m.name)} holds`,
      });
    }
  });

  manifest.subscribes.forEach((pattern, i) => {
    if (pattern === "**") return;
    const line = lineOf("subscribes", i);
    const old = ROUTING_KEY.exec(pattern);
    if (old) {
      out.push({
        kind: "routing-key-name",
        severity: "error",
        file,
        line,
        message: `subscribes to ${JSON.stringify(pattern)}, an old bus routing key: it would match events of a module called "module", which none emits`,
        fix: `subscribe to ${JSON.stringify(`${old[1]}.${old[2]}`)} (the emitting module's name, then its local event name)`,
      });
      return;
    }
    const dot = pattern.indexOf(".");
    const source = pattern.slice(0, dot);
    const event = pattern.slice(dot + 1);
    const matches = (name: string): boolean => covers(`x.${event}`, `x.${name}`);
    const emitter = all.find((o) => o.name === source);
    const fedByModule =
      emitter !== undefined &&
      (emitter.manifest.emits.some(matches) ||
        (emitter.manifest.provides.size > 0 && STANDINGS_EVENTS.some(matches)));
    const holders = all.filter((o) => o.manifest.seats.includes(source));
    // A seat's holder may say each event it declares in the seat's name as well as its own.
    const fedBySeat = holders.some((h) => h.manifest.emits.some(matches));
    if (fedByModule || fedBySeat) return;
    if (emitter === undefined && holders.length === 0) {
      out.push({
        kind: "unheard-subscription",
        severity: "warning",
        file,
        line,
        message: `subscribes to ${JSON.stringify(pattern)}, but no module or seat in the checked set is called ${JSON.stringify(source)}`,
        fix: `check it together with the module that emits it, or correct the name before the first "."`,
      });
      return;
    }
    const declared =
      emitter !== undefined
        ? emitter.manifest.emits.map((e) => `${source}.${e}`)
        : holders.flatMap((h) => h.manifest.emits.map((e) => `${source}.${e}`));
    const near = closest(pattern, declared);
    out.push({
      kind: "unheard-subscription",
      severity: "error",
      file,
      line,
      message: `subscribes to ${JSON.stringify(pattern)}, which nothing emits: ${emitter !== undefined ? `the module ${JSON.stringify(source)} does not declare ${JSON.stringify(event)}` : `no holder of the seat ${JSON.stringify(source)} declares it`}, so this can never be triggered`,
      fix:
        near !== undefined
          ? `subscribe to ${JSON.stringify(near)}, which ${JSON.stringify(source)} does emit`
          : `have ${JSON.stringify(source)} declare and emit ${JSON.stringify(event)}, or remove the subscription`,
    });
  });

  for (const use of m.uses) {
    const old = ROUTING_KEY.exec(use.name);
    if (old) {
      const local = use.call === "emit" ? old[2] : `${old[1]}.${old[2]}`;
      out.push({
        kind: "routing-key-name",
        severity: "error",
        file: use.file,
        line: use.line,
        message: `${use.call}(${JSON.stringify(use.name)}) spells an old bus routing key; the subject is built from what ${use.call}() is handed, so it lands under a module called "module"`,
        fix: `call ${use.call}(${JSON.stringify(local)})${use.call === "emit" ? ` and declare ${JSON.stringify(local)} in ${file}'s emits` : ""}`,
      });
      continue;
    }
    if (use.call === "emit") {
      if (manifest.emits.includes(use.name)) continue;
      const near = closest(use.name, manifest.emits);
      if (near !== undefined) {
        out.push({
          kind: "subject-mismatch",
          severity: "error",
          file: use.file,
          line: use.line,
          message: `emits ${JSON.stringify(use.name)}, which differs from ${JSON.stringify(near)} declared in ${file}: the bus refuses the publish`,
          fix:
            eventNameProblem(use.name) === undefined
              ? `call emit(${JSON.stringify(near)}), or declare ${JSON.stringify(use.name)} in emits (${file}:${emitsLine})`
              : `call emit(${JSON.stringify(near)})`,
        });
      } else {
        out.push({
          kind: "undeclared-emit",
          severity: "error",
          file: use.file,
          line: use.line,
          message: `emits ${JSON.stringify(use.name)}, which ${file} does not declare: the bus refuses the publish`,
          fix: `add ${JSON.stringify(use.name)} to emits in ${file}:${emitsLine}`,
        });
      }
      continue;
    }
    if (manifest.subscribes.some((p) => covers(p, use.name))) continue;
    const near = closest(use.name, manifest.subscribes);
    out.push({
      kind: "subject-mismatch",
      severity: "error",
      file: use.file,
      line: use.line,
      message: `subscribes in code to ${JSON.stringify(use.name)}, which the subscribes of ${file} do not list: the bus refuses the subscription`,
      fix:
        near !== undefined
          ? `call on(${JSON.stringify(near)}) as declared, or add ${JSON.stringify(use.name)} to subscribes (${file}:${subscribesLine})`
          : `add ${JSON.stringify(use.name)} to subscribes in ${file}:${subscribesLine}`,
    });
  }
  return out;
}
