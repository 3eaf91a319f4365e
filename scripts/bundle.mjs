#!/usr/bin/env node
// The second half of `npm run build`, after `tsc -b`: each process Mesh starts with plain node runs
// from one bundled, minified file instead of hundreds of small modules. Node spends about half its
// start-up CPU finding, reading and compiling modules one by one, and an idle process keeps each
// module's wrapper and source; one file costs less of both.
//
//   providers/NAME/dist/main.js  → providers/NAME/dist/main.bundle.js   (module.json's `run`)
//   packages/cli/dist/main.js    → packages/cli/bundle/main.js + chunks   (bin/mesh.js loads it)
//
// The CLI's bundle is split at its dynamic imports, so `mesh status` still loads only what it needs.
// It sits in bundle/, one level under the package as dist/ is, so what finds `../package.json` from
// its own file still finds the package's. Every @mesh package moves with one version, so reading
// the bundling package's package.json gives the same version; this refuses to bundle otherwise.
// Node's built-ins, native or optional packages, and the TypeScript compiler (loaded only by
// `mesh check`) stay outside. Names of functions and classes are kept: errors are told apart by
// them, and stack traces stay readable.
//
//   node scripts/bundle.mjs        (after tsc -b; `npm run build` runs both)
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** Every provider in the checkout: a directory under providers/ with a src/main.ts. */
const PROVIDERS = readdirSync(join(ROOT, "providers")).filter((name) =>
  existsSync(join(ROOT, "providers", name, "src", "main.ts")),
);
/** Loaded at run time from node_modules, never bundled: optional or native, or only `mesh check`'s. */
const EXTERNAL = ["pg-native", "pg-cloudflare", "typescript"];
/**
 * What CommonJS code expects and an ES module lacks: `require`, with which bundled CommonJS packages
 * load Node's built-ins, and `__dirname`/`__filename` (here the bundle's own), which a few read on
 * paths an idle process does not take (ioredis's own version, pino's transports).
 */
const COMMONJS_GLOBALS = [
  'import { createRequire as meshCreateRequire } from "node:module";',
  'import { dirname as meshDirname } from "node:path";',
  'import { fileURLToPath as meshFileUrlToPath } from "node:url";',
  "const require = meshCreateRequire(import.meta.url);",
  "const __filename = meshFileUrlToPath(import.meta.url);",
  "const __dirname = meshDirname(__filename);",
].join("\n");

const versionOf = (dir) => JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;

/** Every workspace of the checkout by package name: its directory. */
const WORKSPACES = new Map(
  ["packages", "providers"]
    .flatMap((group) => readdirSync(join(ROOT, group)).map((name) => join(ROOT, group, name)))
    .filter((dir) => existsSync(join(dir, "package.json")))
    .map((dir) => [JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).name, dir]),
);

/**
 * The build info of `dir`'s workspace and of every workspace it depends on, which tsc -b rewrites
 * whenever it builds that workspace again.
 */
function buildInfos(dir) {
  const seen = new Set([dir]);
  for (const at of seen) {
    const deps = JSON.parse(readFileSync(join(at, "package.json"), "utf8")).dependencies ?? {};
    for (const name of Object.keys(deps)) if (WORKSPACES.has(name)) seen.add(WORKSPACES.get(name));
  }
  return [...seen].map((at) => join(at, "dist", ".tsbuildinfo"));
}

/**
 * A bundle made before tsc's last build (`npx tsc -b` alone) would run older code than dist/ holds,
 * silently. Each build info tsc wrote since the bundle was made says so: a provider's bundle refuses
 * to start, naming the fix, and bin/mesh.js runs dist/ instead of the CLI's (see built-from.json).
 * Outside the checkout (an installed tarball) none of these files is there and nothing is checked.
 */
function staleCheck(pkgDir, bundleDir) {
  const paths = buildInfos(pkgDir).map((file) => relative(bundleDir, file));
  return [
    'import { statSync as meshStat } from "node:fs";',
    "{",
    "  const made = meshStat(new URL(import.meta.url)).mtimeMs;",
    `  for (const info of ${JSON.stringify(paths)}) {`,
    "    const built = meshStat(new URL(info, import.meta.url), { throwIfNoEntry: false });",
    "    if (built !== undefined && built.mtimeMs > made)",
    "      throw new Error(`${meshFileUrlToPath(import.meta.url)} is older than tsc's build of ${info}: run npm run build, which bundles again`);",
    "  }",
    "}",
  ].join("\n");
}

/** The options every bundle shares. */
const common = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  external: EXTERNAL,
  banner: { js: COMMONJS_GLOBALS },
  minify: true,
  keepNames: true,
  sourcemap: "linked",
  metafile: true,
  logLevel: "warning",
};

/** Refuses a bundle holding an @mesh package of another version than `pkgDir`'s own (see above). */
function checkVersions(pkgDir, metafile) {
  const own = versionOf(pkgDir);
  const dirs = new Set();
  for (const input of Object.keys(metafile.inputs)) {
    const at = /^(packages|providers)\/[^/]+\//.exec(input);
    if (at) dirs.add(join(ROOT, at[0]));
  }
  for (const dir of dirs) {
    if (versionOf(dir) !== own) {
      throw new Error(`${relative(ROOT, dir)} is ${versionOf(dir)}, ${relative(ROOT, pkgDir)} is ${own}`);
    }
  }
}

/**
 * Writes a build's files, each whole or not at all (a process may be starting from them while
 * `npm run build` runs): each to a temporary name beside it, then renamed over the old one.
 */
function writeWhole(outputFiles) {
  for (const file of outputFiles) {
    const temporary = `${file.path}.${process.pid}.tmp`;
    writeFileSync(temporary, file.contents);
    renameSync(temporary, file.path);
  }
}

async function bundleProvider(name) {
  const dir = join(ROOT, "providers", name);
  const r = await build({
    ...common,
    absWorkingDir: ROOT,
    entryPoints: [join(dir, "dist", "main.js")],
    outfile: join(dir, "dist", "main.bundle.js"),
    banner: { js: `${COMMONJS_GLOBALS}\n${staleCheck(dir, join(dir, "dist"))}` },
    write: false,
  });
  checkVersions(dir, r.metafile);
  writeWhole(r.outputFiles);
}

/**
 * The CLI's bundle is a directory of chunks named by their content: a new one is written beside
 * the old, with built-from.json (what bin/mesh.js checks, see staleCheck), and put in its place in
 * two renames, so no old chunk is left behind and no process finds a half-written bundle (while
 * there is none, bin/mesh.js runs dist/).
 */
async function bundleCli() {
  const dir = join(ROOT, "packages", "cli");
  const out = join(dir, "bundle");
  const r = await build({
    ...common,
    absWorkingDir: ROOT,
    entryPoints: { main: join(dir, "dist", "main.js") },
    outdir: out,
    splitting: true,
    chunkNames: "chunk-[hash]",
    write: false,
  });
  checkVersions(dir, r.metafile);
  const next = `${out}.${process.pid}.new`;
  const old = `${out}.${process.pid}.old`;
  mkdirSync(next);
  for (const file of r.outputFiles) writeFileSync(join(next, relative(out, file.path)), file.contents);
  writeFileSync(
    join(next, "built-from.json"),
    `${JSON.stringify(buildInfos(dir).map((file) => relative(out, file)))}\n`,
  );
  if (existsSync(out)) renameSync(out, old);
  renameSync(next, out);
  rmSync(old, { recursive: true, force: true });
}

try {
  await Promise.all([...PROVIDERS.map(bundleProvider), bundleCli()]);
} catch (err) {
  process.stderr.write(`bundle: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
