// A module that runs as the agent's user (--isolation auto) because its user cannot reach the
// node's state: every delivery decides again, and while it still cannot, nothing of the module's is
// handed to its user on the way. Handed over and taken back, its home changed owner for a moment on
// each delivery, and the agent refused the module's own files (its action journal) meanwhile.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { moduleHomePath, type Delivery } from "@mesh/manifest";
import { ModuleIsolations } from "../src/module-isolation.ts";
import { recordingLogger } from "./test-mesh.ts";

const IS_ROOT = process.getuid?.() === 0;

void describe(
  "a module its user cannot reach, under --isolation auto",
  { skip: IS_ROOT ? false : "needs root to make module users" },
  () => {
    let dir: string;
    let stateDir: string;
    let delivery: Delivery;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), "mesh-isolation-fallback-"));
      await chmod(dir, 0o755);
      // The manifest is readable by everyone; the node's state is the agent's alone.
      const manifestDir = join(dir, "fleet", "iso-fallback");
      await mkdir(manifestDir, { recursive: true, mode: 0o755 });
      await writeFile(join(manifestDir, "module.json"), JSON.stringify({ name: "iso-fallback" }), {
        mode: 0o644,
      });
      stateDir = join(dir, "state");
      await mkdir(stateDir, { mode: 0o700 });
      delivery = {
        node: "n1",
        generation: 1,
        fleetFile: join(dir, "fleet", "mesh.yaml"),
        modules: [{ name: "iso-fallback", manifest: join(manifestDir, "module.json") }],
        plan: { instances: [] },
        secrets: {},
      };
    });
    after(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    void it("runs as the agent's user, and its home keeps the agent as its owner from one delivery to the next", async () => {
      const logger = recordingLogger();
      const isolations = new ModuleIsolations({
        stateDir,
        meshId: "isofbk",
        mode: "auto",
        logger,
        env: process.env,
      });
      const home = moduleHomePath(stateDir, "iso-fallback");
      const first = (await isolations.resolve(delivery)).get("iso-fallback");
      assert.equal(first?.kind, "agent-user");
      assert.match(first?.isolation.reason ?? "", /cannot enter/);
      const before = await stat(home);
      assert.equal(before.uid, 0, "the home is the agent's");
      for (let i = 0; i < 3; i++) {
        const again = (await isolations.resolve({ ...delivery, generation: 2 + i })).get("iso-fallback");
        assert.equal(again?.kind, "agent-user");
        assert.match(again?.isolation.reason ?? "", /cannot enter/);
      }
      const after = await stat(home);
      assert.equal(after.uid, 0);
      // A chown changes the inode's ctime even when it gives the owner back.
      assert.equal(after.ctimeMs, before.ctimeMs, "nothing was handed over and taken back");
    });
  },
);
