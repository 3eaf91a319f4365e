// A leader paused mid-publish (SIGSTOP past its lease, say) must write nothing when it resumes:
// `NodeDeliveries.publish` asks whether it still leads right before the write, after every await
// that may have outlasted the lease (passwords, sealing, reading what was delivered).
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { closeBus, DESIRED_STATE_BUCKET, newNodeKeys, newUserKeys, openState } from "@mesh/bus";
import { DELIVERY_KEY, loadFleetPlan } from "@mesh/controller";
import { NodeDeliveries } from "../src/node-deliveries.ts";
import { NotLeaderError } from "../src/fleet-controller.ts";
import { PasswordStore } from "../src/password-store.ts";
import { type DeliveryHead } from "@mesh/manifest";
import { type EnrolledNode } from "../src/enrollment.ts";
import type { NatsConnection } from "@nats-io/transport-node";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { connectAsController, recordingLogger, startTestMesh, type TestMesh } from "./test-mesh.ts";

void describe("a delivery published by a controller that stopped leading meanwhile", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let nc: NatsConnection;

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    nc = await connectAsController(mesh.authority, mesh.nats.url);
  });
  after(async () => {
    await closeBus(nc);
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
  });

  void it("is not written when the controller no longer leads right before the write", async () => {
    const log = recordingLogger();
    const desired = await openState<unknown>(nc, DESIRED_STATE_BUCKET);
    const passwords = await PasswordStore.open(nc, await newNodeKeys(), log);
    const deliveries = new NodeDeliveries(nc, desired, passwords);
    const plan = await loadFleetPlan(fleet.fleetFile);
    const enrolled: EnrolledNode = {
      node: "node-a",
      sealPublicKey: (await newNodeKeys()).publicKey,
      natsPublicKey: newUserKeys().publicKey,
      enrolledAt: new Date().toISOString(),
    };
    const first = await deliveries.publish("node-a", plan, enrolled, undefined, 1, () => undefined);
    assert.equal(first.changed, true);
    const bucket = await deliveries.bucket("node-a");
    assert.equal(((await bucket.get(DELIVERY_KEY)) as DeliveryHead | undefined)?.term, 1);

    // The same leader, resumed after its lease ran out and another took term 2: asked whether it
    // leads only once everything else is ready, it does not, and writes nothing.
    let asked = 0;
    await assert.rejects(
      deliveries.publish("node-a", plan, enrolled, undefined, 3, () => {
        asked++;
        throw new NotLeaderError("publish deliveries", "other", 2);
      }),
      NotLeaderError,
    );
    assert.equal(asked, 1, "asked once, right before the write");
    const kept = (await bucket.get(DELIVERY_KEY)) as DeliveryHead | undefined;
    assert.equal(kept?.generation, first.generation);
    assert.equal(kept?.term, 1);
  });
});
