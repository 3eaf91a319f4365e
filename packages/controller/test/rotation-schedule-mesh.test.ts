// Scheduled rotation through a real bus and controller: a consumer whose module says `rotate: {
// redis-namespace: { every: 4s } }` (accepted under the MESH_ROTATE_MIN test knob) gets new
// passwords by the schedule, each recorded as asked by the schedule; the fleet's default gives
// every other consumer a due time, which a restarted controller reads back from the bus unchanged.
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { until as untilSeen } from "@mesh/testkit";
import { reportSubject } from "@mesh/bus";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  copyStandbyState,
  loadOrCreateAuthority,
  saveAuthority,
  startController,
  type Controller,
} from "@mesh/controller";
import { FLEET_YAML, makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import {
  enrollNode,
  FAST_LEASE,
  recordingLogger,
  startTestMesh,
  type TestMesh,
  type TestNode,
} from "./test-mesh.ts";

process.env["MESH_ROTATE_MIN"] = "1s";

const SCHEDULED = `rotate: { every: 1h }\n${FLEET_YAML.replace(
  "  app3: { manifest: ./app3/module.json, node: node-b }\n",
  "  app3:\n    manifest: ./app3/module.json\n    node: node-b\n    rotate: { redis-namespace: { every: 4s } }\n",
)}`;

/** Polls every 100 ms for at most `seconds` (30 unless told). */
const until = <T>(
  what: string,
  get: () => Promise<T | undefined> | T | undefined,
  seconds = 30,
): Promise<T> => untilSeen(what, get, { seconds, everyMs: 100 });

function dueOf(controller: Controller, consumer: string, iface: string): string | undefined {
  return controller.status().consumers.find((c) => c.consumer === consumer && c.interface === iface)
    ?.rotationDue;
}

void describe("scheduled rotation through a mesh", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let controller: Controller;
  let b: TestNode;
  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    await fleet.writeFleet(SCHEDULED);
    controller = await mesh.startController(fleet.fleetFile);
    b = await enrollNode(await controller.joinToken("node-b"));
  });
  after(async () => {
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
  });

  // node-b as its agent would speak for the Redis provider: heard now (so a rotation it was asked
  // is over), and failing for `failing` logins.
  let failing: string[] = [];
  let reporting: NodeJS.Timeout | undefined;
  const report = (): void => {
    const now = new Date().toISOString();
    if (b.nc.isClosed()) return;
    b.nc.publish(
      reportSubject("node-b"),
      JSON.stringify({
        generation: 1,
        modules: [],
        providers: [
          {
            module: "redis",
            answered: true,
            askedAt: now,
            counts: {},
            failing: failing.map((login) => ({
              login,
              class: "unreachable",
              since: now,
              attempts: 3,
              error: "down",
            })),
          },
        ],
      }),
    );
  };
  after(() => clearInterval(reporting));
  const password = async (): Promise<string | undefined> => (await b.passwords())["app3/redis-namespace"];
  const changed = (from: string | undefined) => async () => {
    const now = await password();
    return now !== from ? now : undefined;
  };

  void it("rotates a consumer's password when due, holds the next while the last is under way or its provider fails for it, and the ledger says the schedule asked", async () => {
    const first = await password();
    assert.ok(first);
    const second = await until("a password rotated by the schedule", changed(first));
    // The provider is not heard after it: the rotation stays under way (asked), and the next waits.
    await new Promise((r) => setTimeout(r, 5000));
    assert.equal(await password(), second, "no rotation while the last one is under way");
    assert.ok(
      mesh.log.lines.some((l) => /app3's redis-namespace waits: a rotation of it is under way/.test(l)),
    );
    // Its provider says it fails for app3: still none.
    const login = controller.status().consumers.find((c) => c.consumer === "app3")?.login ?? "";
    failing = [login];
    report();
    reporting = setInterval(report, 300);
    await new Promise((r) => setTimeout(r, 5000));
    assert.equal(await password(), second, "no rotation while its provider fails for it");
    assert.ok(mesh.log.lines.some((l) => /app3's redis-namespace waits: redis says it fails for it/.test(l)));
    // Heard, and not failing: the schedule goes on.
    failing = [];
    const third = await until("the next scheduled rotation", changed(second));
    await until("one more, a period later", changed(third));
    clearInterval(reporting);
    const ledger = await controller.ledger("app3", 50);
    assert.ok(ledger.ok, JSON.stringify(ledger));
    const rotations = ledger.entries.filter((e) => JSON.stringify(e).includes('"via":"mesh rotate"'));
    const text = JSON.stringify(rotations);
    assert.ok(rotations.length >= 3, `three rotate entries in ${text}`);
    assert.ok(
      rotations.every((e) => /"who":"schedule"/.test(JSON.stringify(e))),
      text,
    );
    assert.match(text, /"consumer":"app3"/);
    for (const p of [first, second, third]) assert.ok(!text.includes(String(p)), "no password in the ledger");
    // The next due time is a period after the last rotation, as the status shows it.
    const due = Date.parse(dueOf(controller, "app3", "redis-namespace") ?? "");
    assert.ok(due > Date.now() - 1000 && due <= Date.now() + 4000, `due ${new Date(due).toISOString()}`);
  });

  void it("gives every consumer a due time within the first tenth of the fleet's period, which a restart keeps", async () => {
    const before = await until("app1's due time", () => dueOf(controller, "app1", "postgres-database"));
    const start = Date.now();
    assert.ok(Date.parse(before) - start <= 360_000, `within 6 minutes of now: ${before}`);
    await controller.stop();
    controller = await mesh.startController(fleet.fleetFile);
    const after = await until("app1's due time after the restart", () =>
      dueOf(controller, "app1", "postgres-database"),
    );
    assert.equal(after, before);
  });

  void it("keeps the due times across a take-over: a standby that leads reads them from the bus", async () => {
    const due = await until("app1's due time", () => dueOf(controller, "app1", "postgres-database"));
    const standbyDir = await mkdtemp(join(tmpdir(), "mesh-schedule-standby-"));
    try {
      await saveAuthority(mesh.stateDir, mesh.authority);
      await copyStandbyState(mesh.stateDir, standbyDir);
      const standby = await startController({
        stateDir: standbyDir,
        fleetFile: fleet.fleetFile,
        servers: [mesh.nats.url],
        authority: await loadOrCreateAuthority(standbyDir),
        logger: recordingLogger(),
        watch: false,
        controllerId: "standby",
        standby: true,
        leaseTimings: FAST_LEASE,
      });
      try {
        assert.equal(dueOf(standby, "app1", "postgres-database"), undefined, "a standby keeps no schedule");
        await controller.stop();
        await until("the standby to lead", () => (standby.leading() ? true : undefined), 60);
        const taken = await until("app1's due time at the new leader", () =>
          dueOf(standby, "app1", "postgres-database"),
        );
        assert.equal(taken, due);
      } finally {
        await standby.stop();
      }
    } finally {
      await rm(standbyDir, { recursive: true, force: true });
    }
  });
});
