// The served fleet kept in the desired-state bucket, on a real nats-server: a fleet larger than
// one NATS message is kept in parts and read back whole, and a writing cut off halfway is never read.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { connectBus, createAuthority, credsFor, newUserKeys, openState, type BusState } from "@mesh/bus";
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { loadStoredFleet, type FleetPlan } from "@mesh/controller";
import { loadStoredFleetHead, storeFleet, STORED_FLEET_KEY } from "../src/stored-fleet.ts";

/** A fleet plan of `n` consumers of one provider: its JSON grows with `n` as a real one does. */
function bigFleet(n: number, readAt: string): FleetPlan {
  const consumers = Array.from({ length: n }, (_, i) => ({
    module: `app${i}`,
    login: `app${i}_postgres`,
    node: `node-${i % 20}`,
    values: { extensions: ["pgcrypto"] },
  }));
  return {
    fleetFile: "/etc/mesh/mesh.yaml",
    readAt,
    nodes: Array.from({ length: 20 }, (_, i) => `node-${i}`),
    modules: [],
    plan: { instances: [{ instance: "postgres", interface: "postgres-database", consumers }] },
  } as unknown as FleetPlan;
}

describe("the stored fleet", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let state: BusState<unknown>;
  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "controller",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    nc = await connectBus({ servers: nats.url, creds: credsFor(jwt, keys.seed), name: "controller" });
    state = await openState(nc, "desired-test");
  });
  after(async () => {
    await nc?.close();
    await nats?.stop();
  });

  it("keeps a fleet larger than one NATS message in parts, and reads it back whole", async () => {
    const fleet = bigFleet(20_000, "2026-12-01T00:00:00.000Z");
    assert.ok(JSON.stringify(fleet).length > (nc.info?.max_payload ?? 0), "larger than one message");
    await storeFleet(state, fleet);
    assert.deepEqual(await loadStoredFleet(state), fleet);
    const smaller = bigFleet(10, "2026-12-01T00:01:00.000Z");
    const head = await storeFleet(state, smaller, { term: 4 });
    assert.deepEqual(await loadStoredFleet(state), smaller);
    assert.deepEqual(head, await loadStoredFleetHead(state), "it answers the head it stored");
    assert.equal(head.term, 4);
    const parts = (await state.keys()).filter((k) => k.startsWith(`${STORED_FLEET_KEY}.`));
    assert.equal(parts.length, 1, "the earlier writing's parts are removed");
  });

  it("never reads a writing cut off before its head: the fleet stored before stays", async () => {
    const kept = bigFleet(5, "2026-12-01T00:02:00.000Z");
    await storeFleet(state, kept);
    await state.put(`${STORED_FLEET_KEY}.zzz.0`, '{"half":');
    assert.deepEqual(await loadStoredFleet(state), kept);
  });

  // Only get, put and delete: listing the bucket's keys makes a JetStream consumer, which a cluster
  // may place on a server that has just gone down, and a fleet change would wait for it.
  const byName = (): Pick<BusState<unknown>, "get" | "put" | "delete"> => ({
    get: (key) => state.get(key),
    put: (key, value) => state.put(key, value),
    delete: (key) => state.delete(key),
  });
  const storedParts = async (): Promise<string[]> =>
    (await state.keys()).filter((k) => k.startsWith(`${STORED_FLEET_KEY}.`)).sort();

  it("removes, by name, the parts of a writing cut short before its head, and never lists the bucket", async () => {
    await storeFleet(byName(), bigFleet(5, "2026-12-01T00:03:00.000Z"));
    for (const k of await storedParts()) if (k.startsWith(`${STORED_FLEET_KEY}.zzz.`)) await state.delete(k);
    const whole = await storedParts();
    // A controller killed after two parts of its writing, before the head.
    await state.put(`${STORED_FLEET_KEY}-writing`, { generation: "cut", parts: 3 });
    await state.put(`${STORED_FLEET_KEY}.cut.0`, "a");
    await state.put(`${STORED_FLEET_KEY}.cut.1`, "b");
    const next = bigFleet(6, "2026-12-01T00:04:00.000Z");
    await storeFleet(byName(), next);
    assert.deepEqual(await loadStoredFleet(state), next);
    const now = await storedParts();
    assert.equal(now.length, 1, `one writing's parts are left: ${now.join(", ")}`);
    assert.ok(!whole.includes(now[0] ?? ""), "the new writing's, not the one it replaced");
  });

  it("removes the parts a whole writing replaced when it was cut short before removing them", async () => {
    await storeFleet(byName(), bigFleet(7, "2026-12-01T00:05:00.000Z"));
    const [replaced] = await storedParts();
    assert.ok(replaced !== undefined);
    const generation = replaced.split(".")[1] ?? "";
    // The next writing stored its head and was killed before it removed the parts it replaced.
    await state.put(`${STORED_FLEET_KEY}-writing`, {
      generation: "done",
      parts: 1,
      replaces: { generation, parts: 1 },
    });
    await state.put(`${STORED_FLEET_KEY}.done.0`, JSON.stringify(bigFleet(8, "2026-12-01T00:06:00.000Z")));
    const head = (await state.get(STORED_FLEET_KEY)) as Record<string, unknown>;
    await state.put(STORED_FLEET_KEY, { ...head, generation: "done" });
    const next = bigFleet(9, "2026-12-01T00:07:00.000Z");
    await storeFleet(byName(), next);
    assert.deepEqual(await loadStoredFleet(state), next);
    const now = await storedParts();
    assert.equal(now.length, 1, `one writing's parts are left: ${now.join(", ")}`);
    assert.ok(!now.includes(replaced) && !now.includes(`${STORED_FLEET_KEY}.done.0`));
  });

  it("still reads a fleet stored in one value, as earlier controllers kept it", async () => {
    const old = bigFleet(3, "2026-11-30T00:00:00.000Z");
    await state.put(STORED_FLEET_KEY, old);
    assert.deepEqual(await loadStoredFleet(state), old);
  });
});
