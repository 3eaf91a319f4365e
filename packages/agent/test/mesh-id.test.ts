// The mesh id a node's state keeps, and what is named with it: made once, kept across starts,
// refused when it is not one; the users of the mesh whose module is gone found by its prefix.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { loadOrMakeMeshId, MeshIdError, MESH_ID_FILE } from "../src/mesh-id.ts";
import { usersOfGoneModules } from "../src/module-users.ts";

void describe("a node's mesh id", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-id-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("is made once (six characters of base32, 0600) and kept by every later start", async () => {
    const first = await loadOrMakeMeshId(dir);
    assert.equal(first.made, true);
    assert.match(first.id, /^[a-z2-7]{6}$/);
    assert.equal((await stat(join(dir, MESH_ID_FILE))).mode & 0o777, 0o600);
    const again = await loadOrMakeMeshId(dir);
    assert.deepEqual(again, { id: first.id, made: false });
    assert.equal((await readFile(join(dir, MESH_ID_FILE), "utf8")).trim(), first.id);
  });

  void it("differs between two states", async () => {
    const other = await mkdtemp(join(tmpdir(), "mesh-id-other-"));
    try {
      assert.notEqual((await loadOrMakeMeshId(other)).id, (await loadOrMakeMeshId(dir)).id);
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });

  void it("is refused, never replaced, when the file holds something else", async () => {
    const bad = await mkdtemp(join(tmpdir(), "mesh-id-bad-"));
    try {
      await writeFile(join(bad, MESH_ID_FILE), "not an id\n");
      await assert.rejects(loadOrMakeMeshId(bad), (err: unknown) => {
        assert.ok(err instanceof MeshIdError);
        assert.match(err.message, /does not hold a mesh id: .*put back the six characters/);
        return true;
      });
      assert.equal(await readFile(join(bad, MESH_ID_FILE), "utf8"), "not an id\n");
    } finally {
      await rm(bad, { recursive: true, force: true });
    }
  });

  void it("finds the users of the mesh whose module is gone, and no one else's", async () => {
    const passwd = join(dir, "passwd");
    await writeFile(
      passwd,
      [
        "root:x:0:0:root:/root:/bin/bash",
        "mesh-abcdef-notes:x:990:990:mesh module notes of /s:/nonexistent:/usr/sbin/nologin",
        "mesh-abcdef-oldapp:x:989:989:mesh module oldapp of /s:/nonexistent:/usr/sbin/nologin",
        "mesh-ghijkl-oldapp:x:988:988:mesh module oldapp of /t:/nonexistent:/usr/sbin/nologin",
        "mesh-oldapp:x:987:987:mesh module oldapp:/nonexistent:/usr/sbin/nologin",
        "",
      ].join("\n"),
    );
    assert.deepEqual(await usersOfGoneModules("abcdef", ["notes"], passwd), ["mesh-abcdef-oldapp"]);
    assert.deepEqual(await usersOfGoneModules("abcdef", ["notes", "oldapp"], passwd), []);
    assert.deepEqual(await usersOfGoneModules("abcdef", [], join(dir, "missing")), []);
  });
});
