// A leader whose own lease lapsed (its renewals unacknowledged, as while JetStream elects a new
// leader for the lease's stream after a server is killed) and which takes it back in the same
// term: nobody led meanwhile, so it goes on with the stores it holds. It lists no bucket's keys on
// the way back: each listing makes a JetStream consumer, which a cluster may place on the server
// that has just gone down, and the fleet change waiting for it then waits tens of seconds.
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { startController } from "@mesh/controller";
import { type FleetController } from "../src/fleet-controller.ts";
import { makeFleetDir, WITH_APP4, type FleetDir } from "./fleet-dir.ts";
import {
  connectAsAdmin,
  enrollNode,
  FAST_LEASE,
  startTestMesh,
  type TestMesh,
  type TestNode,
} from "./test-mesh.ts";

void describe("a leader whose own lease lapsed", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let controller: FleetController;
  let a: TestNode;
  let watcher: NatsConnection;
  let advisories: Subscription;
  const consumersMade: string[] = [];

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    controller = (await startController({
      stateDir: mesh.stateDir,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: mesh.authority,
      logger: mesh.log,
      watch: false,
      controllerId: "only",
      leaseTimings: FAST_LEASE,
    })) as FleetController;
    a = await enrollNode(await controller.joinToken("node-a"));
    await until("node-a's first delivery", () => a.delivery(), 30);
    // JetStream says each consumer it makes in the account: every listing of a bucket's keys.
    watcher = await connectAsAdmin(mesh.authority, mesh.nats.url, "watcher");
    advisories = watcher.subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.>", {
      callback: (_err, msg) => {
        consumersMade.push(msg.subject.split(".")[5] ?? "");
      },
    });
    await watcher.flush();
  });
  after(async () => {
    advisories?.unsubscribe();
    await watcher?.close();
    await controller?.stop();
    await mesh?.stop();
    if (fleet !== undefined) await rm(fleet.dir, { recursive: true, force: true });
  });

  void it("leads again in the same term without listing a bucket, and a fleet change then reaches the node", async () => {
    const term = controller.status().controller?.term;
    assert.equal(controller.leading(), true);
    consumersMade.length = 0;
    const resume = controller.pause();
    try {
      await until("the leader to stand by", () => Promise.resolve(!controller.leading()), 30);
    } finally {
      resume();
    }
    await until("the leader to lead again", () => Promise.resolve(controller.leading()), 30);
    assert.equal(controller.status().controller?.term, term, "the same term: nobody led meanwhile");

    await fleet.writeFleet(WITH_APP4);
    const outcome = await until(
      "the fleet change to be applied",
      () => controller.reload().catch(() => undefined),
      30,
    );
    assert.equal(outcome.minted, 1);
    await until(
      "app4's password to reach node-a",
      async () => Object.hasOwn((await a.delivery())?.secrets ?? {}, "app4/postgres-database"),
      30,
    );
    await watcher.flush();
    const ofStores = consumersMade.filter((stream) =>
      /^KV_mesh-(nodes|module-credentials|desired|sealed)/.test(stream),
    );
    assert.deepEqual(ofStores, [], "no bucket of the leader's stores was listed");
  });
});
