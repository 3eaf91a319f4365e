// A module's command is any program on the node: found on its PATH or at a path. One that is not
// there is said before any start, in words that say what to do; a crashing module's log tail is a
// few clipped lines.
import assert from "node:assert/strict";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { logTail } from "../src/log-tail.ts";
import { commandProblem } from "../src/module-launch.ts";

describe("a module's command", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-command-"));
    await writeFile(join(dir, "app"), "#!/bin/sh\nexit 0\n");
    await chmod(join(dir, "app"), 0o755);
    await writeFile(join(dir, "notes.txt"), "not a program\n");
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("is found on the PATH, at an absolute path, or relative to the manifest's directory", async () => {
    assert.equal(await commandProblem("sh", dir, "/usr/bin:/bin"), undefined);
    assert.equal(await commandProblem("app", "/", dir), undefined);
    assert.equal(await commandProblem(join(dir, "app"), "/", ""), undefined);
    assert.equal(await commandProblem("./app", dir, ""), undefined);
  });

  it("is refused, naming the PATH searched, when no directory of the PATH has it", async () => {
    const why = await commandProblem("no-such-program-for-mesh", dir, `/usr/bin:${dir}`);
    assert.equal(
      why,
      `its command no-such-program-for-mesh is not found on this node's PATH (/usr/bin:${dir}): ` +
        "install it, or give run.command as an absolute path",
    );
  });

  it("is refused when the path is missing or not executable", async () => {
    assert.match(
      (await commandProblem("./nope", dir, "")) ?? "",
      /nope is not an executable file on this node/,
    );
    assert.match(
      (await commandProblem("./notes.txt", dir, "")) ?? "",
      /notes\.txt is not an executable file/,
    );
  });

  it("shows at most five whole log lines, each clipped", async () => {
    const log = join(dir, "log");
    const lines = Array.from({ length: 40 }, (_, i) => `line ${i} ${"x".repeat(i === 39 ? 500 : 10)}`);
    await writeFile(log, `${lines.join("\n")}\n`);
    const tail = logTail(log);
    assert.equal(tail.length, 5);
    assert.equal(tail[0], lines[35]);
    assert.equal(tail[4]?.length, 200);
    assert.ok(tail[4]?.endsWith("…"));
    assert.deepEqual(logTail(join(dir, "missing")), []);
  });
});
