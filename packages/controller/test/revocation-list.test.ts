import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  closeBus,
  createAuthority,
  loadAuthority,
  newUserKeys,
  openState,
  type BusAuthority,
  type BusState,
} from "@mesh/bus";
import { REVOCATIONS_KEY, syncRevocations } from "../src/revocation-list.ts";
import { startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAsController } from "./test-mesh.ts";

void describe("the revocation list kept on the bus", () => {
  let authority: BusAuthority;
  let nats: NatsServer;
  let nc: NatsConnection;
  let desired: BusState<unknown>;

  before(async () => {
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    nc = await connectAsController(authority, nats.url);
    desired = await openState<unknown>(nc, "mesh-revocations-test");
  });
  after(async () => {
    await closeBus(nc);
    await nats.stop();
  });

  void it("gives a controller with an older copy of the authority every revocation stored, before it pushes", async () => {
    // The standby's copy of the authority, taken before the leader revoked anything.
    const older = await loadAuthority(authority.exportSeeds(), authority.revocations);
    const first = newUserKeys().publicKey;
    await authority.revokeUser(first);
    await syncRevocations(desired, authority);
    assert.deepEqual(await desired.get(REVOCATIONS_KEY), authority.revocations);

    const second = newUserKeys().publicKey;
    await older.revokeUser(second);
    await syncRevocations(desired, older);
    assert.deepEqual(
      Object.keys(older.revocations).sort(),
      [first, second].sort(),
      "the older copy adopts the first",
    );
    assert.deepEqual(await desired.get(REVOCATIONS_KEY), older.revocations, "and the list stored holds both");

    await syncRevocations(desired, authority);
    assert.deepEqual(authority.revocations, older.revocations, "the leader of before adopts the second");
  });
});
