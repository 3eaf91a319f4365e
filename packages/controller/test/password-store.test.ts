// A rotation the bus did not confirm: the controller keeps the old password, and the restore it
// is handed puts the old one back over a new one that the bus committed late.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { newNodeKeys, unseal, type BusState } from "@mesh/bus";
import { BusCannotStoreError, PasswordStore, type SealedPassword } from "@mesh/controller";

const quiet = { info: () => {}, warn: () => {}, error: () => {} };

// A bucket in memory whose next put stores the value and then fails, as a write does that a
// server without quorum kept in its log and committed once its peers came back.
function lateLandingBucket(): { state: BusState<SealedPassword>; failNextPut: () => void } {
  const values = new Map<string, { revision: number; value: SealedPassword }>();
  let revision = 0;
  let fail = false;
  const put = (key: string, value: SealedPassword): number => {
    values.set(key, { revision: ++revision, value });
    return revision;
  };
  const state: BusState<SealedPassword> = {
    bucket: "mesh-sealed",
    get: async (key) => values.get(key)?.value,
    put: async (key, value) => {
      const stored = put(key, value);
      if (fail) {
        fail = false;
        throw new Error("TimeoutError: timeout");
      }
      return stored;
    },
    delete: async (key) => void values.delete(key),
    entry: async (key) => values.get(key),
    update: async (key, value) => put(key, value),
    keys: async () => [...values.keys()],
    watch: () => Promise.reject(new Error("not used here")),
  };
  return { state, failNextPut: () => (fail = true) };
}

void describe("PasswordStore.rotate when the bus does not confirm", () => {
  void it("keeps the old password, and its restore puts the old one back over the late one", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const store = PasswordStore.over(bucket.state, keys, quiet);
    const first = await store.ensure("notes", "postgres-database");

    bucket.failNextPut();
    const refused = await store.rotate("notes", "postgres-database").catch((err: unknown) => err);
    assert.ok(refused instanceof BusCannotStoreError, String(refused));
    assert.match(refused.message, /the bus cannot store it now; nothing changed, try again/);
    assert.deepEqual(await store.ensure("notes", "postgres-database"), first, "memory keeps the old one");
    const late = await bucket.state.get("notes/postgres-database");
    assert.notEqual(late?.version, first.version, "the new one landed late in the bus");

    await refused.restore();
    const restored = await bucket.state.get("notes/postgres-database");
    assert.equal(restored?.version, first.version);
    assert.equal(await unseal(restored?.sealed ?? "", keys), first.password);
    // Read again by a controller that starts now, it is the old password.
    const fresh = PasswordStore.over(bucket.state, keys, quiet);
    assert.deepEqual(await fresh.ensure("notes", "postgres-database"), first);
  });

  void it("a restore run after a later rotation was stored leaves that rotation standing", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const store = PasswordStore.over(bucket.state, keys, quiet);
    await store.ensure("notes", "postgres-database");
    bucket.failNextPut();
    const refused = (await store
      .rotate("notes", "postgres-database")
      .catch((err: unknown) => err)) as BusCannotStoreError;
    const later = await store.rotate("notes", "postgres-database");
    await refused.restore();
    assert.equal((await bucket.state.get("notes/postgres-database"))?.version, later.version);
  });
});
