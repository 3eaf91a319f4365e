#!/usr/bin/env node
// Finds circles in the module graph of the sources, type imports included (`import type`,
// `export type … from`, `import("…")` types): lint does not look for circles, and even a circle of
// types ties the files' meanings together. Relative imports are followed file to
// file; `@mesh/*` imports to the package's source entry. Prints each circle and exits 1 when any.
//   node scripts/import-cycles.mjs [--json] [--root DIR]
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

/** Every package of the workspace: its name, its folder and its exports' source files. */
function workspacePackages(root) {
  const { workspaces } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const packages = new Map();
  for (const folder of workspaces) {
    const manifest = JSON.parse(readFileSync(join(root, folder, "package.json"), "utf8"));
    const entries = new Map();
    for (const [subpath, target] of Object.entries(manifest.exports ?? {})) {
      const source = typeof target === "object" && target !== null ? target.source : undefined;
      if (typeof source === "string") entries.set(subpath, resolve(root, folder, source));
    }
    packages.set(manifest.name, { folder: resolve(root, folder), entries });
  }
  return packages;
}

function sourceFiles(dir) {
  const found = [];
  if (!existsSync(dir)) return found;
  for (const entry of readdirSync(dir, { recursive: true })) {
    const path = String(entry);
    if (path.endsWith(".ts") && !path.endsWith(".d.ts") && !path.includes("node_modules"))
      found.push(join(dir, path));
  }
  return found;
}

/** The files `file` imports, whatever kind of import, resolved to sources of this repository. */
function importsOf(file, packages) {
  const info = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
  const out = new Set();
  for (const { fileName } of info.importedFiles) {
    if (fileName.startsWith(".")) {
      const target = resolve(dirname(file), fileName);
      const candidates = [target, target.replace(/\.js$/, ".ts"), `${target}.ts`, join(target, "index.ts")];
      const hit = candidates.find((c) => c.endsWith(".ts") && existsSync(c));
      if (hit !== undefined) out.add(hit);
      continue;
    }
    const match = /^(@mesh\/[^/]+)(\/.*)?$/.exec(fileName);
    if (match === null) continue;
    const pkg = packages.get(match[1]);
    const entry = pkg?.entries.get(match[2] === undefined ? "." : `.${match[2]}`);
    if (entry !== undefined) out.add(entry);
  }
  return [...out];
}

/** Strongly connected components of more than one file (or a file importing itself): Tarjan's. */
function circles(graph) {
  let index = 0;
  const stack = [];
  const on = new Set();
  const idx = new Map();
  const low = new Map();
  const found = [];
  const visit = (v) => {
    // Iterative, so a deep graph cannot overflow the stack.
    const work = [[v, 0]];
    idx.set(v, index);
    low.set(v, index);
    index += 1;
    stack.push(v);
    on.add(v);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const [node, i] = frame;
      const edges = graph.get(node) ?? [];
      if (i < edges.length) {
        frame[1] += 1;
        const w = edges[i];
        if (!idx.has(w)) {
          idx.set(w, index);
          low.set(w, index);
          index += 1;
          stack.push(w);
          on.add(w);
          work.push([w, 0]);
        } else if (on.has(w)) low.set(node, Math.min(low.get(node), idx.get(w)));
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(node)));
      }
      if (low.get(node) === idx.get(node)) {
        const component = [];
        for (;;) {
          const w = stack.pop();
          on.delete(w);
          component.push(w);
          if (w === node) break;
        }
        if (component.length > 1 || (graph.get(node) ?? []).includes(node)) found.push(component.sort());
      }
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return found;
}

/** The module graph of every package's and provider's `src`, and its circles. */
export function importCycles(root = fileURLToPath(new URL("..", import.meta.url))) {
  const packages = workspacePackages(root);
  const graph = new Map();
  for (const { folder } of packages.values())
    for (const file of sourceFiles(join(folder, "src"))) graph.set(file, importsOf(file, packages));
  return { files: graph.size, circles: circles(graph).map((c) => c.map((f) => relative(root, f))) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf("--root");
  const { files, circles: found } = importCycles(at > 0 ? resolve(process.argv[at + 1]) : undefined);
  if (process.argv.includes("--json")) console.log(JSON.stringify({ files, circles: found }, null, 2));
  else if (found.length === 0) console.log(`no import circles among ${files} source files`);
  else {
    for (const circle of found)
      console.error(`an import circle of ${circle.length} files:\n  ${circle.join("\n  ")}`);
    console.error(
      `${found.length} import circle(s) among ${files} source files: move the shared types or ` +
        "functions to a file that the circle's files import, and that imports none of them",
    );
  }
  process.exit(found.length === 0 ? 0 : 1);
}
