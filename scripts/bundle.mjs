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
import { existsSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join, relative } from "node:path";
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

async function bundleProvider(name) {
  const dir = join(ROOT, "providers", name);
  const r = await build({
    ...common,
    absWorkingDir: ROOT,
    entryPoints: [join(dir, "dist", "main.js")],
    outfile: join(dir, "dist", "main.bundle.js"),
  });
  checkVersions(dir, r.metafile);
}

async function bundleCli() {
  const dir = join(ROOT, "packages", "cli");
  const out = join(dir, "bundle");
  // Chunks are named by their content: a new build leaves none of the old ones behind.
  rmSync(out, { recursive: true, force: true });
  const r = await build({
    ...common,
    absWorkingDir: ROOT,
    entryPoints: { main: join(dir, "dist", "main.js") },
    outdir: out,
    splitting: true,
    chunkNames: "chunk-[hash]",
  });
  checkVersions(dir, r.metafile);
}

try {
  await Promise.all([...PROVIDERS.map(bundleProvider), bundleCli()]);
} catch (err) {
  process.stderr.write(`bundle: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
