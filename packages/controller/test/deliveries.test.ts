import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { nodeDeliveriesBucket, openState, SealError, unseal, type BusState } from "@mesh/bus";
import { DELIVERY_KEY, type Controller } from "@mesh/controller";
import { type DeliveryHead } from "@mesh/manifest";
import { FLEET_YAML, type FleetDir } from "./fleet-dir.ts";
import { startFleetMesh, type FleetMesh, type TestMesh, type TestNode } from "./test-mesh.ts";

void describe("the controller publishes each node's delivery", () => {
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

  void it("gives a node only the modules it runs and the consumers it provides for or runs", async () => {
    const da = await a.delivery();
    const db = await b.delivery();
    assert.ok(da && db);
    assert.equal(da.node, "node-a");
    assert.equal(da.fleetFile, fleet.fleetFile);
    assert.deepEqual(
      da.modules.map((m) => m.name),
      ["app1", "postgres"],
    );
    assert.ok(da.modules.every((m) => m.manifest.startsWith(fleet.dir)));
    // node-a provides Postgres: it gets the whole instance, app2 (on node-b) included.
    assert.deepEqual(
      da.plan.instances.map((i) => [i.provider, i.interface, i.consumers.map((c) => c.consumer)]),
      [["postgres", "postgres-database", ["app1", "app2"]]],
    );
    assert.deepEqual(Object.keys(da.secrets).sort(), ["app1/postgres-database", "app2/postgres-database"]);

    assert.deepEqual(
      db.modules.map((m) => m.name),
      ["app2", "app3", "redis"],
    );
    // node-b consumes Postgres through app2 only: it sees that entry, not app1's.
    assert.deepEqual(
      db.plan.instances.map((i) => [i.provider, i.interface, i.consumers.map((c) => c.consumer)]),
      [
        ["postgres", "postgres-database", ["app2"]],
        ["redis", "redis-namespace", ["app2", "app3"]],
      ],
    );
    assert.deepEqual(Object.keys(db.secrets).sort(), [
      "app2/postgres-database",
      "app2/redis-namespace",
      "app3/redis-namespace",
    ]);
  });

  void it("seals one password per consumer to each node that needs it, the same on both", async () => {
    const pa = await a.passwords();
    const pb = await b.passwords();
    assert.equal(pa["app2/postgres-database"], pb["app2/postgres-database"]);
    const all = new Set([...Object.values(pa), ...Object.values(pb)]);
    assert.equal(all.size, 4, "four consumers, four distinct passwords");
    for (const password of all) assert.match(password, /^[A-Za-z0-9_-]{32}$/);
  });

  void it("seals a secret so that another node's keys cannot open it", async () => {
    const da = await a.delivery();
    const box = da?.secrets["app1/postgres-database"];
    assert.ok(box);
    await assert.rejects(unseal(box, b.sealKeys), SealError);
  });

  void it("says no password and no join secret in its log", async () => {
    const secrets = [...Object.values(await a.passwords()), ...Object.values(await b.passwords())];
    const text = mesh.log.lines.join("\n");
    assert.ok(text.length > 0);
    for (const secret of secrets) assert.ok(!text.includes(secret), "a password appeared in the log");
    assert.ok(!text.includes((await controller.joinToken("node-a")).slice(0, 40)));
  });

  void it("answers status with the nodes, their enrollment and every consumer", () => {
    const status = controller.status();
    assert.deepEqual(
      status.nodes.map((n) => [n.name, n.enrolled]),
      [
        ["node-a", true],
        ["node-b", true],
      ],
    );
    assert.deepEqual(
      status.consumers.map((c) => [c.consumer, c.interface, c.login, c.provider, c.node]),
      [
        ["app1", "postgres-database", "app1_postgres", "postgres", "node-a"],
        ["app2", "postgres-database", "app2_postgres", "postgres", "node-b"],
        ["app2", "redis-namespace", "app2_redis", "redis", "node-b"],
        ["app3", "redis-namespace", "app3_redis", "redis", "node-b"],
      ],
    );
    assert.equal(status.fleet.refused, null);
  });

  void it("republishes nothing when the fleet is read again unchanged", async () => {
    const before = (await a.delivery())?.generation;
    const outcome = await controller.reload();
    assert.deepEqual(outcome.published, []);
    assert.equal(outcome.minted, 0);
    assert.equal((await a.delivery())?.generation, before);
  });

  // Revision of every key of a bucket: what was written since.
  const revisions = async (bucket: BusState<unknown>): Promise<Map<string, number>> => {
    const out = new Map<string, number>();
    for (const key of await bucket.keys()) out.set(key, (await bucket.entry(key))?.revision ?? 0);
    return out;
  };

  void it("stores a delivery as a head naming one key per module and per consumer entry, and a rotation rewrites only its own", async () => {
    const bucket = await openState<unknown>(b.nc, nodeDeliveriesBucket("node-b"), { create: false });
    const head = (await bucket.get(DELIVERY_KEY)) as DeliveryHead;
    assert.deepEqual(Object.keys(head.parts ?? {}), [
      "m.app2",
      "m.app3",
      "m.redis",
      "e.app2.postgres-database",
      "e.app2.redis-namespace",
      "e.app3.redis-namespace",
    ]);
    assert.ok(!("secrets" in head), "no sealed password in the head");
    const before = await revisions(bucket);
    await controller.rotate("app3", "redis-namespace");
    const after = await revisions(bucket);
    const rewritten = [...after].filter(([key, rev]) => before.get(key) !== rev).map(([key]) => key);
    assert.deepEqual(rewritten.sort(), [DELIVERY_KEY, "e.app3.redis-namespace"]);
    assert.equal((await b.delivery())?.generation, head.generation + 1);
  });

  void it("lets a node read its own parts and not another node's", async () => {
    const own = await openState<unknown>(a.nc, nodeDeliveriesBucket("node-a"), { create: false });
    assert.ok(await own.get("e.app1.postgres-database"));
    await assert.rejects(async () => {
      const other = await openState<unknown>(a.nc, nodeDeliveriesBucket("node-b"), { create: false });
      await other.get("e.app3.redis-namespace");
    }, /Permissions Violation|permission/i);
  });

  void it("deletes the parts of a consumer no longer delivered, after the head that no longer names them", async () => {
    const bucket = await openState<unknown>(b.nc, nodeDeliveriesBucket("node-b"), { create: false });
    await fleet.writeFleet(
      FLEET_YAML.replace("  app3: { manifest: ./app3/module.json, node: node-b }\n", ""),
    );
    await controller.reload();
    const keys = (await bucket.keys()).sort();
    assert.deepEqual(keys, [
      DELIVERY_KEY,
      "e.app2.postgres-database",
      "e.app2.redis-namespace",
      "m.app2",
      "m.redis",
    ]);
    const delivery = await b.delivery();
    assert.deepEqual(
      delivery?.modules.map((m) => m.name),
      ["app2", "redis"],
    );
    assert.deepEqual(Object.keys(delivery?.secrets ?? {}).sort(), [
      "app2/postgres-database",
      "app2/redis-namespace",
    ]);
  });
});
