// What only the Redis adapter has to prove, against real private Redis servers: confinement that no
// login can widen, what a consumer may not run, marks that live with the ACL, the ACL file or its
// absence, drift found in one batched look, and a server that goes away and comes back.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { Redis } from "ioredis";
import {
  AdminSettingError,
  guardAdapter,
  InvalidLoginError,
  NotMadeHereError,
  NotRetiredError,
  type GuardedAdapter,
  type Provision,
} from "@mesh/sdk";
import { recordingLogger, startRedis, type RedisServer } from "@mesh/testkit";
import {
  createRedisAdapter,
  RedisNamespaceAdapter,
  resolveRedisConfig,
  type RedisAdapterConfig,
  type RedisBatch,
  type RedisClient,
} from "../src/index.ts";
import { ADMIN_RULES } from "../src/config.ts";
import { classifyRedisError } from "../src/adapter.ts";
import { adminPasswordOf, canLoginAs, connectAdmin, connectAs } from "./conformance-target.ts";

const signal = new AbortController().signal;

/** The adapter as the harness runs it: inside the sdk's guard. */
function guarded(config: RedisAdapterConfig): GuardedAdapter {
  return guardAdapter(createRedisAdapter(config), { instance: config.instance });
}

function consumer(as: string, password = randomBytes(24).toString("base64url")): Provision {
  return { as, password, values: {}, derived: {} };
}

