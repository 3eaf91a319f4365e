import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DeliveryPartsError,
  entryPartKey,
  nameParts,
  modulePartKey,
  partFingerprint,
  readDelivery,
  type DeliveryHead,
  type DeliveryPart,
  type PartCache,
  type PlanEntry,
} from "@mesh/manifest";
import { INDEX_CHUNK, joinDelivery } from "../src/delivery-parts.ts";

const entry = (consumer: string): PlanEntry => ({
  consumer,
  consumerNode: "n1",
  interface: "postgres-database",
  login: `${consumer}_postgres`,
  values: {},
  derived: {},
  provider: "postgres",
  providerNode: "n1",
});

const parts = (version: string): Map<string, DeliveryPart> =>
  new Map<string, DeliveryPart>([
    [
      modulePartKey("postgres"),
      { kind: "module", module: { name: "postgres", manifest: "/m/postgres.json" } },
    ],
    [modulePartKey("app1"), { kind: "module", module: { name: "app1", manifest: "/m/app1.json" } }],
    [
      entryPartKey("app1", "postgres-database"),
      { kind: "entry", entry: entry("app1"), version, sealPublicKey: "K", box: `box-${version}` },
    ],
    [
      entryPartKey("app2", "postgres-database"),
      { kind: "entry", entry: entry("app2"), version: "v9", sealPublicKey: "K", box: "box-app2" },
    ],
  ]);

const headOf = (stored: Map<string, DeliveryPart>, generation = 1): DeliveryHead => ({
  node: "n1",
  generation,
  fleetFile: "/fleet/mesh.yaml",
  instances: [{ provider: "postgres", node: "n1", interface: "postgres-database" }],
  parts: Object.fromEntries([...stored].map(([key, part]) => [key, partFingerprint(part)])),
  issuesCredentials: true,
});

describe("a delivery stored as a head and parts", () => {
  it("assembles the delivery the head names, in its order", async () => {
    const stored = parts("v1");
    const read = await readDelivery(headOf(stored), async (key) => stored.get(key));
    assert.ok(read.delivery);
    assert.deepEqual(
      read.delivery.modules.map((m) => m.name),
      ["postgres", "app1"],
    );
    assert.deepEqual(
      read.delivery.plan.instances[0]?.consumers.map((c) => c.consumer),
      ["app1", "app2"],
    );
    assert.deepEqual(read.delivery.secrets, {
      "app1/postgres-database": "box-v1",
      "app2/postgres-database": "box-app2",
    });
  });

  it("says when each password was minted, for the entries whose part says it (none for a part of before)", async () => {
    const stored = parts("v1");
    const key = entryPartKey("app1", "postgres-database");
    stored.set(key, {
      ...(stored.get(key) as DeliveryPart & { kind: "entry" }),
      minted: "2026-12-02T10:04:31.118Z",
    });
    const read = await readDelivery(headOf(stored), async (k) => stored.get(k));
    assert.deepEqual(read.delivery?.minted, { "app1/postgres-database": "2026-12-02T10:04:31.118Z" });
    const none = await readDelivery(headOf(parts("v1")), async (k) => parts("v1").get(k));
    assert.equal(none.delivery?.minted, undefined);
  });

  it("waits, assembling nothing, while a part the head names is not there", async () => {
    const stored = parts("v1");
    const head = headOf(stored);
    stored.delete(entryPartKey("app2", "postgres-database"));
    const read = await readDelivery(head, async (key) => stored.get(key));
    assert.equal(read.delivery, undefined);
    assert.deepEqual(read.waiting, ["e.app2.postgres-database"]);
  });

  it("waits while a part is still the one of before (its fingerprint is not the head's)", async () => {
    const head = headOf(parts("v2"), 2);
    const old = parts("v1");
    const read = await readDelivery(head, async (key) => old.get(key));
    assert.deepEqual(read.waiting, ["e.app1.postgres-database"]);
  });

  it("reads again only the parts whose fingerprint changed", async () => {
    const cache: PartCache = new Map();
    const first = parts("v1");
    await readDelivery(headOf(first), async (key) => first.get(key), cache);
    const second = parts("v2");
    const asked: string[] = [];
    const read = await readDelivery(
      headOf(second, 2),
      async (key) => {
        asked.push(key);
        return second.get(key);
      },
      cache,
    );
    assert.deepEqual(asked, ["e.app1.postgres-database"]);
    assert.equal(read.delivery?.secrets["app1/postgres-database"], "box-v2");
  });

  it("a box resealed for the same password version keeps the part's fingerprint", () => {
    const [, , [, a] = []] = [...parts("v1")];
    assert.ok(a && a.kind === "entry");
    assert.equal(partFingerprint(a), partFingerprint({ ...a, box: "another box" }));
    assert.notEqual(partFingerprint(a), partFingerprint({ ...a, version: "v2" }));
  });

  it("refuses an entry for an instance the head does not list", () => {
    const stored = parts("v1");
    const head = { ...headOf(stored), instances: [] };
    assert.throws(() => joinDelivery(head, stored), DeliveryPartsError);
  });

  it("takes a whole delivery of before as it is", async () => {
    const whole = {
      node: "n1",
      generation: 3,
      fleetFile: "/f",
      modules: [],
      plan: { instances: [] },
      secrets: {},
    };
    const read = await readDelivery(whole, () => Promise.reject(new Error("no part is read")));
    assert.equal(read.delivery, whole);
  });
  it("a node with more parts than one head names has them listed in indexes, and the head stays small", async () => {
    const stored = new Map<string, unknown>();
    const many: [string, string][] = [];
    for (let n = 0; n < 2 * INDEX_CHUNK + 5; n++) {
      const part: DeliveryPart = {
        kind: "entry",
        entry: entry(`app${n}`),
        version: "v1",
        sealPublicKey: "K",
        box: `box-${n}`,
      };
      const key = entryPartKey(`app${n}`, "postgres-database");
      stored.set(key, part);
      many.push([key, partFingerprint(part)]);
    }
    const { named, indexes } = nameParts(many);
    assert.equal(named.parts, undefined);
    assert.equal(indexes.length, 3);
    const head: DeliveryHead = { ...headOf(new Map()), parts: undefined, ...named };
    assert.ok(JSON.stringify(head).length < 1_000, "the head names three indexes, not 2,053 parts");

    // An index not written yet: nothing is assembled, and the index is what it waits for.
    for (const i of indexes.slice(0, 2)) stored.set(i.key, i.part);
    const cache: PartCache = new Map();
    const early = await readDelivery(head, async (key) => stored.get(key), cache);
    assert.deepEqual(early.waiting, [indexes[2]!.key]);

    stored.set(indexes[2]!.key, indexes[2]!.part);
    let reads = 0;
    const read = await readDelivery(
      head,
      async (key) => {
        reads++;
        return stored.get(key);
      },
      cache,
    );
    assert.equal(read.delivery?.plan.instances[0]?.consumers.length, 2 * INDEX_CHUNK + 5);
    assert.equal(read.delivery?.secrets["app2052/postgres-database"], "box-2052");
    assert.equal(reads, 1 + 2 * INDEX_CHUNK + 5, "the two indexes read before came from the cache");

    // An index that does not match the head's fingerprint (a publish that stopped before its head)
    // is waited for, not trusted.
    stored.set(indexes[0]!.key, { kind: "index", parts: {} });
    const stale = await readDelivery(head, async (key) => stored.get(key));
    assert.deepEqual(stale.waiting, [indexes[0]!.key]);
  });
});
