#!/usr/bin/env node
// Packs one workspace (packages/cli, packages/sdk, …) into a tarball that installs with nothing
// from a registry: `npm install --offline <tarball>`. The @mesh/* packages are private and never
// published, so they travel inside the tarball, as `bundleDependencies`, and so does every package
// they need at run time, copied from this checkout's node_modules. Only built JavaScript, type
// declarations, READMEs, manifests and static files go in: no TypeScript sources, tests or maps.
//
//   node scripts/pack.mjs packages/cli [--out DIR] [--no-types]     prints the tarball's path
//
// --no-types leaves out the bundled packages' type declarations and TypeScript sources too: for a
// tool like the CLI, which nobody compiles against, it halves the files to pack and install.
//
// The workspace is staged in a temporary directory (its package.json rewritten: no `source`
// condition, no devDependencies or scripts, every bundled package listed), `npm pack` packs the
// stage, and the stage is removed. Run `npm run build` first; a workspace without dist/ is refused.
import { execFileSync } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** What of a workspace package is never shipped. */
const LEFT_OUT = new Set(["src", "test", "node_modules", "tsconfig.build.json", "tsconfig.json"]);
/** Files of a bundled package that nothing reads at run time: source maps, changelogs and docs. */
const NOT_RUN = /(\.map|\/(?!README|LICENSE|LICENCE)[^/]*\.md)$/i;
/** Type declarations and TypeScript sources, left out with --no-types. */
const TYPES = /(\.ts|\.d\.[cm]ts|\.tsbuildinfo)$|\/dist-types(\/|$)/;

/** Reads a package.json. */
function readPackage(dir) {
  return JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
}

/** Where `name` resolves from `fromDir`, as Node resolves a bare import: up the node_modules. */
function resolvePackageDir(name, fromDir) {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name);
    if (existsSync(join(candidate, "package.json"))) return realpathSync(candidate);
    if (dirname(dir) === dir) return undefined;
  }
}

/** Whether `dir` is one of this checkout's workspaces (not something under node_modules). */
function isWorkspace(dir) {
  const rel = relative(ROOT, dir);
  return !rel.startsWith("..") && !rel.split(sep).includes("node_modules");
}

/**
 * Every package `start` needs at run time, by name: its dependencies and theirs, with the
 * directory each resolves to here. Optional dependencies that are not installed are skipped.
 * @throws Error when a dependency is missing, or two versions of one name would have to sit side
 *   by side at the top of the tarball's node_modules.
 */
function runtimeClosure(start) {
  const found = new Map();
  const queue = [start];
  while (queue.length > 0) {
    const dir = queue.shift();
    const pkg = readPackage(dir);
    const optional = new Set(Object.keys(pkg.optionalDependencies ?? {}));
    const names = [...Object.keys(pkg.dependencies ?? {}), ...optional];
    for (const name of names) {
      const at = resolvePackageDir(name, dir);
      if (at === undefined) {
        if (optional.has(name)) continue;
        throw new Error(`${pkg.name} needs ${name}, which is not installed: run npm ci first`);
      }
      // A package nested in its dependant's own node_modules travels inside that copy.
      if (at.startsWith(`${dir}${sep}`)) {
        queue.push(at);
        continue;
      }
      const before = found.get(name);
      if (before === undefined) {
        found.set(name, at);
        queue.push(at);
      } else if (before !== at) {
        throw new Error(`two copies of ${name} are needed (${before} and ${at}); this packer places one`);
      }
    }
  }
  found.delete(readPackage(start).name);
  return found;
}

/** The package.json a workspace ships with: built code only, nothing for development. */
function shippedManifest(pkg, extra = {}) {
  const { devDependencies: _dev, scripts: _scripts, ...kept } = pkg;
  if (kept.exports !== undefined) kept.exports = withoutSource(kept.exports);
  return { ...kept, ...extra };
}

function withoutSource(exports) {
  if (typeof exports !== "object" || exports === null) return exports;
  return Object.fromEntries(
    Object.entries(exports)
      .filter(([key]) => key !== "source")
      .map(([key, value]) => [key, withoutSource(value)]),
  );
}

/** Copies a workspace's shipped files (dist without maps or build info, README, manifests, …). */
function copyWorkspace(from, to, manifest, types) {
  for (const entry of readdirSync(from)) {
    if (LEFT_OUT.has(entry) || entry === "package.json") continue;
    cpSync(join(from, entry), join(to, entry), {
      recursive: true,
      filter: (path) =>
        !path.endsWith(".map") && basename(path) !== ".tsbuildinfo" && (types || !TYPES.test(path)),
    });
  }
  writeFileSync(join(to, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
}

/**
 * Packs the workspace at `workspace` (a path from the top of the checkout or absolute) into `outDir`.
 * @returns the tarball's absolute path.
 */
export function packWorkspace(workspace, outDir = process.cwd(), { types = true } = {}) {
  const dir = realpathSync(resolve(ROOT, workspace));
  const pkg = readPackage(dir);
  if (!existsSync(join(dir, "dist"))) {
    throw new Error(`${pkg.name} is not built (${join(dir, "dist")} is missing): run npm run build first`);
  }
  const closure = runtimeClosure(dir);
  const stage = mkdtempSync(join(tmpdir(), "mesh-pack-"));
  try {
    const bundled = [...closure.keys()].sort();
    const dependencies = Object.fromEntries(
      bundled.map((name) => [name, readPackage(closure.get(name)).version]),
    );
    copyWorkspace(dir, stage, shippedManifest(pkg, { dependencies, bundleDependencies: bundled }), types);
    for (const [name, from] of closure) {
      const to = join(stage, "node_modules", name);
      if (isWorkspace(from)) {
        if (!existsSync(join(from, "dist"))) throw new Error(`${name} is not built: run npm run build first`);
        copyWorkspace(from, to, shippedManifest(readPackage(from)), types);
      } else {
        cpSync(from, to, {
          recursive: true,
          dereference: true,
          filter: (path) => !NOT_RUN.test(path) && (types || !TYPES.test(path)),
        });
      }
    }
    const out = resolve(outDir);
    const answer = execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", out], {
      cwd: stage,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
    });
    const [{ filename }] = JSON.parse(answer);
    return join(out, filename);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const outAt = args.indexOf("--out");
  const out = outAt === -1 ? process.cwd() : args[outAt + 1];
  const workspace = args.find((a, i) => !a.startsWith("--") && (outAt === -1 || i !== outAt + 1));
  if (workspace === undefined || out === undefined) {
    process.stderr.write(
      "usage: node scripts/pack.mjs WORKSPACE [--out DIR] [--no-types]  (e.g. packages/cli)\n",
    );
    process.exit(2);
  }
  try {
    process.stdout.write(`${packWorkspace(workspace, out, { types: !args.includes("--no-types") })}\n`);
  } catch (err) {
    process.stderr.write(`pack: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
}