/** Runs `fn` until it stops failing because the server is away (at most 60 s). */
async function eventually<T>(fn: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      return await fn();
    } catch (err) {
      if (classifyRedisError(err) !== "unreachable" || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

const canLogin = (server: RedisServer, p: Provision, password = p.password): Promise<boolean> =>
  canLoginAs(server, p.as, password);

async function rejectsWithNoperm(attempt: Promise<unknown>, what: string): Promise<void> {
  await assert.rejects(attempt, /^ReplyError: NOPERM|NOPERM/, `${what} should be refused`);
}

/**
 * ACL GETUSER's answer for `name`, but for the sanitize-payload flag: a user made without `reset`
 * carries neither that flag nor skip-sanitize-payload, and no ACL rule clears the one the adapter's
 * `reset` set when it put such a user back; Redis treats the two alike (only the skip flag acts).
 */
async function describedUser(admin: Redis, name: string): Promise<unknown> {
  const reply = await admin.call("ACL", "GETUSER", name);
  if (!Array.isArray(reply)) return reply;
  return reply.map((v: unknown, i) =>
    reply[i - 1] === "flags" && Array.isArray(v) ? v.filter((f) => f !== "sanitize-payload") : v,
  );
}

/** Counts round trips (single calls and whole batches) a client makes, for the holdsMany bound. */
function countingClient(inner: RedisClient): RedisClient & { trips: number } {
  const counter = {
    trips: 0,
    get status() {
      return inner.status;
    },
    connect: () => inner.connect(),
    call(command: string, ...args: (string | number)[]) {
      counter.trips++;
      return inner.call(command, ...args);
    },
    pipeline: () => countBatch(inner.pipeline()),
    multi: () => countBatch(inner.multi()),
    duplicate: () => inner.duplicate(),
    quit: () => inner.quit(),
    disconnect: () => inner.disconnect(),
    on: (event: string, listener: never) => inner.on(event as "error", listener),
  };
  function countBatch(batch: RedisBatch): RedisBatch {
    const wrapped: RedisBatch = {
      call: (command, ...args) => {
        batch.call(command, ...args);
        return wrapped;
      },
      exec: () => {
        counter.trips++;
        return batch.exec();
      },
    };
    return wrapped;
  }
  return counter;
}

void describe("redis adapter", { timeout: 300_000 }, () => {
  let plain: RedisServer; // no ACL file: ACL users live in memory only
  let admin: Redis;
  const closers: (() => Promise<unknown> | void)[] = [];
  const logger = recordingLogger();
  let adapter: GuardedAdapter;

  before(async () => {
    plain = await startRedis();
    admin = await connectAdmin(plain);
    adapter = guarded({ adminUrl: plain.adminUrl, instance: "main", logger });
    closers.push(() => adapter.close());
  });
  after(async () => {
    for (const close of closers.reverse()) await close();
    admin?.disconnect();
    await plain?.stop();
  });

  void it("creates an ACL user that logs in with the minted password and reaches only its own keys and channels", async () => {
    const alice = consumer("alice");
    const bob = consumer("bob");
    await adapter.create(alice, signal);
    await adapter.create(bob, signal);
    assert.equal(await adapter.holds(alice, signal), true);
    assert.equal(await canLogin(plain, alice), true);
    assert.equal(await canLogin(plain, alice, "not-the-password"), false);
    const c = await connectAs(plain, "alice", alice.password);
    try {
      assert.equal(await c.set("alice:k", "v"), "OK");
      assert.equal(await c.get("alice:k"), "v");
      assert.equal(await c.publish("alice:events", "hi"), 0);
      await rejectsWithNoperm(c.get("bob:k"), "GET of another consumer's key");
      await rejectsWithNoperm(c.set("alicex", "v"), "SET of a key outside alice:*");
      await rejectsWithNoperm(c.set("alice", "v"), "SET of the bare login");
      await rejectsWithNoperm(c.publish("bob:events", "hi"), "PUBLISH on another consumer's channel");
      await rejectsWithNoperm(c.call("SUBSCRIBE", "bob:events"), "SUBSCRIBE to another consumer's channel");
    } finally {
      c.disconnect();
    }
  });

  void it("sends the password only as its SHA-256 and never puts it in a mark", async () => {
    const p = consumer("hashed");
    await adapter.create(p, signal);
    const list = ((await admin.call("ACL", "LIST")) as string[]).join("\n");
    assert.ok(!list.includes(p.password), "the password is not in ACL LIST");
    const entry = (await adapter.inventory()).find((e) => e.as === "hashed");
    assert.ok(entry, "the consumer is in the inventory");
    assert.ok(!JSON.stringify(entry).includes(p.password), "the password is not in the inventory");
    for (const line of list.split("\n").filter((l) => l.startsWith("user _mesh:main:hashed "))) {
      const payload = line.split(" ").find((t) => t.startsWith("~"));
      assert.ok(payload, "the mark carries its payload");
      assert.ok(
        !Buffer.from(payload.slice(1), "base64url").toString("utf8").includes(p.password),
        "the password is not in the mark",
      );
    }
  });

  void it("refuses hostile logins before any command reaches Redis", async () => {
    const before = await admin.call("ACL", "LIST");
    for (const as of [
      "a*",
      "a:b",
      "~",
      "&",
      "a b",
      "a\nb",
      "a\r\nFLUSHALL",
      "A",
      "",
      "a?",
      "a[b]",
      "alice:*",
    ]) {
      const p = consumer(as);
      await assert.rejects(adapter.create(p, signal), InvalidLoginError, `create ${JSON.stringify(as)}`);
      await assert.rejects(adapter.holds(p, signal), InvalidLoginError);
      await assert.rejects(adapter.retire(as, {}, "test", new Date()), InvalidLoginError);
      await assert.rejects(adapter.delete({ as, derived: {} }), InvalidLoginError);
      await assert.rejects(adapter.exists!(as), InvalidLoginError);
      const many = await adapter.holdsMany([p], signal);
      assert.ok(many.get(as) instanceof Error, "an invalid login is answered with an Error");
    }
    assert.deepEqual(await admin.call("ACL", "LIST"), before);
  });

  void it("lets a consumer run no administration and nothing that lists other consumers' names", async () => {
    const p = consumer("boxed");
    await adapter.create(p, signal);
    await admin.set("other:secret", "x");
    const c = await connectAs(plain, "boxed", p.password);
    try {
      await rejectsWithNoperm(c.call("FLUSHALL"), "FLUSHALL");
      await rejectsWithNoperm(c.call("FLUSHDB"), "FLUSHDB");
      await rejectsWithNoperm(c.call("CONFIG", "GET", "*"), "CONFIG GET");
      await rejectsWithNoperm(c.call("CONFIG", "SET", "aclfile", "/tmp/x"), "CONFIG SET");
      await rejectsWithNoperm(c.call("ACL", "LIST"), "ACL LIST");
      await rejectsWithNoperm(c.call("ACL", "SETUSER", "boxed", "~*"), "ACL SETUSER on itself");
      await rejectsWithNoperm(c.call("KEYS", "*"), "KEYS *");
      await rejectsWithNoperm(c.call("SCAN", "0"), "SCAN");
      await rejectsWithNoperm(c.call("RANDOMKEY"), "RANDOMKEY");
      await rejectsWithNoperm(c.call("PUBSUB", "CHANNELS"), "PUBSUB CHANNELS");
      await rejectsWithNoperm(c.call("CLIENT", "LIST"), "CLIENT LIST");
      await rejectsWithNoperm(c.call("CLIENT", "KILL", "USER", "admin"), "CLIENT KILL");
      await rejectsWithNoperm(c.call("INFO"), "INFO");
      await rejectsWithNoperm(c.call("SHUTDOWN"), "SHUTDOWN");
      await rejectsWithNoperm(c.call("SLOWLOG", "GET"), "SLOWLOG GET");
      await rejectsWithNoperm(c.call("EVAL", "return redis.call('GET', 'other:secret')", "0"), "EVAL");
      await rejectsWithNoperm(c.call("MIGRATE", "127.0.0.1", "1", "boxed:k", "0", "1"), "MIGRATE");
      await rejectsWithNoperm(c.call("SWAPDB", "0", "1"), "SWAPDB");
      // Redis refuses these before asking the ACL when they are disabled in its config; ask the ACL.
      for (const command of [["DEBUG", "SLEEP", "0"], ["MODULE", "LIST"], ["MONITOR"]]) {
        const answer = await admin.call("ACL", "DRYRUN", "boxed", ...command);
        assert.match(String(answer), /no permissions/, `${command.join(" ")} should be refused`);
      }
      // What a plain application needs still works.
      assert.equal(await c.call("HSET", "boxed:h", "f", "1"), 1);
      assert.deepEqual(await c.call("HSCAN", "boxed:h", "0"), ["0", ["f", "1"]]);
      assert.equal(await c.call("INCR", "boxed:n"), 1);
    } finally {
      c.disconnect();
    }
    assert.equal(await admin.get("other:secret"), "x");
  });

  void it("lets a consumer that asks for monitoring run INFO, and nothing more of the administration", async () => {
    const watcher: Provision = { ...consumer("watcher"), values: { monitoring: true } };
    await adapter.create(watcher, signal);
    assert.equal(await adapter.holds(watcher, signal), true, "held with INFO");
    assert.equal(
      await adapter.holds({ ...watcher, values: {} }, signal),
      false,
      "a consumer without monitoring does not hold INFO: holds tells the two apart",
    );
    assert.equal((await adapter.holdsMany([watcher], signal)).get("watcher"), true);
    const without = await adapter.holdsMany([{ ...watcher, values: { monitoring: false } }], signal);
    assert.equal(without.get("watcher"), false);
    await admin.set("other:secret", "x");
    const c = await connectAs(plain, "watcher", watcher.password);
    try {
      const info = String(await c.call("INFO"));
      assert.match(info, /# Server/, "INFO answers");
      assert.match(info, /^db0:keys=\d+/m, "with counts of keys per database");
      assert.doesNotMatch(info, /other:secret/, "and no key's name");
      await rejectsWithNoperm(c.call("CONFIG", "GET", "*"), "CONFIG GET");
      await rejectsWithNoperm(c.call("CLIENT", "LIST"), "CLIENT LIST");
      await rejectsWithNoperm(c.call("SLOWLOG", "GET"), "SLOWLOG GET");
      await rejectsWithNoperm(c.call("KEYS", "*"), "KEYS *");
      await rejectsWithNoperm(c.call("SCAN", "0"), "SCAN");
      await rejectsWithNoperm(c.get("other:secret"), "GET of another key");
    } finally {
      c.disconnect();
    }
    // Asked without monitoring again: create takes INFO away.
    await adapter.create({ ...watcher, values: {} }, signal);
    const again = await connectAs(plain, "watcher", watcher.password);
    try {
      await rejectsWithNoperm(again.call("INFO"), "INFO once monitoring is no longer asked for");
    } finally {
      again.disconnect();
    }
  });

  void it("never alters an ACL user it did not make, and never lists it", async () => {
    // The pass of an earlier test's inventory has ended: its listing is no longer taken at its word.
    await adapter.afterChanges?.();
    await admin.call("ACL", "SETUSER", "handmade", "on", ">by-hand", "~handmade:*", "+@all");
    await admin.set("handmade:data", "keep");
    const before = await admin.call("ACL", "GETUSER", "handmade");
    const p = consumer("handmade");
    const refusal = await adapter.create(p, signal).catch((err: unknown) => err);
    assert.ok(refusal instanceof NotMadeHereError, "a user not made here is refused");
    assert.match(refusal.message, /not made by mesh provider instance "main"/);
    assert.equal(adapter.classify(refusal), "refused");
    await assert.rejects(adapter.retire("handmade", {}, "test", new Date()), NotMadeHereError);
    await assert.rejects(adapter.delete({ as: "handmade", derived: {} }), NotMadeHereError);
    assert.equal(await adapter.holds(p, signal), false);
    assert.deepEqual(await admin.call("ACL", "GETUSER", "handmade"), before);
    assert.equal(await admin.get("handmade:data"), "keep");
    assert.ok(
      !(await adapter.inventory()).some((e) => e.as === "handmade"),
      "a user not made here is not listed",
    );
    assert.equal(await adapter.exists!("handmade"), true);
    assert.equal(await adapter.exists!("nobody_here"), false);
    // The server's own users are just as foreign.
    await assert.rejects(adapter.create(consumer("default"), signal), NotMadeHereError);
    await assert.rejects(adapter.create(consumer("admin"), signal), NotMadeHereError);
  });

  void it("in the inventory's pass, writes a login its ACL LIST showed absent in one round trip, and refuses one it showed", async () => {
    const counted = countingClient(
      new Redis(plain.adminUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }),
    );
    const listed = guardAdapter(
      new RedisNamespaceAdapter(
        counted,
        resolveRedisConfig({ adminUrl: plain.adminUrl, instance: "main" }),
        recordingLogger(),
      ),
      { instance: "main" },
    );
    closers.push(() => listed.close());
    await admin.call("ACL", "SETUSER", "listed_foreign", "on", ">theirs", "~listed_foreign:*");
    const before = await admin.call("ACL", "GETUSER", "listed_foreign");
    await listed.inventory();
    const fresh = consumer("listed_fresh");
    counted.trips = 0;
    await listed.create(fresh, signal);
    assert.equal(counted.trips, 1, "absent from the listing: written without a read");
    assert.equal(await canLogin(plain, fresh), true);
    // Made now: a second create reads it first, and finds it in place (nothing written).
    await listed.afterChanges?.();
    counted.trips = 0;
    await listed.create(fresh, signal);
    assert.equal(counted.trips, 1, "after the pass, a create reads first; in place, nothing written");
    // A new inventory: what it shows is refused even in the same pass.
    await listed.inventory();
    // Shown by the listing, and not made here: refused, untouched.
    await assert.rejects(listed.create(consumer("listed_foreign"), signal), NotMadeHereError);
    assert.deepEqual(await admin.call("ACL", "GETUSER", "listed_foreign"), before);
  });

  void it("puts back as it was, and refuses, a user someone made between the inventory and the create", async () => {
    const listed = guardAdapter(
      new RedisNamespaceAdapter(
        new Redis(plain.adminUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }),
        resolveRedisConfig({ adminUrl: plain.adminUrl, instance: "main" }),
        recordingLogger(),
      ),
      { instance: "main" },
    );
    closers.push(() => listed.close());
    await listed.inventory();
    // Made by hand after the listing that showed the login absent: every kind of rule, to be kept.
    await admin.call(
      "ACL",
      "SETUSER",
      "between_hand",
      "on",
      ">theirs",
      ">their-second",
      "skip-sanitize-payload",
      "~between_hand:*",
      "%R~shared:*",
      "&news",
      "-@all",
      "+get",
      "+set",
      "+ping",
      "+info",
      "+select|0",
      "(~other:* &other +hget)",
    );
    // And one whose name carries a mark this instance cannot read (not its own).
    await admin.call(
      "ACL",
      "SETUSER",
      "between_marked",
      "on",
      ">theirs",
      "~between_marked:*",
      "+@read",
      "+ping",
      "+info",
    );
    await admin.call("ACL", "SETUSER", "_mesh:main:between_marked", "~not-a-mark");
    const names = ["between_hand", "_mesh:main:between_hand", "between_marked", "_mesh:main:between_marked"];
    const describe = (): Promise<unknown[]> => Promise.all(names.map((n) => describedUser(admin, n)));
    const before = await describe();
    assert.equal(before[1], null, "no mark before");
    for (const login of ["between_hand", "between_marked"]) {
      const p = consumer(login);
      await assert.rejects(listed.create(p, signal), NotMadeHereError);
      assert.equal(await canLogin(plain, p), false, `${login}: the consumer's password does not log in`);
      assert.equal(await canLoginAs(plain, login, "theirs"), true, `${login}: its own password still does`);
    }
    assert.deepEqual(await describe(), before, "the users and marks are as they were made");
    assert.ok(
      !(await listed.inventory()).some((e) => e.as.startsWith("between_")),
      "not listed as made here",
    );
  });

  void it("sends creates made at once in one round trip, each its own transaction: a refused one spares the others", async () => {
    const counted = countingClient(
      new Redis(plain.adminUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }),
    );
    const listed = guardAdapter(
      new RedisNamespaceAdapter(
        counted,
        resolveRedisConfig({ adminUrl: plain.adminUrl, instance: "main" }),
        recordingLogger(),
      ),
      { instance: "main" },
    );
    closers.push(() => listed.close());
    await listed.inventory();
    await admin.call("ACL", "SETUSER", "at_once_3", "on", ">theirs", "~at_once_3:*", "+ping");
    const before = await describedUser(admin, "at_once_3");
    const ps = Array.from({ length: 8 }, (_, i) => consumer(`at_once_${i}`));
    counted.trips = 0;
    const results = await Promise.allSettled(ps.map((p) => listed.create(p, signal)));
    assert.equal(counted.trips, 2, "eight transactions in one pipeline, then one putting at_once_3 back");
    for (const [i, result] of results.entries()) {
      if (i === 3) {
        assert.ok(
          result.status === "rejected" && result.reason instanceof NotMadeHereError,
          "the foreign one",
        );
        continue;
      }
      assert.equal(result.status, "fulfilled", `at_once_${i} created`);
      assert.equal(await canLogin(plain, ps[i]!), true, `at_once_${i} logs in`);
    }
    assert.deepEqual(await describedUser(admin, "at_once_3"), before);
  });

  void it("keeps two instances on one server apart", async () => {
    const other = guarded({
      adminUrl: plain.adminUrl,
      instance: "other",
      logger: recordingLogger(),
    });
    closers.push(() => other.close());
    const theirs = consumer("theirs");
    await other.create(theirs, signal);
    assert.ok(
      !(await adapter.inventory()).some((e) => e.as === "theirs"),
      "another instance's consumer is not listed",
    );
    await assert.rejects(adapter.create(consumer("theirs"), signal), NotMadeHereError);
    await assert.rejects(adapter.retire("theirs", {}, "test", new Date()), NotMadeHereError);
    assert.equal(await other.holds(theirs, signal), true);
    assert.equal(await adapter.holds(theirs, signal), false);
  });

  void it("finds drift with holdsMany in one ACL LIST, however many consumers, and create repairs it", async () => {
    // A client of its own, so the count is this adapter's alone.
    const counted = countingClient(
      new Redis(plain.adminUrl, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }),
    );
    const batched = guardAdapter(
      new RedisNamespaceAdapter(
        counted,
        resolveRedisConfig({ adminUrl: plain.adminUrl, instance: "main" }),
        recordingLogger(),
      ),
      { instance: "main" },
    );
    closers.push(() => batched.close());
    const ps = Array.from({ length: 40 }, (_, i) => consumer(`many_${i}`));
    for (const p of ps) await batched.create(p, signal);
    const [first, second, third, fourth, fifth] = ps;
    assert.ok(first && second && third && fourth && fifth, "forty consumers were made");

    await batched.holdsMany(ps.slice(0, 2), signal); // learn the server once
    counted.trips = 0;
    await batched.holdsMany(ps.slice(0, 2), signal);
    const tripsForTwo = counted.trips;
    counted.trips = 0;
    const all = await batched.holdsMany([...ps, consumer("not_made_yet")], signal);
    assert.equal(counted.trips, tripsForTwo);
    assert.equal(tripsForTwo, 1);
    assert.ok(
      [...all.entries()].filter(([as]) => as !== "not_made_yet").every(([, held]) => held === true),
      "every consumer made is held",
    );
    assert.equal(all.get("not_made_yet"), false);

    // Drift behind the mesh's back, of every kind the ACL allows.
    await admin.call("ACL", "SETUSER", first.as, "resetpass", ">changed-by-hand");
    await admin.call("ACL", "SETUSER", second.as, ">a-second-password");
    await admin.call("ACL", "SETUSER", third.as, "~*");
    await admin.call("ACL", "SETUSER", fourth.as, "+config");
    await admin.call("ACL", "DELUSER", fifth.as);
    const drifted = await batched.holdsMany(ps, signal);
    for (const p of [first, second, third, fourth, fifth]) {
      assert.equal(drifted.get(p.as), false, `${p.as} drifted`);
      assert.equal(await batched.holds(p, signal), false, `${p.as} drifted (holds)`);
    }
    assert.equal(drifted.get(ps[5]?.as ?? ""), true);
    for (const p of [first, second, third, fourth, fifth]) await batched.create(p, signal);
    const repaired = await batched.holdsMany(ps, signal);
    assert.ok(
      [...repaired.values()].every((held) => held === true),
      "every repaired consumer is held",
    );
    // A create that finds all in place only looks.
    counted.trips = 0;
    await batched.create(first, signal);
    assert.equal(counted.trips, 1);
    assert.equal(await canLogin(plain, first), true);
    assert.equal(await canLogin(plain, first, "changed-by-hand"), false);
  });

  void it("retires by turning the user off and ending its connections, keeps its keys, and create brings it back as it was", async () => {
    const p = consumer("retiring", "first-password-xxxxxxxxxxxxxxxx");
    await adapter.create(p, signal);
    const open = await connectAs(plain, p.as, p.password);
    await open.set("retiring:data", "kept");
    const at = new Date("2025-01-02T03:04:05.000Z");
    await adapter.retire(p.as, {}, "no longer asked for", at);
    await assert.rejects(open.get("retiring:data"));
    open.disconnect();
    assert.equal(await canLogin(plain, p), false);
    assert.equal(await adapter.holds(p, signal), false);
    assert.equal(await admin.get("retiring:data"), "kept");
    const entry = (await adapter.inventory()).find((e) => e.as === p.as);
    assert.deepEqual(entry, {
      as: p.as,
      state: "retired",
      derived: {},
      retiredAt: at,
      why: "no longer asked for",
    });

    await adapter.create(p, signal);
    assert.equal(await adapter.holds(p, signal), true);
    assert.equal((await adapter.inventory()).find((e) => e.as === p.as)?.state, "active");
    const back = await connectAs(plain, p.as, p.password);
    assert.equal(await back.get("retiring:data"), "kept");
    back.disconnect();
  });

  void it("deletes only a retired consumer: its keys in every database, its user and its mark, reporting bytes freed", async () => {
    const p = consumer("leaving");
    const stay = consumer("staying");
    await adapter.create(p, signal);
    await adapter.create(stay, signal);
    const c = await connectAs(plain, p.as, p.password);
    for (let i = 0; i < 1_200; i++) await c.set(`leaving:${i}`, "x".repeat(100));
    await c.select(3);
    await c.set("leaving:in-db-3", "y");
    c.disconnect();
    await admin.set("staying:data", "mine");
    await admin.set("leavingx:not-its-key", "kept");

    await assert.rejects(adapter.delete({ as: p.as, derived: {} }), NotRetiredError);
    assert.equal(await admin.exists("leaving:1"), 1);
    await adapter.retire(p.as, {}, "gone", new Date());
    const { freedBytes } = await adapter.delete({ as: p.as, derived: {} });
    assert.ok(freedBytes > 1_200 * 100, `freed ${freedBytes} bytes`);
    assert.equal(await admin.exists("leaving:1", "leaving:1199"), 0);
    await admin.select(3);
    assert.equal(await admin.exists("leaving:in-db-3"), 0);
    await admin.select(0);
    assert.equal(await admin.get("staying:data"), "mine");
    assert.equal(await admin.get("leavingx:not-its-key"), "kept");
    assert.equal(await adapter.exists!(p.as), false);
    assert.ok(!(await adapter.inventory()).some((e) => e.as === p.as), "a deleted consumer is not listed");
    assert.equal(await adapter.holds(stay, signal), true);
    await assert.rejects(adapter.delete({ as: p.as, derived: {} }), NotMadeHereError);
  });

  void it("refuses to delete a retired consumer someone turned on again by hand", async () => {
    const p = consumer("revived");
    await adapter.create(p, signal);
    await adapter.retire(p.as, {}, "gone", new Date());
    await admin.call("ACL", "SETUSER", p.as, "on");
    await assert.rejects(adapter.delete({ as: p.as, derived: {} }), NotRetiredError);
    assert.equal(await adapter.exists!(p.as), true);
  });

  void it("marks a consumer whose user is already gone as retired, so its keys can still be deleted", async () => {
    const p = consumer("orphan");
    await adapter.create(p, signal);
    await admin.set("orphan:data", "left behind");
    await admin.call("ACL", "DELUSER", p.as);
    await adapter.retire(p.as, { keyPrefix: "orphan:" }, "unasked", new Date());
    const entry = (await adapter.inventory()).find((e) => e.as === p.as);
    assert.equal(entry?.state, "retired");
    assert.deepEqual(entry?.derived, { keyPrefix: "orphan:" });
    const { freedBytes } = await adapter.delete({ as: p.as, derived: {} });
    assert.ok(freedBytes > 0, "the orphan's keys freed bytes");
    assert.equal(await admin.exists("orphan:data"), 0);
  });

  void it("does all its work with an admin that has only ADMIN_RULES", async () => {
    await admin.call("ACL", "SETUSER", "mesh_admin", "on", ">least-admin-pw", ...ADMIN_RULES);
    const url = new URL(plain.adminUrl);
    url.username = "mesh_admin";
    url.password = "least-admin-pw";
    const least = guarded({
      adminUrl: url.toString(),
      instance: "least",
      logger: recordingLogger(),
    });
    closers.push(() => least.close());
    const p = consumer("least_made");
    await least.create(p, signal);
    assert.equal(await least.holds(p, signal), true);
    assert.equal((await least.holdsMany([p], signal)).get(p.as), true);
    const c = await connectAs(plain, p.as, p.password);
    await c.set("least_made:k", "v");
    await least.retire(p.as, {}, "test", new Date());
    await assert.rejects(c.get("least_made:k"));
    c.disconnect();
    assert.equal((await least.inventory())[0]?.state, "retired");
    assert.ok((await least.delete({ as: p.as, derived: {} })).freedBytes > 0, "deleting freed bytes");
    assert.equal(await least.exists!(p.as), false);
  });

  void it("refuses an admin URL or instance name it cannot use, without echoing the password", () => {
    for (const [adminUrl, instance, setting] of [
      ["redis://admin:s3cret-pw@127.0.0.1:1", "bad instance", "instance"],
      ["redis://admin:s3cret-pw@127.0.0.1:1", "a:b", "instance"],
      ["http://admin:s3cret-pw@127.0.0.1:1", "main", "adminUrl"],
      ["redis://admin@127.0.0.1:1", "main", "adminUrl"],
      ["s3cret-pw", "main", "adminUrl"],
    ] as const) {
      assert.throws(
        () => createRedisAdapter({ adminUrl, instance }),
        (err: unknown) =>
          err instanceof AdminSettingError && err.setting === setting && !err.message.includes("s3cret-pw"),
      );
    }
  });

  void it("classes a rejected admin password as credentials-rejected", async () => {
    const url = new URL(plain.adminUrl);
    url.password = "wrong-admin-password";
    const wrong = guarded({
      adminUrl: url.toString(),
      instance: "main",
      logger: recordingLogger(),
    });
    try {
      const err = await wrong.create(consumer("never"), signal).catch((e: unknown) => e);
      assert.ok(err instanceof Error, "a wrong admin password fails");
      assert.equal(wrong.classify(err), "credentials-rejected");
      assert.ok(!err.message.includes(adminPasswordOf(plain)), "the admin password is not in the error");
    } finally {
      await wrong.close();
    }
  });

  void it("sees a consumer connected while its app holds a connection, and never one that did not connect, in one CLIENT LIST", async () => {
    const app = consumer("seen_app");
    const idle = consumer("seen_idle");
    await adapter.create(app, signal);
    await adapter.create(idle, signal);
    assert.equal(adapter.seesSessions, true);
    assert.deepEqual([...(await adapter.seenConnected(["seen_app", "seen_idle"], signal))], []);
    const c = await connectAs(plain, "seen_app", app.password);
    try {
      // Only what was asked about is answered: the admin's own connection is never in it.
      assert.deepEqual([...(await adapter.seenConnected(["seen_app", "seen_idle"], signal))], ["seen_app"]);
    } finally {
      c.disconnect();
    }
  });
});

