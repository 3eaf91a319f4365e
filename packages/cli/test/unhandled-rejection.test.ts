// Crash-only holds only if nothing hides a crash: no part of the mesh installs a global handler for
// unhandled rejections or uncaught exceptions, so a rejection nobody handles still ends the process
// (and systemd, or `mesh up`'s next start, brings it back). What a module says is kept from ever
// getting there by parsing it at the boundary, not by a handler that swallows what got through.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const GLOBAL_HANDLER =
  /\b(?:process|globalThis\.process)\s*\.\s*(?:on|once|prependListener|addListener)\s*\(\s*["'`](?:unhandledRejection|uncaughtException|uncaughtExceptionMonitor)["'`]|setUncaughtExceptionCaptureCallback/;

/** Every TypeScript source file of the packages and providers that a mesh process runs. */
function sources(): string[] {
  const files: string[] = [];
  for (const group of ["packages", "providers"]) {
    for (const pkg of readdirSync(join(ROOT, group))) {
      const walk = (dir: string): void => {
        for (const entry of readdirSync(dir, { withFileTypes: true })) {
          const path = join(dir, entry.name);
          if (entry.isDirectory()) walk(path);
          else if (/\.(ts|js|mjs)$/.test(entry.name)) files.push(path);
        }
      };
      try {
        walk(join(ROOT, group, pkg, "src"));
      } catch {
        // A package without src/.
      }
    }
  }
  return files;
}

describe("no global handler swallows an error", () => {
  it("no source of the mesh installs a handler for unhandled rejections or uncaught exceptions", () => {
    const files = sources();
    assert.ok(files.length > 100, `found the sources (${files.length})`);
    const found = files.filter((f) => GLOBAL_HANDLER.test(readFileSync(f, "utf8")));
    assert.deepEqual(found, []);
  });

  it("with the whole program loaded, a rejection nobody handles still ends the process", () => {
    const load = [
      "packages/cli/dist/cli.js",
      "packages/agent/dist/index.js",
      "packages/controller/dist/index.js",
      "packages/sdk/dist/provider-entry.js",
    ].map((f) => pathToFileURL(join(ROOT, f)).href);
    const script =
      `for (const m of ${JSON.stringify(load)}) await import(m);` +
      `const { buildProgram } = await import(${JSON.stringify(load[0])});` +
      `await buildProgram({ out() {}, err() {}, env: {}, stdin: process.stdin });` +
      `process.stdout.write("listeners " + process.listenerCount("unhandledRejection") + " " + process.listenerCount("uncaughtException") + "\\n");` +
      `Promise.reject(new Error("nobody handles this"));` +
      `setTimeout(() => process.stdout.write("still running\\n"), 2000);`;
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      encoding: "utf8",
      timeout: 60_000,
      stdio: ["ignore", "pipe", "pipe"],
    });
    assert.match(run.stdout, /^listeners 0 0\n/, run.stderr);
    assert.doesNotMatch(run.stdout, /still running/);
    assert.notEqual(run.status, 0);
    assert.match(run.stderr, /nobody handles this/);
  });
});
