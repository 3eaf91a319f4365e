import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import mysql from "mysql2/promise";
import {
  DerivedChangedError,
  guardAdapter,
  InvalidLoginError,
  NotMadeHereError,
  NotRetiredError,
  ValueRefusedError,
  type GuardedAdapter,
  type Provision,
} from "@mesh/sdk";
import { startMariadb, type MariadbServer, quietLogger } from "@mesh/testkit";
import { createMariadbAdapter, MARKS_SCHEMA, nativePasswordHash, type MariadbPool } from "../src/index.ts";
import { connectAs, HOSTILE_VALUES } from "./conformance-target.ts";

const never = new AbortController().signal;

function provision(as: string, password: string, values: Record<string, unknown> = {}): Provision {
  return { as, password, values, derived: {} };
}

/** A pool wrapper that records every statement sent, and can fail (as a kill would) at the n-th. */
class RecordingPool implements MariadbPool {
  readonly sent: string[] = [];
  failAt: number | undefined;
  constructor(private readonly inner: MariadbPool) {}
  query(sql: string): Promise<[unknown, unknown]> {
    this.sent.push(sql);
    if (this.failAt !== undefined && this.sent.length >= this.failAt) {
      return Promise.reject(new Error(`simulated crash before statement ${this.sent.length}`));
    }
    return this.inner.query(sql);
  }
  end(): Promise<void> {
    return this.inner.end();
  }
}