void describe("redis adapter across restarts", { timeout: 300_000 }, () => {
  const servers: RedisServer[] = [];
  const adapters: GuardedAdapter[] = [];
  after(async () => {
    for (const a of adapters) await a.close();
    for (const s of servers) await s.stop();
  });

  async function serverWith(aclFile: boolean) {
    const server = await startRedis({ aclFile });
    servers.push(server);
    const logger = recordingLogger();
    const adapter = guarded({ adminUrl: server.adminUrl, instance: "main", logger });
    adapters.push(adapter);
    return { server, adapter, logger };
  }

  const aclFileWarnings = (lines: readonly { level: string; message: string }[]) =>
    lines.filter((l) => l.level === "warn" && l.message.includes("aclfile"));

  void it("says once, and only once, that without an ACL file changes will not survive a restart", async () => {
    const { adapter, logger } = await serverWith(false);
    for (const as of ["w_one", "w_two", "w_three"]) await adapter.create(consumer(as), signal);
    await adapter.inventory();
    await adapter.retire("w_two", {}, "test", new Date());
    const warnings = aclFileWarnings(logger.said);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0]?.message ?? "", /lost when Redis restarts.*aclfile/s);

    const persisted = await serverWith(true);
    await persisted.adapter.create(consumer("w_one"), signal);
    assert.equal(aclFileWarnings(persisted.logger.said).length, 0);
  });

  void it("after a restart without an ACL file, holds is false and create makes the consumer again", async () => {
    const { server, adapter } = await serverWith(false);
    const p = consumer("comeback");
    await adapter.create(p, signal);
    await server.restart();
    assert.equal(await eventually(() => adapter.holds(p, signal)), false);
    assert.deepEqual(await adapter.inventory(), []);
    await adapter.create(p, signal);
    assert.equal(await adapter.holds(p, signal), true);
    assert.equal(await canLogin(server, p), true);
  });

  void it("with an ACL file, consumers, their marks and retirements survive a restart", async () => {
    const { server, adapter } = await serverWith(true);
    const kept = consumer("kept");
    const retired = consumer("retired_one");
    await adapter.create(kept, signal);
    await adapter.create(retired, signal);
    const at = new Date("2025-02-03T04:05:06.000Z");
    await adapter.retire(retired.as, {}, "unasked for five passes", at);
    await server.restart();
    assert.equal(await eventually(() => adapter.holds(kept, signal)), true);
    assert.equal(await canLogin(server, kept), true);
    assert.equal(await canLogin(server, retired), false);
    assert.deepEqual(await adapter.inventory(), [
      { as: "kept", state: "active", derived: {} },
      { as: "retired_one", state: "retired", derived: {}, retiredAt: at, why: "unasked for five passes" },
    ]);
    // A new adapter (a provider restart) reads the same.
    const fresh = guarded({
      adminUrl: server.adminUrl,
      instance: "main",
      logger: recordingLogger(),
    });
    adapters.push(fresh);
    assert.equal((await fresh.inventory()).length, 2);
  });

  void it("a create reaches the ACL file at afterChanges; one made before a restart makes afterChanges fail, so it is applied again", async () => {
    const { server, adapter } = await serverWith(true);
    const saved = consumer("saved_one");
    const lost = consumer("lost_one");
    await adapter.create(saved, signal);
    await adapter.afterChanges();
    await adapter.create(lost, signal);
    // Redis goes down before the pass's ACL SAVE: it comes back from its file without lost_one.
    await server.restart();
    assert.equal(await eventually(() => adapter.holds(saved, signal)), true);
    assert.equal(await adapter.holds(lost, signal), false, "the unsaved create is gone");
    await assert.rejects(adapter.afterChanges(), /connection to Redis was lost/);
    await adapter.create(lost, signal);
    await adapter.afterChanges();
    await server.restart();
    assert.equal(await eventually(() => adapter.holds(lost, signal)), true, "saved once made again");
  });

  void it("fails promptly as unreachable while the server is down, and the same adapter works once it is back", async () => {
    const { server, adapter } = await serverWith(true);
    const p = consumer("patient");
    await adapter.create(p, signal);
    await adapter.afterChanges(); // as the harness does at the end of the pass
    await server.restart({
      whileDown: async () => {
        for (const attempt of [
          () => adapter.create(p, signal),
          () => adapter.holds(p, signal),
          () => adapter.holdsMany([p], signal),
          () => adapter.inventory(),
        ]) {
          const err = await attempt().then(
            () => assert.fail("a call succeeded with the server down"),
            (e: unknown) => e,
          );
          assert.equal(adapter.classify(err), "unreachable", String(err));
        }
      },
    });
    assert.equal(await eventually(() => adapter.holds(p, signal)), true);
    await adapter.create(consumer("after_outage"), signal);
  });

  void it("fails as unreachable when the server is down from the start, then works once it is up", async () => {
    const { server } = await serverWith(false);
    const url = new URL(server.adminUrl);
    await server.restart({
      whileDown: async () => {
        const early = guarded({
          adminUrl: url.toString(),
          instance: "main",
          logger: recordingLogger(),
        });
        adapters.push(early);
        const err = await early.holds(consumer("x"), signal).catch((e: unknown) => e);
        assert.equal(early.classify(err), "unreachable", String(err));
      },
    });
    const early = adapters[adapters.length - 1];
    assert.ok(early, "the adapter made while down is kept");
    assert.deepEqual(await eventually(() => early.inventory()), []);
  });
});
