// The state directory's lock: one mesh per directory, a stale lock taken over, said whose it was.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { lockStateDir, processStartTime, StateLockedError } from "../src/index.ts";
import { stateLockPath } from "../src/state-lock.ts";

describe("the state directory's lock", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-lock-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const fresh = async (name: string): Promise<string> => join(dir, name);

  void it("a second lock on a held directory is refused, naming the PID that holds it", async () => {
    const state = await fresh("held");
    const lock = await lockStateDir(state, "mesh up");
    assert.equal(lock.tookOver, undefined);
    await assert.rejects(lockStateDir(state, "mesh agent"), (err: unknown) => {
      assert.ok(err instanceof StateLockedError);
      assert.equal(err.pid, process.pid);
      assert.match(err.message, new RegExp(`in use by mesh up \\(pid ${process.pid}\\)`));
      return true;
    });
    await lock.release();
    const again = await lockStateDir(state, "mesh agent");
    assert.equal(again.tookOver, undefined, "a released lock is simply taken");
    await again.release();
  });

  void it("a lock whose process is gone is taken over, and says so", async () => {
    const state = await fresh("gone");
    const gone = spawnSync("true").pid;
    await lockStateDir(state, "x").then((l) => l.release());
    await writeFile(stateLockPath(state), JSON.stringify({ pid: gone, start: 1, who: "mesh up" }));
    const lock = await lockStateDir(state, "mesh up");
    assert.deepEqual(lock.tookOver, { pid: gone, who: "mesh up", why: `pid ${gone} is gone` });
    const held = JSON.parse(await readFile(lock.path, "utf8")) as { pid: number; start: number };
    assert.equal(held.pid, process.pid);
    assert.equal(held.start, processStartTime(process.pid));
    await lock.release();
    assert.deepEqual(
      (await readdir(state)).filter((n) => n.startsWith(".")),
      [],
      "no temp file is left",
    );
  });

  void it("a lock whose PID now names another process (another start time) is taken over", async () => {
    const state = await fresh("reused");
    await lockStateDir(state, "x").then((l) => l.release());
    const start = processStartTime(process.pid)!;
    await writeFile(
      stateLockPath(state),
      JSON.stringify({ pid: process.pid, start: start - 1, who: "mesh agent" }),
    );
    const lock = await lockStateDir(state, "mesh up");
    assert.equal(lock.tookOver?.why, `pid ${process.pid} is now another process`);
    await lock.release();
  });

  void it("release leaves alone a lock another process holds now", async () => {
    const state = await fresh("other");
    const lock = await lockStateDir(state, "mesh up");
    const other = JSON.stringify({ pid: 1, start: processStartTime(1), who: "someone" });
    await writeFile(lock.path, other);
    await lock.release();
    assert.equal(await readFile(lock.path, "utf8"), other);
  });
});
