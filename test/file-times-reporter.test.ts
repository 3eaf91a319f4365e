// The reporter that closes `npm test`'s output: a CI log is often read from its tail only, so the
// tail must name each failed test and what it threw, and end with the "N passed, N failed" line.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const REPORTER = fileURLToPath(new URL("../scripts/file-times-reporter.mjs", import.meta.url));

describe("the file-times reporter", () => {
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-reporter-"));
    await writeFile(
      join(dir, "some.test.mjs"),
      [
        'import { it } from "node:test";',
        'import assert from "node:assert/strict";',
        'it("compares", () => assert.equal(1, 2, "one is not two"));',
        'it("throws", async () => { throw new Error("first line\\nsecond line"); });',
        'it("holds", () => {});',
        'it.skip("waits", () => {});',
      ].join("\n"),
    );
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("ends with each failure's name and message, then the counts", () => {
    // Without node:test's own mark in the environment, the child runs as a test runner of its own.
    const env = { ...process.env };
    delete env["NODE_TEST_CONTEXT"];
    const run = spawnSync(process.execPath, ["--test", `--test-reporter=${REPORTER}`, "some.test.mjs"], {
      cwd: dir,
      env,
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.equal(run.status, 1, run.stderr);
    const out = run.stdout;
    assert.match(out, /✗ {2}some\.test\.mjs/);
    const failures = out.slice(out.indexOf("== failed tests (2)"));
    assert.notEqual(out.indexOf("== failed tests (2)"), -1, out);
    assert.match(failures, /✗ compares \(some\.test\.mjs\)\n {4}one is not two/);
    assert.match(failures, /✗ throws \(some\.test\.mjs\)\n {4}first line\n {4}second line/);
    assert.doesNotMatch(failures, /holds|waits/);
    assert.match(out, /\n1 passed, 2 failed, 1 skipped\n$/);
  });
});
