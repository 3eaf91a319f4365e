import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import {
  copyStandbyState,
  loadOrCreateAuthority,
  saveAuthority,
  startController,
  type Controller,
} from "@mesh/controller";
import { NotLeaderError, type FleetController } from "../src/fleet-controller.ts";
import { makeFleetDir, WITH_APP4, type FleetDir } from "./fleet-dir.ts";
import {
  enrollNode,
  FAST_LEASE,
  recordingLogger,
  startTestMesh,
  type TestMesh,
  type TestNode,
} from "./test-mesh.ts";

void describe("a standby controller beside the leader, on one bus", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let standbyDir: string;
  let leader: FleetController;
  let standby: FleetController;
  let a: TestNode;
  let b: TestNode;
  let resumeLeader: (() => void) | undefined;
  const started: Controller[] = [];

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    standbyDir = await mkdtemp(join(tmpdir(), "mesh-standby-state-"));
    leader = (await startController({
      stateDir: mesh.stateDir,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: mesh.authority,
      logger: mesh.log,
      watch: false,
      controllerId: "first",
      leaseTimings: FAST_LEASE,
    })) as FleetController;
    started.push(leader);
    a = await enrollNode(await leader.joinToken("node-a"));
    b = await enrollNode(await leader.joinToken("node-b"));
    await until("both nodes' first deliveries", async () => (await a.delivery()) && (await b.delivery()), 30);
    // The standby has the leader's authority and controller keys, copied, and nothing else.
    await saveAuthority(mesh.stateDir, mesh.authority);
    await copyStandbyState(mesh.stateDir, standbyDir);
    standby = (await startController({
      stateDir: standbyDir,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: await loadOrCreateAuthority(standbyDir),
      logger: recordingLogger(),
      watch: false,
      controllerId: "second",
      standby: true,
      leaseTimings: FAST_LEASE,
    })) as FleetController;
    started.push(standby);
  });
  after(async () => {
    resumeLeader?.();
    await Promise.all(started.map((c) => c.stop()));
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
    await rm(standbyDir, { recursive: true, force: true });
  });

  void it("has one leader, and a standby that answers status naming it and refuses every write", async () => {
    assert.equal(leader.leading(), true);
    assert.equal(standby.leading(), false);
    const said = standby.status().controller;
    assert.equal(said?.leader, "first");
    assert.equal(said?.term, 1);
    assert.equal(said?.leading, false);
    assert.equal(leader.status().controller?.leader, "first");
    assert.deepEqual(
      standby.current().plan,
      JSON.parse(JSON.stringify(leader.current().plan)),
      "the standby shows the fleet stored by the leader (as JSON keeps it)",
    );
    await assert.rejects(standby.rotate("app1", "postgres-database"), NotLeaderError);
    await assert.rejects(standby.reload(), NotLeaderError);
    await assert.rejects(standby.joinToken("node-a"), NotLeaderError);
    assert.equal(
      (await standby.tool({ module: "postgres", tool: "status", args: [], who: "test" })).ok,
      false,
    );
    assert.equal((await a.delivery())?.term, 1, "deliveries carry the leader's term");
    // A change the standby did not make: it must serve it, not what it read at its start.
    const before = await a.passwords();
    await leader.rotate("app1", "postgres-database");
    assert.notEqual((await a.passwords())["app1/postgres-database"], before["app1/postgres-database"]);
  });

  void it("takes over from a paused leader within the bound and serves the stored fleet in the next term", async () => {
    const passwords = await a.passwords();
    const pausedAt = performance.now();
    resumeLeader = leader.pause();
    await until("the leader to stop leading", () => Promise.resolve(!leader.leading()), 30);
    const stoppedAfter = performance.now() - pausedAt;
    await until("the standby to lead", () => Promise.resolve(standby.leading()), 30);
    const tookOverAfter = performance.now() - pausedAt;
    // Liveness limits, generous: the leader gives up after 1.5 s, the standby takes over after 2.5 s.
    assert.ok(stoppedAfter < 10_000, `the leader stopped leading after ${Math.round(stoppedAfter)} ms`);
    assert.ok(tookOverAfter < 15_000, `the standby led after ${Math.round(tookOverAfter)} ms`);
    // The standby's wait began when it saw the last renewal, at most a renewal period before the pause.
    assert.ok(
      tookOverAfter >= FAST_LEASE.takeOverAfterMs - 2 * FAST_LEASE.renewEveryMs,
      `not before the lease had gone unrenewed for 2.5 s (${Math.round(tookOverAfter)} ms)`,
    );
    assert.equal(standby.status().controller?.term, 2);
    const delivery = await until(
      "node-a's delivery in term 2",
      async () => {
        const d = await a.delivery();
        return d?.term === 2 ? d : undefined;
      },
      30,
    );
    assert.deepEqual(delivery.plan, (await b.delivery()) && delivery.plan);
    assert.deepEqual(await a.passwords(), passwords, "the same passwords, opened with the copied keys");
    assert.equal((await b.delivery())?.term, 2);
  });

  void it("makes the old leader, resumed, stand by and undo nothing", async () => {
    const before = { a: await a.delivery(), b: await b.delivery() };
    resumeLeader?.();
    resumeLeader = undefined;
    await until(
      "the old leader to see the new one",
      () => Promise.resolve(leader.status().controller?.leader === "second"),
      30,
    );
    // A few of its renewal periods: it must not take the lease back nor write a delivery.
    await new Promise((r) => setTimeout(r, 5 * FAST_LEASE.renewEveryMs));
    assert.equal(leader.leading(), false);
    assert.equal(standby.leading(), true);
    await assert.rejects(leader.rotate("app1", "postgres-database"), NotLeaderError);
    assert.equal((await a.delivery())?.generation, before.a?.generation);
    assert.equal((await b.delivery())?.generation, before.b?.generation);
  });

  void it("applies a fleet change on the new leader, which reaches the node, and the old leader follows it", async () => {
    await fleet.writeFleet(WITH_APP4);
    await assert.rejects(leader.reload(), NotLeaderError, "the standby does not apply the fleet file");
    const outcome = await standby.reload();
    assert.equal(outcome.minted, 1);
    const delivery = await until(
      "app4 to reach node-a",
      async () => {
        const d = await a.delivery();
        return Object.hasOwn(d?.secrets ?? {}, "app4/postgres-database") ? d : undefined;
      },
      30,
    );
    assert.equal(delivery.term, 2);
    await until(
      "the old leader to show the new fleet",
      () => Promise.resolve(leader.current().modules.some((m) => m.name === "app4")),
      30,
    );
    assert.equal(leader.status().controller?.fleetTerm, 2);
  });
});
