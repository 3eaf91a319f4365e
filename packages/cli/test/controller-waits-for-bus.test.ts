// `mesh controller --bus` started while JetStream has no quorum (the cluster's machines boot at
// once, and the controller's comes up first): it waits for the bus, saying why, and serves once
// the servers are back, instead of exiting with a JetStream timeout.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { loadOrCreateAuthority } from "@mesh/controller";
import { meshClusterConfigs, startNatsCluster, type NatsCluster } from "@mesh/testkit";
import { startMesh, type MeshProcess } from "./run-mesh.ts";

const FLEET = fileURLToPath(new URL("../../../examples/fleet/mesh.yaml", import.meta.url));

describe("mesh controller started before the bus has a quorum", { timeout: 240_000 }, () => {
  let state: string | undefined;
  let cluster: NatsCluster | undefined;
  let controller: MeshProcess | undefined;

  after(async () => {
    if (controller !== undefined && controller.child.exitCode === null) {
      controller.child.kill("SIGKILL");
      await controller.done.catch(() => {});
    }
    await cluster?.stop();
    if (state !== undefined) await rm(state, { recursive: true, force: true });
  });

  it("waits for the bus, saying why, and serves once the servers are back", async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-controller-waits-"));
    cluster = await startNatsCluster({
      configure: meshClusterConfigs(await loadOrCreateAuthority(join(state, "controller"))),
    });
    // One server of three: it answers connections, and JetStream cannot answer anything.
    await cluster.kill(1);
    await cluster.kill(2);
    controller = startMesh(["controller", FLEET, "--state", state, "--bus", cluster.urls.join(",")]);
    controller.child.stdin?.end();
    await controller.waitFor(/the controller waits for the bus \(.+\); it tries again every 2 s/);
    assert.equal(controller.child.exitCode, null, "it still runs");
    assert.doesNotMatch(controller.output(), /3\/3 the controller serves/);

    await cluster.start(1);
    await cluster.start(2);
    await controller.waitFor(/3\/3 the controller serves/);
    controller.child.kill("SIGTERM");
    const run = await controller.done;
    assert.equal(run.code, 0, run.stderr);
  });
});