void describe("the MariaDB adapter", { timeout: 300_000 }, () => {
  let server: MariadbServer;
  let adminUrl: string;
  let root: mysql.Pool;
  const adapters: GuardedAdapter[] = [];

  /** An adapter as the harness runs it, inside the sdk's guard; `record` sees the SQL it sends. */
  function adapter(instance = "test", record?: (pool: RecordingPool) => void): GuardedAdapter {
    const made = guardAdapter(
      createMariadbAdapter({
        adminUrl,
        instance,
        logger: quietLogger,
        wrapPool: (pool) => {
          const recording = new RecordingPool(pool);
          record?.(recording);
          return recording;
        },
      }),
      { instance },
    );
    adapters.push(made);
    return made;
  }

  async function sql(text: string, values: mysql.SqlValue[] = []): Promise<mysql.RowDataPacket[]> {
    const [rows] = await root.query<mysql.RowDataPacket[]>(mysql.format(text, values));
    return rows;
  }

  before(async () => {
    server = await startMariadb();
    adminUrl = await server.createAdmin("mesh_admin");
    root = mysql.createPool({ uri: server.rootUrl, connectionLimit: 2 });
  });
  after(async () => {
    for (const a of adapters) await a.close().catch(() => {});
    await root?.end().catch(() => {});
    await server?.stop();
  });

  void it("refuses hostile logins before sending any SQL", async () => {
    let pool: RecordingPool | undefined;
    const a = adapter("test", (p) => (pool = p));
    const hostile = [
      "x'; DROP USER root; --",
      "a`b",
      "a b",
      "a%",
      "a_%",
      "%",
      "_",
      "a\nb",
      "*",
      "Root",
      "",
      "a".repeat(33),
      "1abc",
      "a'@'%",
    ];
    for (const login of hostile) {
      const p = provision(login, "pw");
      await assert.rejects(a.create(p, never), InvalidLoginError, `create ${JSON.stringify(login)}`);
      await assert.rejects(a.holds(p, never), InvalidLoginError);
      await assert.rejects(a.retire(login, {}, "test", new Date()), InvalidLoginError);
      await assert.rejects(a.delete({ as: login, derived: {} }), InvalidLoginError);
      await assert.rejects(a.exists!(login), InvalidLoginError);
      const many = await a.holdsMany([p], never);
      assert.ok(many.get(login) instanceof InvalidLoginError);
    }
    assert.deepEqual(pool?.sent, []);
  });

  void it("refuses hostile database names before sending any SQL", async () => {
    let pool: RecordingPool | undefined;
    const a = adapter("test", (p) => (pool = p));
    for (const values of HOSTILE_VALUES) {
      const p = provision("hostile_values", "pw", values);
      await assert.rejects(a.create(p, never), ValueRefusedError, `values ${JSON.stringify(values)}`);
      assert.equal(a.classify(await a.create(p, never).catch((e: unknown) => e)), "refused");
    }
    assert.deepEqual(pool?.sent, []);
    assert.deepEqual(await sql("SELECT User FROM mysql.global_priv WHERE User = 'hostile_values'"), []);
  });

  void it("sends the password only as its hash, never in plain text", async () => {
    let pool: RecordingPool | undefined;
    const a = adapter("test", (p) => (pool = p));
    const password = "plain-text-never-sent-0123456789";
    await a.create(provision("hash_only", password), never);
    assert.ok((pool?.sent.length ?? 0) > 0);
    for (const statement of pool?.sent ?? []) assert.ok(!statement.includes(password), statement);
    const [row] = await sql(
      "SELECT JSON_VALUE(Priv, '$.authentication_string') AS h FROM mysql.global_priv WHERE User = ?",
      ["hash_only"],
    );
    assert.equal(row?.h, nativePasswordHash(password));
  });

  void it("logs in with passwords holding quotes, backslashes and non-ASCII characters", async () => {
    const a = adapter();
    const passwords = ['it\'s "quoted" `too`', "back\\slash\\", "ünïcödé ✓ 密码 🔑", "percent%_under"];
    for (const [i, password] of passwords.entries()) {
      const p = provision(`odd_pw_${i}`, password);
      await a.create(p, never);
      assert.equal(await a.holds(p, never), true, password);
      assert.equal(await server.canLogin(p.as, password), true, password);
      assert.equal(await server.canLogin(p.as, `${password}x`), false);
    }
  });

  void it("gives a consumer its database and nothing else: a_b cannot reach axb", async () => {
    const a = adapter();
    const ab = provision("a_b", "pw-ab");
    const axb = provision("axb", "pw-axb");
    await a.create(ab, never);
    await a.create(axb, never);
    const conn = await connectAs(server, "axb", "pw-axb", "axb");
    await conn.query("CREATE TABLE secret (v INT)");
    await conn.end();

    const intruder = await connectAs(server, "a_b", "pw-ab");
    try {
      await assert.rejects(intruder.query("SELECT * FROM axb.secret"), { errno: 1142 });
      await assert.rejects(intruder.query("CREATE TABLE axb.t (v INT)"), { errno: 1142 });
      await assert.rejects(intruder.query("USE axb"), { errno: 1044 });
      await assert.rejects(intruder.query("CREATE DATABASE a1b"), { errno: 1044 });
      await assert.rejects(intruder.query(mysql.format("SELECT * FROM ??.marks", [MARKS_SCHEMA])), {
        errno: 1142,
      });
      await intruder.query("CREATE TABLE a_b.mine (v INT)");
    } finally {
      await intruder.end();
    }
    const grants = await sql("SELECT Db FROM mysql.db WHERE User = 'a_b'");
    assert.deepEqual(
      grants.map((g) => g.Db),
      ["a\\_b"],
    );
  });

  void it("finds a password changed by hand not held, and create puts it back", async () => {
    const a = adapter();
    const p = provision("drift_pw", "the-minted-one");
    await a.create(p, never);
    await sql("ALTER USER 'drift_pw'@'%' IDENTIFIED BY 'by-hand'");
    assert.equal((await a.holdsMany([p], never)).get("drift_pw"), false);
    assert.equal(await server.canLogin("drift_pw", "the-minted-one"), false);
    await a.create(p, never);
    assert.equal((await a.holdsMany([p], never)).get("drift_pw"), true);
    assert.equal(await server.canLogin("drift_pw", "the-minted-one"), true);
  });

  void it("finds extra rights, a lost grant or an expired password not held, and create repairs each", async () => {
    const a = adapter();
    const p = provision("drift_rights", "pw-rights");
    await a.create(p, never);
    const drifts = [
      "GRANT SELECT ON mysql.* TO 'drift_rights'@'%'",
      "GRANT PROCESS ON *.* TO 'drift_rights'@'%'",
      "REVOKE ALL PRIVILEGES ON `drift\\_rights`.* FROM 'drift_rights'@'%'",
      "GRANT ALL ON `drift_rights`.* TO 'drift_rights'@'%'",
      "ALTER USER 'drift_rights'@'%' PASSWORD EXPIRE",
      "ALTER USER 'drift_rights'@'%' ACCOUNT LOCK",
      "DROP DATABASE drift_rights",
    ];
    for (const drift of drifts) {
      await sql(drift);
      assert.equal(await a.holds(p, never), false, drift);
      await a.create(p, never);
      assert.equal(await a.holds(p, never), true, drift);
    }
    assert.equal(await server.canLogin(p.as, p.password), true);
  });

  void it("sends no write when create finds everything as it should be", async () => {
    let pool: RecordingPool | undefined;
    const a = adapter("test", (pl) => (pool = pl));
    const p = provision("in_place", "pw-in-place");
    await a.create(p, never);
    pool!.sent.length = 0;
    await a.create(p, never);
    assert.ok(pool!.sent.length > 0);
    for (const statement of pool!.sent) assert.match(statement, /^SELECT /, statement);
  });

  void it("checks any number of consumers with the same number of queries", async () => {
    let pool: RecordingPool | undefined;
    const a = adapter("test", (pl) => (pool = pl));
    const few = [provision("batch_0", "pw0")];
    const many = Array.from({ length: 25 }, (_, i) => provision(`batch_${i}`, `pw${i}`));
    for (const p of many) await a.create(p, never);
    pool!.sent.length = 0;
    const small = await a.holdsMany(few, never);
    const sentForFew = pool!.sent.length;
    pool!.sent.length = 0;
    const large = await a.holdsMany(many, never);
    assert.equal(pool!.sent.length, sentForFew);
    assert.equal(small.get("batch_0"), true);
    assert.equal(large.size, 25);
    for (const answer of large.values()) assert.equal(answer, true);
    const wrong = await a.holdsMany([provision("batch_1", "not-it"), provision("batch_nobody", "x")], never);
    assert.equal(wrong.get("batch_1"), false);
    assert.equal(wrong.get("batch_nobody"), false);
  });

  void it("retires by locking the account and ending its sessions, keeps the data, and comes back as it was", async () => {
    const a = adapter();
    const p = provision("retiree", "pw-retiree");
    await a.create(p, never);
    const session = await connectAs(server, "retiree", "pw-retiree", "retiree");
    await session.query("CREATE TABLE kept (v TEXT)");
    await session.query("INSERT INTO kept VALUES ('still here')");
    session.on("error", () => {}); // the kill arrives as an error on this connection

    const at = new Date("2030-01-02T03:04:05.678Z");
    await a.retire("retiree", {}, "no longer asked for", at);
    await assert.rejects(session.query("SELECT 1"));
    session.destroy();
    assert.equal(await server.canLogin("retiree", "pw-retiree"), false);
    assert.equal(await a.holds(p, never), false);
    const entry = (await a.inventory()).find((e) => e.as === "retiree");
    assert.deepEqual(entry, {
      as: "retiree",
      state: "retired",
      derived: { database: "retiree" },
      retiredAt: at,
      why: "no longer asked for",
    });
    const [kept] = await sql("SELECT v FROM retiree.kept");
    assert.equal(kept?.v, "still here");

    await a.create(p, never);
    assert.equal(await a.holds(p, never), true);
    assert.equal((await a.inventory()).find((e) => e.as === "retiree")?.state, "active");
    const back = await connectAs(server, "retiree", "pw-retiree", "retiree");
    const [rows] = await back.query<mysql.RowDataPacket[]>("SELECT v FROM kept");
    await back.end();
    assert.equal(rows[0]?.v, "still here");
  });

  void it("records the mint time of the password applied in the mark, and reads a mark without one as unknown", async () => {
    const a = adapter();
    const minted = "2026-03-04T05:06:07.089Z";
    const p = { ...provision("minted_one", "pw-minted"), minted };
    const entryOf = async (login: string) => (await a.inventory()).find((e) => e.as === login);
    await a.create(p, never);
    assert.equal((await entryOf("minted_one"))?.minted, minted);
    // The same password minted later (as a mesh restored and rotated would ask): the mark follows.
    const later = "2026-05-06T07:08:09.000Z";
    await a.create({ ...p, minted: later }, never);
    assert.equal((await entryOf("minted_one"))?.minted, later);
    assert.equal(await a.holds(p, never), true);

    // A consumer made by a mesh of before mint times records none.
    await a.create(provision("minted_none", "pw-none"), never);
    const none = await entryOf("minted_none");
    assert.equal(none?.state, "active");
    assert.equal(none?.minted, undefined);
    assert.equal("minted" in none!, false);

    // A mark whose mint time is not a date reads as unknown; a retired one's is never given.
    await sql(`UPDATE ${MARKS_SCHEMA}.marks SET minted = 'not a date' WHERE login = ?`, ["minted_none"]);
    assert.equal((await entryOf("minted_none"))?.minted, undefined);
    await a.retire("minted_one", {}, "no longer asked for", new Date("2030-01-01T00:00:00Z"));
    assert.equal((await entryOf("minted_one"))?.minted, undefined);

    // A marks table made before mint times were recorded is read as it was, and gains the column.
    await sql(`ALTER TABLE ${MARKS_SCHEMA}.marks DROP COLUMN minted`);
    const old = adapter();
    const before = (await old.inventory()).find((e) => e.as === "minted_none");
    assert.equal(before?.state, "active");
    assert.equal(before?.minted, undefined);
    await old.create({ ...provision("minted_none", "pw-none"), minted }, never);
    assert.equal((await old.inventory()).find((e) => e.as === "minted_none")?.minted, minted);
  });

  void it("deletes only a retired consumer, and reports the bytes its tables held", async () => {
    const a = adapter();
    const p = provision("doomed", "pw-doomed", { name: "doomed_data" });
    await a.create(p, never);
    await assert.rejects(a.delete({ as: "doomed", derived: {} }), NotRetiredError);
    const conn = await connectAs(server, "doomed", "pw-doomed", "doomed_data");
    await conn.query("CREATE TABLE t (v TEXT)");
    await conn.query("INSERT INTO t VALUES (REPEAT('x', 1000))");
    await conn.end();
    await a.retire("doomed", {}, "test", new Date());
    const { freedBytes } = await a.delete({ as: "doomed", derived: { database: "doomed_data" } });
    assert.ok(freedBytes > 0, `freed ${freedBytes}`);
    assert.equal(await a.exists!("doomed"), false);
    assert.deepEqual(
      await sql("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'doomed_data'"),
      [],
    );
    assert.equal(
      (await a.inventory()).find((e) => e.as === "doomed"),
      undefined,
    );
  });

  void it("refuses and never touches a user a person made, nor lists it", async () => {
    const a = adapter();
    await sql("CREATE USER 'by_hand'@'%' IDENTIFIED BY 'their-own'");
    await sql("CREATE USER 'by_hand_local'@'localhost' IDENTIFIED BY 'their-own'");
    const before = await sql(
      "SELECT Host, Priv FROM mysql.global_priv WHERE User LIKE 'by\\_hand%' ORDER BY User",
    );
    for (const login of ["by_hand", "by_hand_local"]) {
      const err = await a.create(provision(login, "the-mesh-one"), never).catch((e: unknown) => e);
      assert.ok(err instanceof NotMadeHereError, String(err));
      assert.equal(a.classify(err), "refused");
      await assert.rejects(a.retire(login, {}, "test", new Date()), NotMadeHereError);
      await assert.rejects(a.delete({ as: login, derived: {} }), NotMadeHereError);
      assert.equal(await a.exists!(login), true);
      assert.equal(await a.holds(provision(login, "their-own"), never), false);
    }
    assert.deepEqual(
      await sql("SELECT Host, Priv FROM mysql.global_priv WHERE User LIKE 'by\\_hand%' ORDER BY User"),
      before,
    );
    assert.equal(await server.canLogin("by_hand", "their-own"), true);
    assert.equal(
      (await a.inventory()).some((e) => e.as.startsWith("by_hand")),
      false,
    );
  });

  void it("refuses a database that exists already without its mark, or belongs to another consumer", async () => {
    const a = adapter();
    await sql("CREATE DATABASE someone_elses");
    await assert.rejects(
      a.create(provision("wants_theirs", "pw", { name: "someone_elses" }), never),
      NotMadeHereError,
    );
    await a.create(provision("owner_one", "pw1", { name: "shared_name" }), never);
    await assert.rejects(
      a.create(provision("owner_two", "pw2", { name: "shared_name" }), never),
      NotMadeHereError,
    );
    await assert.rejects(
      a.create(provision("owner_one", "pw1", { name: "moved" }), never),
      DerivedChangedError,
    );
    assert.deepEqual(
      await sql("SELECT User FROM mysql.global_priv WHERE User IN ('wants_theirs', 'owner_two')"),
      [],
    );
  });

  void it("keeps two instances apart: neither lists nor touches the other's consumers", async () => {
    const one = adapter("one");
    const two = adapter("two");
    const p = provision("of_one", "pw-one");
    await one.create(p, never);
    assert.equal(
      (await two.inventory()).some((e) => e.as === "of_one"),
      false,
    );
    assert.equal(
      (await one.inventory()).some((e) => e.as === "of_one"),
      true,
    );
    await assert.rejects(two.create(provision("of_one", "other"), never), NotMadeHereError);
    await assert.rejects(two.retire("of_one", {}, "test", new Date()), NotMadeHereError);
    assert.equal(await two.holds(p, never), false);
    assert.equal(await one.holds(p, never), true);
  });

  void it("converges when create is cut off at any statement and run again, new or coming back", async () => {
    for (const comingBack of [false, true]) {
      for (let cut = 1; cut <= 15; cut++) {
        const login = `crash_${comingBack ? "back" : "new"}_${cut}`;
        const p = provision(login, `pw-${cut}`, cut % 2 === 0 ? { name: `${login}_db` } : {});
        if (comingBack) {
          await adapter().create(p, never);
          await adapter().retire(login, {}, "cut while coming back", new Date());
        }
        let pool: RecordingPool | undefined;
        const cutting = adapter("test", (pl) => (pool = pl));
        pool!.failAt = cut;
        await cutting.create(p, never).catch(() => {});
        assert.equal(await server.canLogin(login, "wrong"), false);
        const again = adapter();
        await again.create(p, never);
        assert.equal(await again.holds(p, never), true, `${login}: cut at statement ${cut}`);
        assert.equal(await server.canLogin(login, p.password), true);
        assert.equal((await again.inventory()).find((e) => e.as === login)?.state, "active");
        await cutting.close();
        await again.close();
      }
    }
  });

  void it("rejects promptly as unreachable while the server is down, and works again without a new adapter", async () => {
    const a = adapter();
    const p = provision("outage", "pw-outage");
    await a.create(p, never);
    await server.halt();
    try {
      for (const call of [
        () => a.holds(p, never),
        () => a.holdsMany([p], never),
        () => a.create(p, never),
        () => a.inventory(),
      ]) {
        const err = await call().then(
          () => undefined,
          (e: unknown) => e,
        );
        assert.ok(err !== undefined, "a call succeeded with the server down");
        assert.equal(a.classify(err), "unreachable", String(err));
      }
    } finally {
      await server.resume();
    }
    assert.equal(await a.holds(p, never), true);
    await a.create(provision("after_outage", "pw"), never);
    assert.equal(await server.canLogin("after_outage", "pw"), true);
  });

  void it("sees a consumer connected while its app holds a session, and never one that did not connect", async () => {
    const a = adapter();
    const app = provision("seen_app", "app-pw");
    const idle = provision("seen_idle", "idle-pw");
    await a.create(app, never);
    await a.create(idle, never);
    assert.equal(a.seesSessions, true);
    assert.deepEqual([...(await a.seenConnected(["seen_app", "seen_idle"], never))], []);
    const conn = await connectAs(server, "seen_app", "app-pw");
    try {
      // Only what was asked about is answered: the admin's own sessions are never in it.
      assert.deepEqual([...(await a.seenConnected(["seen_app", "seen_idle"], never))], ["seen_app"]);
    } finally {
      await conn.end();
    }
  });

  void it("says a wrong admin password is rejected credentials", async () => {
    const url = new URL(adminUrl);
    url.password = "wrong";
    const a = guardAdapter(
      createMariadbAdapter({ adminUrl: url.toString(), instance: "test", logger: quietLogger }),
      {
        instance: "test",
      },
    );
    adapters.push(a);
    const err = await a.inventory().catch((e: unknown) => e);
    assert.equal(a.classify(err), "credentials-rejected", String(err));
    assert.ok(!String(err).includes("wrong"));
  });
});
