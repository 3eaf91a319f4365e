// A rotation the bus did not confirm: the controller keeps the old password, and the restore it
// is handed puts the old one back over a new one that the bus committed late; written down before
// the bus is asked, so a controller that starts over the same state directory does it too.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeBus, createAuthority, newNodeKeys, openState, unseal, type BusState } from "@mesh/bus";
import { BusCannotStoreError, PasswordStore, type SealedPassword } from "../src/password-store.ts";
import { RESTORES_FILE, RestoreIntents, type RestoreIntent } from "../src/restore-intents.ts";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAsController } from "./test-mesh.ts";

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
    values: async () => new Map([...values].map(([key, v]) => [key, v.value])),
    watch: () => Promise.reject(new Error("not used here")),
  };
  return { state, failNextPut: () => (fail = true) };
}

void describe("PasswordStore.rotate when the bus does not confirm", () => {
  void it("keeps the old password, and its restore puts the old one back over the late one", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const store = PasswordStore.over(bucket.state, keys, quietLogger);
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
    const fresh = PasswordStore.over(bucket.state, keys, quietLogger);
    assert.deepEqual(await fresh.ensure("notes", "postgres-database"), first);
  });

  void it("a restore run after a later rotation was stored leaves that rotation standing", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const store = PasswordStore.over(bucket.state, keys, quietLogger);
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

// Over a real nats-server: the bucket is JetStream's, and only the write's answer is lost (the
// write is stored, then reported failed), as a server without quorum answers one it commits later.
void describe("a rotation the bus did not confirm, after the controller that asked was killed", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let dirs: string[] = [];
  const KEY = "notes/postgres-database";

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    nc = await connectAsController(authority, nats.url);
  });
  after(async () => {
    await closeBus(nc);
    await nats.stop();
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
    dirs = [];
  });

  // The sealed-passwords bucket, fresh for each test, whose next put is stored and then refused.
  async function lateLandingKv(): Promise<{ state: BusState<SealedPassword>; failNextPut: () => void }> {
    const real = await openState<SealedPassword>(nc, `mesh-sealed-${randomUUID().slice(0, 8)}`);
    let fail = false;
    const state: BusState<SealedPassword> = {
      ...real,
      put: async (key, value) => {
        const revision = await real.put(key, value);
        if (fail) {
          fail = false;
          throw new Error("TimeoutError: timeout");
        }
        return revision;
      },
    };
    return { state, failNextPut: () => (fail = true) };
  }

  async function stateDir(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "mesh-restores-"));
    dirs.push(dir);
    return dir;
  }

  void it("the next controller over the same state puts the old password back, and lists it until then", async () => {
    const keys = await newNodeKeys();
    const kv = await lateLandingKv();
    const dir = await stateDir();
    const killed = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    const first = await killed.ensure("notes", "postgres-database");
    kv.failNextPut();
    const refused = await killed.rotate("notes", "postgres-database").catch((err: unknown) => err);
    assert.ok(refused instanceof BusCannotStoreError, String(refused));
    // Two refused in a row: both are undone, whichever lands.
    kv.failNextPut();
    await assert.rejects(killed.rotate("notes", "postgres-database"), BusCannotStoreError);
    const late = await kv.state.get(KEY);
    assert.notEqual(late?.version, first.version, "a refused one landed late in the bus");

    // What was written down before the bus was asked: 0600, the old password sealed, never in the clear.
    const file = join(dir, RESTORES_FILE);
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const text = await readFile(file, "utf8");
    assert.ok(!text.includes(first.password), "no password in the clear");
    const written = (JSON.parse(text) as { restores: Record<string, RestoreIntent> }).restores[KEY];
    assert.equal(written?.kept.version, first.version);
    assert.equal(await unseal(written?.kept.sealed ?? "", keys), first.password);
    assert.equal(written?.refused.length, 2);
    assert.ok(written?.refused.includes(late?.version ?? ""));

    // Killed here (nothing settled); another starts over the same state directory.
    const next = PasswordStore.over(kv.state, keys, quietLogger, await RestoreIntents.load(dir, quietLogger));
    assert.deepEqual(
      next.pendingRestores().map((r) => [r.key, r.consumer, r.interface, r.since]),
      [[KEY, "notes", "postgres-database", written?.since]],
    );
    assert.deepEqual(
      await next.ensure("notes", "postgres-database"),
      first,
      "the late one is never handed out",
    );
    await next.restore(KEY);
    const restored = await kv.state.get(KEY);
    assert.equal(restored?.version, first.version);
    assert.equal(await unseal(restored?.sealed ?? "", keys), first.password);
    assert.deepEqual(next.pendingRestores(), []);
    assert.deepEqual((await RestoreIntents.load(dir, quietLogger)).all(), [], "settled on disk too");
    const fresh = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    assert.deepEqual(await fresh.ensure("notes", "postgres-database"), first);
  });

  void it("a rotation stored later by another leader stands over the restore resumed from the file", async () => {
    const keys = await newNodeKeys();
    const kv = await lateLandingKv();
    const dir = await stateDir();
    const killed = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    await killed.ensure("notes", "postgres-database");
    kv.failNextPut();
    await assert.rejects(killed.rotate("notes", "postgres-database"), BusCannotStoreError);

    // A standby on another machine (no restores file of its own) leads and rotates; the bus stores it.
    const standby = PasswordStore.over(kv.state, keys, quietLogger);
    await standby.ensure("notes", "postgres-database");
    const later = await standby.rotate("notes", "postgres-database");

    const restarted = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    assert.equal(restarted.pendingRestores().length, 1);
    assert.deepEqual(await restarted.ensure("notes", "postgres-database"), later);
    await restarted.restore(KEY);
    assert.equal((await kv.state.get(KEY))?.version, later.version);
    assert.deepEqual((await RestoreIntents.load(dir, quietLogger)).all(), []);
  });

  void it("a standby on another machine, without the restores file, knows the late one from the bus", async () => {
    const keys = await newNodeKeys();
    const kv = await lateLandingKv();
    const killed = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(await stateDir(), quietLogger),
    );
    const first = await killed.ensure("notes", "postgres-database");
    kv.failNextPut();
    await assert.rejects(killed.rotate("notes", "postgres-database"), BusCannotStoreError);
    const late = await kv.state.get(KEY);
    assert.equal(late?.replaces?.version, first.version, "the late one names the one it replaces");

    const standby = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(await stateDir(), quietLogger),
    );
    assert.deepEqual(
      await standby.ensure("notes", "postgres-database"),
      first,
      "the late one is never handed out",
    );
    assert.deepEqual(
      standby.pendingRestores().map((r) => r.key),
      [KEY],
    );
    await standby.restore(KEY);
    const restored = await kv.state.get(KEY);
    assert.equal(restored?.version, first.version);
    assert.equal(restored?.replaces, undefined);
    assert.deepEqual(standby.pendingRestores(), []);
  });

  void it("a rotation the bus stores leaves nothing to restore", async () => {
    const keys = await newNodeKeys();
    const kv = await lateLandingKv();
    const dir = await stateDir();
    const store = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    await store.ensure("notes", "postgres-database");
    kv.failNextPut();
    await assert.rejects(store.rotate("notes", "postgres-database"), BusCannotStoreError);
    const stored = await store.rotate("notes", "postgres-database");
    assert.deepEqual(store.pendingRestores(), []);
    assert.equal((await kv.state.get(KEY))?.replaces, undefined, "a stored rotation is confirmed");
    const restarted = PasswordStore.over(
      kv.state,
      keys,
      quietLogger,
      await RestoreIntents.load(dir, quietLogger),
    );
    assert.deepEqual(restarted.pendingRestores(), []);
    assert.deepEqual(await restarted.ensure("notes", "postgres-database"), stored);
  });
});

