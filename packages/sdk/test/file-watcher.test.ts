// The file watcher tells a harness which files it cannot vouch for: those under a directory it
// could not watch, until a watch opens there, and then each of them once.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { FileWatcher, watchKey } from "../src/watcher.ts";

describe("the file watcher", () => {
  it("a file under a directory not there yet is unwatched until the directory comes", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-watcher-"));
    const watcher = new FileWatcher(() => {});
    try {
      const here = join(dir, "here.secret");
      const later = join(dir, "later", "a.secret");
      watcher.watchFiles([here, later]);
      assert.equal(watcher.watching(here), true);
      assert.equal(watcher.watching(later), false);
      assert.deepEqual(watcher.unwatched(), [watchKey(later)]);
      assert.deepEqual(watcher.reopen(), [], "still not there");
      await mkdir(join(dir, "later"));
      assert.deepEqual(watcher.reopen(), [watchKey(later)], "once opened, its files count as changed");
      assert.equal(watcher.watching(later), true);
      assert.deepEqual(watcher.unwatched(), []);
      assert.deepEqual(watcher.reopen(), []);
    } finally {
      watcher.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
