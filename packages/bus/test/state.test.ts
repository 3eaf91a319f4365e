import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  inboxPrefix,
  inboxSubjects,
  openState,
  StateOpenError,
  StateValueError,
  type StateChange,
} from "@mesh/bus";
import { InvalidBucketNameError } from "../src/subjects.ts";
import { InvalidStateKeyError } from "../src/state.ts";
import { listKeys } from "../src/state.ts";
import { EVERYTHING, startBusServer, untilItWorks, type BusServer } from "./bus-server.ts";

interface Sealed {
  readonly box: string;
  readonly nodes: readonly string[];
}

const isSealed = (value: unknown): Sealed => {
  const v = value as Partial<Sealed> | null;
  if (typeof v?.box !== "string" || !Array.isArray(v.nodes)) throw new Error("not a sealed entry");
  return v as Sealed;
};

void describe("openState", () => {
  let bus: BusServer;
  let nc: NatsConnection;
  before(async () => {
    bus = await startBusServer();
    nc = await bus.connectAs("controller", EVERYTHING);
  });
  after(async () => {
    await bus.stop();
  });

  void it("puts, gets, lists and deletes JSON values", async () => {
    const state = await openState<Sealed>(nc, "mesh-sealed", { parse: isSealed });
    assert.equal(await state.get("app.postgres-database"), undefined);
    await state.put("app.postgres-database", { box: "b1", nodes: ["n1"] });
    await state.put("app.redis-namespace", { box: "b2", nodes: ["n1", "n2"] });
    assert.deepEqual(await state.get("app.postgres-database"), { box: "b1", nodes: ["n1"] });
    assert.deepEqual((await state.keys()).sort(), ["app.postgres-database", "app.redis-namespace"]);
    await state.delete("app.redis-namespace");
    await state.delete("never-there");
    assert.equal(await state.get("app.redis-namespace"), undefined);
    assert.deepEqual(await state.keys(), ["app.postgres-database"]);
  });

  void it("reads every value in one pass: the last of each key, none deleted, a bad one as its error", async () => {
    const state = await openState<Sealed>(nc, "mesh-values", { parse: isSealed });
    assert.deepEqual(await state.values(), new Map(), "an empty bucket");
    await state.put("a", { box: "a1", nodes: [] });
    await state.put("b", { box: "b1", nodes: ["n1"] });
    await state.put("a", { box: "a2", nodes: [] });
    await state.put("gone", { box: "g", nodes: [] });
    await state.delete("gone");
    await nc.publish("$KV.mesh-values.bad", "not json");
    await until("the bad value to be stored", async () => (await state.keys()).includes("bad"));
    const values = await state.values();
    assert.deepEqual([...values.keys()].sort(), ["a", "b", "bad"]);
    assert.deepEqual(values.get("a"), { box: "a2", nodes: [] });
    assert.deepEqual(values.get("b"), { box: "b1", nodes: ["n1"] });
    assert.ok(values.get("bad") instanceof StateValueError);
  });

  void it("keeps its values across a nats-server restart, and the connection comes back by itself", async () => {
    const state = await openState<Sealed>(nc, "mesh-desired");
    await state.put("fleet", { box: "kept", nodes: ["n1"] });
    await bus.server.restart();
    await until("the connection to be back", () => !nc.isClosed() && nc.info !== undefined);
    assert.deepEqual(await untilItWorks(() => state.get("fleet")), { box: "kept", nodes: ["n1"] });
    const reopened = await openState<Sealed>(nc, "mesh-desired", { create: false });
    assert.deepEqual(await reopened.get("fleet"), { box: "kept", nodes: ["n1"] });
  });

  void it("watches the current values and then each change, and a bad value does not end the watch", async () => {
    const state = await openState<Sealed>(nc, "mesh-node-n1", { parse: isSealed });
    await state.put("one", { box: "1", nodes: [] });
    const watch = await state.watch();
    const seen: StateChange<Sealed>[] = [];
    const done = (async () => {
      for await (const change of watch) seen.push(change);
    })();
    await until("the current value", () => seen.length === 1);
    await nc.publish("$KV.mesh-node-n1.bad", "not json");
    await state.put("two", { box: "2", nodes: ["n1"] });
    await state.delete("one");
    await until("the changes", () => seen.length === 4);
    watch.stop();
    await done;
    assert.deepEqual(
      seen.map((c) => [c.operation, c.key, c.operation === "put" ? c.value.box : undefined]),
      [
        ["put", "one", "1"],
        ["invalid", "bad", undefined],
        ["put", "two", "2"],
        ["delete", "one", undefined],
      ],
    );
    const invalid = seen[1];
    assert.ok(invalid?.operation === "invalid" && invalid.error instanceof StateValueError);
    assert.equal(invalid.error.message.includes("not json"), false, "the value is not quoted");
    await assert.rejects(state.get("bad"), StateValueError);
  });

  void it("watches one key only when asked", async () => {
    const state = await openState<number>(nc, "counters");
    await state.put("a", 1);
    await state.put("b", 2);
    const watch = await state.watch({ key: "b" });
    for await (const change of watch) {
      assert.deepEqual(change, { operation: "put", key: "b", revision: 2, value: 2 });
      break;
    }
    watch.stop();
  });

  void it("refuses keys and bucket names NATS cannot hold", async () => {
    const state = await openState<number>(nc, "counters");
    for (const key of ["", "a b", ".a", "a.", "a..b", "a*", ">", "ü"]) {
      await assert.rejects(state.put(key, 1), InvalidStateKeyError, key);
      await assert.rejects(state.get(key), InvalidStateKeyError, key);
    }
    await assert.rejects(openState(nc, "a.b"), InvalidBucketNameError);
  });

  void it("says so when a bucket cannot be created with this connection's permissions", async () => {
    const reader = await bus.connectAs(
      "reader",
      { pub: { allow: ["nothing.here"] }, sub: { allow: [inboxSubjects("reader")] } },
      { inboxPrefix: inboxPrefix("reader") },
    );
    await assert.rejects(openState(reader, "mesh-new"), (err: unknown) => {
      assert.ok(err instanceof StateOpenError);
      assert.match(err.message, /mesh-new could not be opened/);
      return true;
    });
  });
});