void describe("PasswordStore mint times", () => {
  void it("keeps each password's mint time with it, read back unchanged, and a rotation after a time mints later than it", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const store = PasswordStore.over(bucket.state, keys, quietLogger);
    const first = await store.ensure("notes", "postgres-database");
    assert.ok(first.mintedAt !== undefined && !Number.isNaN(Date.parse(first.mintedAt)));
    const fresh = PasswordStore.over(bucket.state, keys, quietLogger);
    assert.equal((await fresh.ensure("notes", "postgres-database")).mintedAt, first.mintedAt);

    // A backend holding a password minted ahead of this clock: the rotation is minted after it.
    const ahead = new Date(Date.now() + 3_600_000).toISOString();
    const rotated = await store.rotate("notes", "postgres-database", { after: ahead });
    assert.ok(Date.parse(rotated.mintedAt ?? "") > Date.parse(ahead), rotated.mintedAt);
    // The next one is minted after it too, whatever the clock says: a provider takes only a newer one.
    const plain = await store.rotate("notes", "postgres-database");
    assert.ok(Date.parse(plain.mintedAt ?? "") > Date.parse(rotated.mintedAt ?? ""), plain.mintedAt);
    assert.equal((await bucket.state.get("notes/postgres-database"))?.mintedAt, plain.mintedAt);
  });
});

