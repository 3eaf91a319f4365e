// The fleet lives in the bus as revisions: every controller serves the newest stored one, and a
// controller that takes over serves what was last applied, never a fleet file of its own (which may
// be stale, or at another path, or missing). An apply planned against an older revision is refused.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import {
  copyStandbyState,
  loadFleetPlan,
  loadOrCreateAuthority,
  saveAuthority,
  startController,
  type Controller,
  type FleetSource,
} from "@mesh/controller";
import { StaleRevisionError, type FleetController } from "../src/fleet-controller.ts";
import { FLEET_YAML, makeFleetDir, WITH_APP4, type FleetDir } from "./fleet-dir.ts";
import {
  enrollNode,
  FAST_LEASE,
  recordingLogger,
  startTestMesh,
  type RecordingLogger,
  type TestMesh,
  type TestNode,
} from "./test-mesh.ts";

/** The fleet without app3 (a live Redis consumer on node-b). */
const WITHOUT_APP3 = FLEET_YAML.split("\n")
  .filter((l) => !l.includes("app3"))
  .join("\n");

async function sourceOf(fleet: FleetDir): Promise<FleetSource> {
  const plan = await loadFleetPlan(fleet.fleetFile, { reuse: false });
  assert.ok(plan.source !== undefined);
  return plan.source;
}

for (const standbyFile of ["a stale file at another path", "no file"] as const) {
  void describe(`two controllers, the standby's machine holding ${standbyFile}`, () => {
    let mesh: TestMesh;
    let fleet: FleetDir;
    let staleFleet: FleetDir;
    let standbyDir: string;
    let leader: FleetController;
    let standby: FleetController;
    let standbyLog: RecordingLogger;
    let a: TestNode;
    let b: TestNode;
    let resume: (() => void) | undefined;
    const started: Controller[] = [];

    before(async () => {
      mesh = await startTestMesh();
      fleet = await makeFleetDir();
      staleFleet = await makeFleetDir();
      await staleFleet.writeFleet(WITHOUT_APP3);
      standbyDir = await mkdtemp(join(tmpdir(), "mesh-revisions-standby-"));
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
      await until(
        "node-b's delivery with app3",
        async () => Object.hasOwn((await b.delivery())?.secrets ?? {}, "app3/redis-namespace"),
        30,
      );
      await saveAuthority(mesh.stateDir, mesh.authority);
      await copyStandbyState(mesh.stateDir, standbyDir);
      standbyLog = recordingLogger();
      standby = (await startController({
        stateDir: standbyDir,
        ...(standbyFile === "no file" ? {} : { fleetFile: staleFleet.fleetFile }),
        servers: [mesh.nats.url],
        authority: await loadOrCreateAuthority(standbyDir),
        logger: standbyLog,
        watch: true,
        controllerId: "second",
        standby: true,
        leaseTimings: FAST_LEASE,
      })) as FleetController;
      started.push(standby);
    });
    after(async () => {
      resume?.();
      await Promise.all(started.map((c) => c.stop()));
      await mesh.stop();
      for (const dir of [fleet.dir, staleFleet.dir, standbyDir])
        await rm(dir, { recursive: true, force: true });
    });

    void it("takes over twice and no consumer is revoked or dropped: each take-over serves what was last applied", async () => {
      assert.equal(leader.revision(), 1, "the leader's file is the first revision");
      assert.ok(
        standby.current().modules.some((m) => m.name === "app3"),
        "the standby follows the stored fleet",
      );
      const before = { a: await a.passwords(), b: await b.passwords() };

      // First take-over: the standby leads and serves revision 1, not its own file.
      resume = leader.pause();
      await until("the standby to lead", () => Promise.resolve(standby.leading()), 30);
      const inTerm2 = await until(
        "node-b's delivery in term 2",
        async () => {
          const d = await b.delivery();
          return d?.term === 2 ? d : undefined;
        },
        30,
      );
      assert.ok(Object.hasOwn(inTerm2.secrets, "app3/redis-namespace"), "app3 is still delivered");
      assert.equal(standby.revision(), 1);
      assert.deepEqual(await b.passwords(), before.b, "node-b's passwords unchanged");

      // The new leader applies a change (as mesh apply would): revision 2 with app4.
      await fleet.writeFleet(WITH_APP4);
      const applied = await standby.apply({
        source: await sourceOf(fleet),
        expectRevision: 1,
        who: "tester",
        via: "mesh apply",
      });
      assert.equal(applied.revision, 2);
      assert.equal(applied.minted, 1);
      // A stale apply (planned against revision 1) is refused, naming both revisions.
      await fleet.writeFleet(FLEET_YAML);
      await assert.rejects(
        standby.apply({ source: await sourceOf(fleet), expectRevision: 1, who: "tester", via: "mesh apply" }),
        (err: unknown) =>
          err instanceof StaleRevisionError &&
          err.expected === 1 &&
          err.stored === 2 &&
          /revision 1/.test(err.message) &&
          /revision 2/.test(err.message),
      );

      // Second take-over: the first leader (its file without app4) leads again and serves revision 2.
      const resumeLeader = resume;
      resume = standby.pause();
      resumeLeader();
      await until("the first controller to lead again", () => Promise.resolve(leader.leading()), 30);
      const inTerm3 = await until(
        "node-a's delivery in term 3",
        async () => {
          const d = await a.delivery();
          return (d?.term ?? 0) >= 3 ? d : undefined;
        },
        30,
      );
      assert.ok(Object.hasOwn(inTerm3.secrets, "app4/postgres-database"), "app4 is still delivered");
      assert.ok(Object.hasOwn((await b.delivery())?.secrets ?? {}, "app3/redis-namespace"));
      assert.equal(leader.revision(), 2);
      const afterA = await a.passwords();
      for (const [key, password] of Object.entries(before.a)) assert.equal(afterA[key], password, key);
      for (const line of [...mesh.log.lines, ...standbyLog.lines])
        assert.doesNotMatch(line, /no longer runs on node|revoked/, "no module's credentials revoked");

      const history = await leader.history();
      assert.deepEqual(
        history.map((h) => [h.revision, h.who, h.via]),
        [
          [1, history[0]?.who, "fleet file"],
          [2, "tester", "mesh apply"],
        ],
      );
      assert.match(history[1]?.summary ?? "", /1 consumer\(s\) added/);
    });
  });
}
