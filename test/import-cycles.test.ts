// No circles in the module graph, type imports included: lint does not look for circles; the
// repository's own check (scripts/import-cycles.mjs) walks every import of every source file.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const SCRIPT = fileURLToPath(new URL("../scripts/import-cycles.mjs", import.meta.url));

interface Found {
  readonly code: number | null;
  readonly files: number;
  readonly circles: string[][];
}

function check(root?: string): Found {
  const run = spawnSync(process.execPath, [SCRIPT, "--json", ...(root ? ["--root", root] : [])], {
    encoding: "utf8",
  });
  const parsed = JSON.parse(run.stdout) as { files: number; circles: string[][] };
  return { code: run.status, ...parsed };
}

/** A workspace of two packages whose files import each other in the ways `files` says. */
async function workspace(files: Record<string, string>): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), "mesh-cycles-"));
  await writeFile(join(root, "package.json"), JSON.stringify({ workspaces: ["packages/a", "packages/b"] }));
  for (const name of ["a", "b"]) {
    await mkdir(join(root, "packages", name, "src"), { recursive: true });
    await writeFile(
      join(root, "packages", name, "package.json"),
      JSON.stringify({ name: `@mesh/${name}`, exports: { ".": { source: "./src/index.ts" } } }),
    );
  }
  for (const [path, text] of Object.entries(files)) await writeFile(join(root, path), text);
  return root;
}

describe("the module graph", () => {
  it("has no circle among the repository's sources", () => {
    const found = check();
    assert.ok(found.files > 100, `the check read the sources (${found.files} files)`);
    assert.deepEqual(found.circles, [], "an import circle (scripts/import-cycles.mjs names the fix)");
    assert.equal(found.code, 0);
  });

  it("finds a circle made only of type imports, within a package and across two", async () => {
    const root = await workspace({
      "packages/a/src/index.ts": 'export type { B } from "./one.ts";\n',
      "packages/a/src/one.ts": 'import type { T } from "./two.ts";\nexport type B = T;\n',
      "packages/a/src/two.ts": 'import type { B } from "./one.ts";\nexport type T = { b?: B };\n',
      "packages/b/src/index.ts": 'import type { B } from "@mesh/a";\nexport type C = B;\n',
      "packages/b/src/three.ts": 'export type D = import("./four.ts").E;\n',
      "packages/b/src/four.ts": 'import type { D } from "./three.ts";\nexport type E = D;\n',
    });
    try {
      const found = check(root);
      assert.equal(found.code, 1);
      assert.deepEqual(found.circles.map((c) => c.join(" ")).sort(), [
        "packages/a/src/one.ts packages/a/src/two.ts",
        "packages/b/src/four.ts packages/b/src/three.ts",
      ]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it("follows a package's entry across packages", async () => {
    const root = await workspace({
      "packages/a/src/index.ts": 'import type { C } from "@mesh/b";\nexport type A = C;\n',
      "packages/b/src/index.ts": 'import type { A } from "@mesh/a";\nexport type C = { a?: A };\n',
    });
    try {
      const found = check(root);
      assert.deepEqual(found.circles, [["packages/a/src/index.ts", "packages/b/src/index.ts"]]);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