void describe("PasswordStore opening kept passwords", () => {
  const wanted = [
    { consumer: "old", interface: "postgres-database" },
    { consumer: "new", interface: "postgres-database" },
  ];
  const recordOf = async (
    store: PasswordStore,
    bucket: BusState<SealedPassword>,
    consumer: string,
  ): Promise<SealedPassword | undefined> => {
    await store.ensure(consumer, "postgres-database");
    return bucket.get(`${consumer}/postgres-database`);
  };

  void it("reads kept ones without opening them, and replaces one that cannot be opened when it is needed", async () => {
    const keys = await newNodeKeys();
    const other = await newNodeKeys();
    const bucket = lateLandingBucket();
    await recordOf(PasswordStore.over(bucket.state, keys, quietLogger), bucket.state, "old");
    // Sealed to another key, and newer than the one this controller can open.
    const sealed = await recordOf(PasswordStore.over(bucket.state, other, quietLogger), bucket.state, "new");
    assert.ok(sealed !== undefined);
    const foreign = { ...sealed, mintedAt: new Date(Date.now() + 60_000).toISOString() };
    await bucket.state.put("new/postgres-database", foreign);
    const warnings: string[] = [];
    const log = { ...quietLogger, warn: (line: string) => void warnings.push(line) };
    const store = PasswordStore.over(bucket.state, keys, log);
    await store.ensureAll(wanted);
    assert.equal(store.minted, 0, "nothing is opened, nothing replaced, until it is needed");
    assert.equal((await store.ensureVersion("new", "postgres-database")).version, foreign?.version);
    assert.equal(warnings.length, 0);
    const opened = await store.ensure("new", "postgres-database");
    assert.notEqual(opened.version, foreign?.version, "replaced once needed in the clear");
    assert.equal(store.minted, 1);
    assert.equal((await bucket.state.get("new/postgres-database"))?.version, opened.version);
    assert.ok(warnings.some((w) => w.includes("cannot be opened with this controller's key")));
  });

  void it("replaces every kept one when the oldest cannot be opened (the controller's key was replaced)", async () => {
    const lost = await newNodeKeys();
    const bucket = lateLandingBucket();
    const before = PasswordStore.over(bucket.state, lost, quietLogger);
    await before.ensureAll(wanted);
    const store = PasswordStore.over(bucket.state, await newNodeKeys(), quietLogger);
    await store.ensureAll(wanted);
    assert.equal(store.minted, 2);
    for (const w of wanted) {
      assert.notEqual(
        (await store.ensureVersion(w.consumer, w.interface)).version,
        (await before.ensureVersion(w.consumer, w.interface)).version,
      );
    }
  });

  void it("reads the whole bucket in one pass for a large fleet, as it reads one key at a time", async () => {
    const keys = await newNodeKeys();
    const bucket = lateLandingBucket();
    const many = Array.from({ length: 40 }, (_, i) => ({
      consumer: `c${i}`,
      interface: "postgres-database",
    }));
    const first = PasswordStore.over(bucket.state, keys, quietLogger);
    await first.ensureAll(many);
    assert.equal(first.minted, 40);
    const again = PasswordStore.over(bucket.state, keys, quietLogger);
    await again.ensureAll(many);
    assert.equal(again.minted, 0);
    for (const w of many)
      assert.deepEqual(
        await again.ensure(w.consumer, w.interface),
        await first.ensure(w.consumer, w.interface),
      );
  });
});
