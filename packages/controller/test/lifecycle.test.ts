import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { closeBus, ensureLedger, readLedger } from "@mesh/bus";
import { until } from "@mesh/testkit";
import { after, before, describe, it } from "node:test";
import { type Controller } from "@mesh/controller";
import { CONTROLLER_KEYS_FILE } from "../src/controller-keys.ts";
import { FleetRefusedError } from "../src/fleet-plan.ts";
import { UnknownConsumerError } from "../src/fleet-controller.ts";
import { FLEET_YAML, WITH_APP4, type FleetDir } from "./fleet-dir.ts";
import { connectAsAdmin, startFleetMesh, type FleetMesh, type TestMesh, type TestNode } from "./test-mesh.ts";

void describe("the controller across restarts, rotations and bad fleet files", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let controller: Controller;
  let a: TestNode;
  let b: TestNode;
  let setup: FleetMesh<["node-a", "node-b"]>;
  before(async () => {
    setup = await startFleetMesh(["node-a", "node-b"]);
    ({ mesh, fleet, controller } = setup);
    [a, b] = setup.nodes;
  });
  after(() => setup.stop());

  void it("re-mints nothing and republishes nothing when restarted", async () => {
    const before = {
      a: await a.delivery(),
      b: await b.delivery(),
      pa: await a.passwords(),
      pb: await b.passwords(),
    };
    const token = await controller.joinToken("node-a");
    await controller.stop();
    controller = await mesh.startController(fleet.fleetFile);
    assert.equal((await a.delivery())?.generation, before.a?.generation);
    assert.equal((await b.delivery())?.generation, before.b?.generation);
    assert.deepEqual(await a.passwords(), before.pa);
    assert.deepEqual(await b.passwords(), before.pb);
    assert.equal(await controller.joinToken("node-a"), token, "the same join token after a restart");
    const outcome = await controller.reload();
    assert.equal(outcome.minted, 0);
    assert.deepEqual(outcome.published, []);
  });

  void it("rotates exactly one password and republishes it to both nodes that hold it", async () => {
    const pa = await a.passwords();
    const pb = await b.passwords();
    const ga = (await a.delivery())?.generation ?? 0;
    await controller.rotate("app2", "postgres-database");
    const na = await a.passwords();
    const nb = await b.passwords();
    assert.notEqual(na["app2/postgres-database"], pa["app2/postgres-database"]);
    assert.equal(na["app2/postgres-database"], nb["app2/postgres-database"]);
    assert.deepEqual({ ...na, "app2/postgres-database": "x" }, { ...pa, "app2/postgres-database": "x" });
    assert.deepEqual({ ...nb, "app2/postgres-database": "x" }, { ...pb, "app2/postgres-database": "x" });
    assert.equal((await a.delivery())?.generation, ga + 1);
    await assert.rejects(controller.rotate("app9", "postgres-database"), UnknownConsumerError);
  });

  void it("records a rotation, who asked and when, in the consumer's ledger and its provider's, never the password", async () => {
    const admin = await connectAsAdmin(mesh.authority, mesh.nats.url, "ledger-reader");
    try {
      // What the controller makes for each module once its node reports its keys.
      for (const module of ["app1", "postgres"]) await ensureLedger(admin, module);
      const asked = Date.now();
      const done = await controller.rotate("app1", "postgres-database", "alice");
      assert.deepEqual(
        done,
        { login: "app1_postgres", provider: "postgres", tag: done.tag },
        "both records written: what was rotated, with the new password's tag and no wait",
      );
      assert.equal(typeof done.tag, "string");
      const password = (await a.passwords())["app1/postgres-database"];
      assert.ok(password !== undefined && password.length > 10);
      for (const module of ["app1", "postgres"]) {
        const [record] = await readLedger(admin, module, { limit: 1, kind: "rotate" });
        assert.ok(record, `the rotation is in ${module}'s ledger`);
        const { at, ...entry } = record.entry;
        assert.ok(Date.parse(String(at)) >= asked - 1_000, "it says when");
        assert.deepEqual(entry, {
          kind: "rotate",
          consumer: "app1",
          interface: "postgres-database",
          provider: "postgres",
          login: "app1_postgres",
          who: "alice",
          via: "mesh rotate",
          ok: true,
        });
        assert.ok(!JSON.stringify(record).includes(password), "no password in the ledger");
      }
      // A rotation refused is recorded too, where the fleet has the consumer.
      await assert.rejects(controller.rotate("app1", "no-such-interface", "bob"), UnknownConsumerError);
      const refused = await until("the refused rotation recorded", async () => {
        const [last] = await readLedger(admin, "app1", { limit: 1, kind: "rotate" });
        return last?.entry["who"] === "bob" ? last : undefined;
      });
      assert.equal(refused?.entry["ok"], false);
      assert.match(String(refused?.entry["error"]), /app1 has no no-such-interface/);
    } finally {
      await closeBus(admin);
    }
  });

  void it("refuses a bad fleet file with every problem listed, and keeps serving the last good one", async () => {
    const before = { a: await a.delivery(), b: await b.delivery() };
    const broken = FLEET_YAML.replace(
      "app3: { manifest: ./app3/module.json, node: node-b }",
      "app3: { manifest: ./app3/module.json, node: node-z }",
    ).replace("redis: { manifest: ./redis/module.json, node: node-b }", "");
    await fleet.writeFleet(broken);
    await assert.rejects(controller.reload(), (err: unknown) => {
      assert.ok(err instanceof FleetRefusedError);
      assert.match(err.message, /keeps serving the last good fleet/);
      assert.match(err.message, /node-z/);
      assert.match(err.message, /no module of this fleet provides it/);
      assert.ok(err.problems.length >= 2);
      return true;
    });
    assert.deepEqual(await a.delivery(), before.a);
    assert.deepEqual(await b.delivery(), before.b);
    assert.ok((controller.status().fleet.refused ?? []).some((line) => line.includes("node-z")));

    await fleet.writeFleet("nodes: [\n");
    await assert.rejects(controller.reload(), /is not valid YAML/);
    await fleet.writeFleet(FLEET_YAML.replace("./app1/module.json", "./nowhere/module.json"));
    await assert.rejects(controller.reload(), FleetRefusedError);
    assert.deepEqual(await b.delivery(), before.b);
  });

  void it("keeps serving the last good fleet when restarted while the fleet file is bad", async () => {
    const before = await a.delivery();
    await fleet.writeFleet("modules: {}\n");
    await controller.stop();
    controller = await mesh.startController(fleet.fleetFile);
    assert.deepEqual(await a.delivery(), before);
    assert.ok(controller.status().fleet.refused !== null);
    assert.ok(
      mesh.log.lines.some((l) => l.startsWith("error:") && l.includes("keeps serving the last good fleet")),
    );
  });

  void it("reads the fleet file again when it changes, and a fixed file is served", async () => {
    await controller.stop();
    await fleet.writeFleet(FLEET_YAML);
    controller = await mesh.startController(fleet.fleetFile, { watch: true });
    const generation = (await a.delivery())?.generation ?? 0;
    await fleet.writeFleet("nodes: [\n");
    await until(
      "the broken fleet file to be refused",
      () => Promise.resolve(controller.status().fleet.refused !== null),
      30,
    );
    assert.equal((await a.delivery())?.generation, generation);
    await fleet.writeFleet(WITH_APP4);
    await until(
      "app4 to reach node-a",
      async () => Object.hasOwn((await a.delivery())?.secrets ?? {}, "app4/postgres-database"),
      30,
    );
    assert.equal(controller.status().fleet.refused, null);
    // node-b neither runs app4 nor provides for it.
    assert.ok(!Object.hasOwn((await b.delivery())?.secrets ?? {}, "app4/postgres-database"));
  });

  void it("mints new passwords when its own key is lost, and loses nothing else", async () => {
    const before = await a.passwords();
    await controller.stop();
    await rm(join(mesh.stateDir, CONTROLLER_KEYS_FILE));
    controller = await mesh.startController(fleet.fleetFile);
    const after = await a.passwords();
    assert.deepEqual(Object.keys(after).sort(), Object.keys(before).sort());
    for (const key of Object.keys(before)) assert.notEqual(after[key], before[key]);
    assert.ok(mesh.log.lines.some((l) => l.includes("cannot be opened with this controller's key")));
  });

  void it("says no password in its log through restarts, rotations, refusals and a lost key", async () => {
    const passwords = [...Object.values(await a.passwords()), ...Object.values(await b.passwords())];
    assert.ok(passwords.length > 0);
    const text = mesh.log.lines.join("\n");
    for (const password of passwords) assert.ok(!text.includes(password), "a password appeared in the log");
  });
});