// The harness's own logic under a fake bucket: a listing whose consumer JetStream never makes (it
// placed it on a server that has just gone down) is given up after a while and asked for again.
void describe("listing a bucket's keys", () => {
  const listing = (keys: string[]) => {
    let stopped = false;
    return {
      stop: () => {
        stopped = true;
      },
      get stopped() {
        return stopped;
      },
      async *[Symbol.asyncIterator]() {
        yield* keys;
      },
    };
  };

  void it("asks again when the listing's consumer is not made in time, and stops one made late", async () => {
    const late = listing(["late"]);
    let releaseFirst: (v: typeof late) => void = () => {};
    const asked: number[] = [];
    const kv = {
      keys: () => {
        asked.push(Date.now());
        if (asked.length === 1) return new Promise<typeof late>((resolve) => (releaseFirst = resolve));
        return Promise.resolve(listing(["a", "b"]));
      },
    } as unknown as Parameters<typeof listKeys>[0];
    const keys: string[] = [];
    for await (const key of await listKeys(kv)) keys.push(key);
    assert.deepEqual(keys, ["a", "b"]);
    assert.equal(asked.length, 2, "asked again once");
    const waited = (asked[1] ?? 0) - (asked[0] ?? 0);
    assert.ok(waited >= 1_900 && waited < 10_000, `asked again after ${waited} ms`);
    releaseFirst(late);
    await until("the late listing stopped", () => late.stopped);
  });

  void it("says the bus's own error of a listing at once, without asking again", async () => {
    let asked = 0;
    const kv = {
      keys: () => {
        asked++;
        return Promise.reject(new Error("jetstream is not enabled"));
      },
    } as unknown as Parameters<typeof listKeys>[0];
    await assert.rejects(listKeys(kv), /jetstream is not enabled/);
    assert.equal(asked, 1);
  });
});
