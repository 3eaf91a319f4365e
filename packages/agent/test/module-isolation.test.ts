// Who a module runs as, decided before its files are written: here, an agent that cannot separate
// modules (it does not run as root) says so once and runs each as itself; and the user names.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Delivery } from "@mesh/manifest";
import { ModuleIsolations, moduleUserName, ownerOf } from "../src/index.ts";
import { recordingLogger } from "./test-mesh.ts";

void describe("who a module runs as", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-isolation-unit-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("is the agent itself when the agent cannot separate modules, said once for all", async () => {
    const logger = recordingLogger();
    const isolations = new ModuleIsolations({
      stateDir: dir,
      meshId: "abcdef",
      mode: "strict",
      logger,
      env: {},
      separate: false,
    });
    const delivery: Delivery = {
      node: "n1",
      generation: 1,
      fleetFile: join(dir, "mesh.yaml"),
      modules: ["app", "store"].map((name) => ({ name, manifest: join(dir, name, "module.json") })),
      plan: { instances: [] },
      secrets: {},
    };
    for (let i = 0; i < 2; i++) {
      const identities = await isolations.resolve(delivery);
      for (const name of ["app", "store"]) {
        const identity = identities.get(name);
        assert.equal(identity?.kind, "agent-user");
        assert.equal(identity?.isolation.isolated, false);
        assert.match(identity?.isolation.reason ?? "", /does not run as root/);
        assert.equal(ownerOf(identity), undefined, "its files keep the agent's owner");
      }
    }
    assert.equal(logger.lines.filter((l) => /cannot separate its modules/.test(l)).length, 1);
  });

  void it("is named mesh-<id>-<module>, cut to 32 characters with a stable hash when longer", () => {
    assert.equal(moduleUserName("abcdef", "notes"), "mesh-abcdef-notes");
    const long = moduleUserName("abcdef", "a-module-with-a-long-name");
    assert.equal(long.length, 32);
    assert.equal(long, moduleUserName("abcdef", "a-module-with-a-long-name"));
    assert.notEqual(long, moduleUserName("abcdef", "a-module-with-a-long-namf"));
    assert.match(long, /^mesh-abcdef-a-module-wi-[0-9a-f]{8}$/);
  });

  void it("differs between two meshes for the same module, even when cut", () => {
    assert.notEqual(moduleUserName("abcdef", "postgres"), moduleUserName("ghijkl", "postgres"));
    const module = "a-module-with-a-rather-long-name-indeed";
    assert.notEqual(moduleUserName("abcdef", module), moduleUserName("ghijkl", module));
  });
});
