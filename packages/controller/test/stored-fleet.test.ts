// The served fleet kept in the desired-state bucket, on a real nats-server: a fleet larger than
// one NATS message is kept in parts and read back whole, and a writing cut off halfway is never read.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { connectBus, createAuthority, credsFor, newUserKeys, openState, type BusState } from "@mesh/bus";
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { loadStoredFleet, storeFleet, STORED_FLEET_KEY, type FleetPlan } from "@mesh/controller";

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
    await storeFleet(state, smaller);
    assert.deepEqual(await loadStoredFleet(state), smaller);
    const parts = (await state.keys()).filter((k) => k.startsWith(`${STORED_FLEET_KEY}.`));
    assert.equal(parts.length, 1, "the earlier writing's parts are removed");
  });

  it("never reads a writing cut off before its head: the fleet stored before stays", async () => {
    const kept = bigFleet(5, "2026-12-01T00:02:00.000Z");
    await storeFleet(state, kept);
    await state.put(`${STORED_FLEET_KEY}.zzz.0`, '{"half":');
    assert.deepEqual(await loadStoredFleet(state), kept);
  });

  it("still reads a fleet stored in one value, as earlier controllers kept it", async () => {
    const old = bigFleet(3, "2026-11-30T00:00:00.000Z");
    await state.put(STORED_FLEET_KEY, old);
    assert.deepEqual(await loadStoredFleet(state), old);
  });
});
