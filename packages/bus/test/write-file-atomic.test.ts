// A file the mesh writes for a module is handed to that module's user before it is renamed into
// place, so it is never there with another owner; and a file with the wrong owner is written again.
import assert from "node:assert/strict";
import { chown, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { writeFileAtomic } from "@mesh/bus";

const IS_ROOT = process.getuid?.() === 0;
const OWNER = { uid: 12_346, gid: 12_347 };

void describe("writing a file atomically", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-write-atomic-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("leaves a file alone that already holds the same bytes and mode", async () => {
    const file = join(dir, "same");
    assert.equal(await writeFileAtomic(file, "x"), "written");
    assert.equal(await writeFileAtomic(file, "x"), "unchanged");
    assert.equal((await stat(file)).mode & 0o777, 0o600);
  });

  void it("replaces a symlink in the file's place instead of writing through it", async () => {
    const target = join(dir, "target");
    await writeFile(target, "keep me");
    const file = join(dir, "linked");
    await symlink(target, file);
    assert.equal(await writeFileAtomic(file, "keep me", 0o644), "written");
    assert.equal((await stat(file)).isFile(), true);
    assert.equal(await readFile(target, "utf8"), "keep me");
  });

  void it(
    "hands the file to its owner, and writes again a file with another owner",
    { skip: IS_ROOT ? false : "needs root to give a file away" },
    async () => {
      const file = join(dir, "owned");
      assert.equal(await writeFileAtomic(file, "pw", 0o600, OWNER), "written");
      const st = await stat(file);
      assert.deepEqual([st.uid, st.gid, st.mode & 0o777], [OWNER.uid, OWNER.gid, 0o600]);
      assert.equal(await writeFileAtomic(file, "pw", 0o600, OWNER), "unchanged");
      await chown(file, 0, 0);
      assert.equal(
        await writeFileAtomic(file, "pw", 0o600, OWNER),
        "written",
        "the wrong owner counts as changed",
      );
      assert.equal((await stat(file)).uid, OWNER.uid);
    },
  );
});
