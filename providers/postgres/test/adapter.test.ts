// Postgres-only promises beyond the conformance kit: the superuser path through pg_authid, the
// extension allow-list, roles a person made, the password never in the server's log, and a create
// that converges after being interrupted at each of its steps.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import pg from "pg";
import {
  DerivedChangedError,
  guardAdapter,
  InvalidLoginError,
  NotMadeHereError,
  ValueRefusedError,
  type GuardedAdapter,
  type Provision,
} from "@mesh/sdk";
import { mintPassword, until, type PostgresServer, quietLogger } from "@mesh/testkit";
import {
  createPostgresAdapter,
  formatMark,
  provider,
  scramVerifier,
  type PostgresAdapterConfig,
} from "../src/index.ts";
import { ReservedNameError, classifyPostgresError } from "../src/adapter.ts";
import { asUser, startTargetServer } from "./conformance-target.ts";

const signal = (): AbortSignal => new AbortController().signal;
const INSTANCE = "pg-test";

/** The adapter as the harness runs it: inside the sdk's guard. */
function guarded(config: PostgresAdapterConfig): GuardedAdapter {
  return guardAdapter(createPostgresAdapter(config), { instance: config.instance });
}

void describe("the Postgres adapter", { timeout: 600_000 }, () => {
  let server: PostgresServer;
  let adminUrl: string;
  let admin: GuardedAdapter;
  let superuser: GuardedAdapter;
  let stopTarget: () => Promise<void>;
  let n = 0;

  const provision = (values: Record<string, unknown> = {}, stem = "c"): Provision => ({
    as: `${stem}_${++n}`,
    password: mintPassword(),
    values,
    derived: {},
  });
  const logsIn = async (p: Provision, database = (p.values["name"] as string | undefined) ?? p.as) =>
    !(await asUser(server, p.as, p.password, database, (c) => c.query("SELECT 1"))).refused;
  const roleRow = async (login: string) =>
    (
      await server.query<{ rolpassword: string | null; rolcanlogin: boolean; comment: string | null }>(
        `SELECT a.rolpassword, a.rolcanlogin, shobj_description(a.oid, 'pg_authid') AS comment
           FROM pg_authid a WHERE a.rolname = $1`,
        [login],
      )
    )[0];

  before(async () => {
    const t = await startTargetServer();
    server = t.pg;
    adminUrl = t.adminUrl;
    stopTarget = () => t.stop();
    admin = guarded({ adminUrl, instance: INSTANCE, logger: quietLogger });
    superuser = guarded({ adminUrl: server.superuserUrl, instance: INSTANCE, logger: quietLogger });
  });
  after(async () => {
    await admin?.close();
    await superuser?.close();
    await stopTarget?.();
  });

  void it("gives the role the minted password, a database it owns, and closes that database to others", async () => {
    const p = provision();
    await admin.create(p, signal());
    const [db] = await server.query<{ owner: string; public_connect: boolean }>(
      `SELECT pg_get_userbyid(datdba) AS owner, has_database_privilege('public', oid, 'CONNECT') AS public_connect
         FROM pg_database WHERE datname = $1`,
      [p.as],
    );
    assert.deepEqual(db, { owner: p.as, public_connect: false });
    assert.equal(await logsIn(p), true);
    const stranger = provision();
    await admin.create(stranger, signal());
    assert.equal(await logsIn(stranger, p.as), false, "another role cannot connect to it");
  });

  void it("writes a mark that names the instance and the database, and no secret", async () => {
    const p = provision({ name: "named_db" });
    await admin.create(p, signal());
    const row = await roleRow(p.as);
    assert.deepEqual(JSON.parse(row?.comment ?? "null"), {
      mesh: { instance: INSTANCE, database: "named_db", state: "active" },
    });
    assert.ok(!row?.comment?.includes(p.password));
    const entry = (await admin.inventory()).find((e) => e.as === p.as);
    assert.deepEqual(entry, { as: p.as, state: "active", derived: { database: "named_db" } });
  });

  void it("never sends the password in plain text: the server's statement log sees only the verifier", async () => {
    await server.query("ALTER SYSTEM SET log_statement = 'all'");
    await server.query("SELECT pg_reload_conf()");
    try {
      const p = provision();
      await admin.create(p, signal());
      assert.equal(await admin.holds(p, signal()), true);
      await admin.retire(p.as, {}, "unasked", new Date());
      await admin.create(p, signal());
      const log = await readFile(server.logFile, "utf8");
      assert.match(log, /SCRAM-SHA-256\$4096:/, "the statement log is on and saw the verifier");
      assert.ok(!log.includes(p.password), "the plaintext password is nowhere in the server's log");
    } finally {
      await server.query("ALTER SYSTEM RESET log_statement");
      await server.query("SELECT pg_reload_conf()");
    }
  });

  void it("spreads a non-superuser admin's consumer logins between verify passes, and still finds a password changed by hand", async () => {
    const spread = guarded({ adminUrl, instance: INSTANCE, logger: quietLogger, loginSpreadMs: 600 });
    const adminUser = decodeURIComponent(new URL(adminUrl).username);
    const consumers = [provision(), provision(), provision()];
    // A consumer's login is counted when its connection has ended: the adapter keeps the answer
    // in the same turn of the event loop, so a count seen by a later timer has its answer kept.
    const logins: string[] = [];
    const original = pg.Client.prototype.end;
    try {
      for (const p of consumers) await spread.create(p, signal());
      pg.Client.prototype.end = function (this: pg.Client, ...args: unknown[]) {
        const ended = (original as unknown as (...a: unknown[]) => Promise<void>).apply(this, args);
        if (this.user !== adminUser) {
          const counted = () => void logins.push(String(this.user));
          ended.then(counted, counted);
        }
        return ended;
      } as unknown as typeof original;
      let many = await spread.holdsMany(consumers, signal());
      assert.deepEqual([...many.values()], [true, true, true]);
      assert.equal(logins.length, 3, "the first pass logs in as each consumer itself");
      await until("the spread logins", () => logins.length >= 6, 30);
      // A password changed by hand once every spread login of this round is done: the next pass
      // still takes those answers (made before the change), and its own round finds the drift, so
      // the second pass after it says so. (Changed while a round runs, it may be found one sooner.)
      const [drifted] = consumers;
      assert.ok(drifted);
      await server.query(`ALTER ROLE "${drifted.as}" PASSWORD 'changed-by-hand'`);
      logins.length = 0;
      many = await spread.holdsMany(consumers, signal());
      assert.deepEqual([...many.values()], [true, true, true], "answered from the logins made before");
      assert.equal(logins.length, 0, "the next pass takes their answers and logs in as none");
      await until("the spread logins after the change", () => logins.length >= 3, 30);
      many = await spread.holdsMany(consumers, signal());
      assert.deepEqual([...many.values()], [false, true, true], "the second pass after finds the drift");
      assert.equal(await spread.holds(consumers[1] as Provision, signal()), true, "holds itself logs in");
    } finally {
      pg.Client.prototype.end = original;
      await spread.close();
    }
  });

  void it("verifies the password through pg_authid when its admin is a superuser, without logging in", async () => {
    const p = provision();
    await admin.create(p, signal());
    // A role that may not open a connection can still be checked by reading its stored verifier.
    await server.query(`ALTER ROLE ${p.as} CONNECTION LIMIT 0`);
    assert.equal(await superuser.holds(p, signal()), true);
    assert.equal(await superuser.holds({ ...p, password: mintPassword() }, signal()), false);
    const many = await superuser.holdsMany([p, { ...p, as: "nobody_here" }], signal());
    assert.equal(many.get(p.as), true);
    assert.equal(many.get("nobody_here"), false);
    await server.query(`ALTER ROLE ${p.as} CONNECTION LIMIT -1`);
  });

  void it("does not hold a role whose LOGIN was taken away behind its back, and create restores it", async () => {
    const p = provision();
    await admin.create(p, signal());
    await server.query(`ALTER ROLE ${p.as} NOLOGIN`);
    assert.equal(await admin.holds(p, signal()), false);
    assert.equal(await superuser.holds(p, signal()), false);
    await admin.create(p, signal());
    assert.equal(await admin.holds(p, signal()), true);
    assert.equal(await logsIn(p), true);
  });

  void it("does not hold a database opened to everyone behind its back, and create closes it again", async () => {
    const p = provision();
    await admin.create(p, signal());
    await server.query(`GRANT CONNECT ON DATABASE ${p.as} TO PUBLIC`);
    assert.equal(await admin.holds(p, signal()), false);
    await admin.create(p, signal());
    assert.equal(await admin.holds(p, signal()), true);
  });

  void it("installs trusted extensions asked for, owned by the consumer", async () => {
    for (const adapter of [admin, superuser]) {
      const p = provision({ extensions: ["pgcrypto", "citext", "uuid-ossp"] });
      await adapter.create(p, signal());
      await adapter.create(p, signal());
      const rows = await server.query<{ extname: string; owner: string }>(
        "SELECT extname, pg_get_userbyid(extowner) AS owner FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1",
        [],
        p.as,
      );
      assert.deepEqual(rows, [
        { extname: "citext", owner: p.as },
        { extname: "pgcrypto", owner: p.as },
        { extname: "uuid-ossp", owner: p.as },
      ]);
      const used = await asUser(server, p.as, p.password, p.as, (c) => c.query("SELECT gen_random_uuid()"));
      assert.equal(used.refused, false);
    }
  });

  void it("refuses an extension that is not on the allow-list before anything is made", async () => {
    for (const extensions of [
      ["plperlu"],
      ["pgcrypto", "adminpack"],
      ["pgcrypto; DROP ROLE mesh_admin"],
      "pgcrypto",
    ]) {
      const p = provision({ extensions });
      await assert.rejects(admin.create(p, signal()), ValueRefusedError);
      assert.equal(await admin.exists!(p.as), false, `nothing made for ${JSON.stringify(extensions)}`);
    }
    const err = await admin.create(provision({ extensions: ["plperlu"] }), signal()).catch((e: unknown) => e);
    assert.equal(admin.classify(err), "refused");
    assert.match(String(err), /allow-list/);
  });

  void it("refuses a role a person made, and leaves it exactly as it was", async () => {
    await server.query("CREATE ROLE alice LOGIN CREATEDB PASSWORD 'alices-own'");
    await server.query("COMMENT ON ROLE alice IS 'made by hand, keep'");
    const before = await roleRow("alice");
    const p: Provision = { as: "alice", password: mintPassword(), values: {}, derived: {} };
    const err = await admin.create(p, signal()).catch((e: unknown) => e);
    assert.ok(err instanceof NotMadeHereError, String(err));
    assert.equal(admin.classify(err), "refused");
    await assert.rejects(admin.retire("alice", {}, "not ours", new Date()), NotMadeHereError);
    await assert.rejects(admin.delete({ as: "alice", derived: { database: "alice" } }), NotMadeHereError);
    assert.equal(await admin.holds(p, signal()), false);
    assert.equal(await superuser.holds(p, signal()), false);
    assert.deepEqual(await roleRow("alice"), before);
    assert.ok(!(await admin.inventory()).some((e) => e.as === "alice"));
    assert.equal(await admin.exists!("alice"), true);
  });

  void it("refuses the admin's own login and a role another instance marked", async () => {
    const self: Provision = { as: "mesh_admin", password: mintPassword(), values: {}, derived: {} };
    await assert.rejects(admin.create(self, signal()), NotMadeHereError);
    const other = guarded({ adminUrl, instance: "someone-else", logger: quietLogger });
    try {
      const p = provision();
      await other.create(p, signal());
      const err = await admin.create({ ...p, password: mintPassword() }, signal()).catch((e: unknown) => e);
      assert.ok(err instanceof NotMadeHereError);
      assert.match(err.message, /marked by instance "someone-else"/);
      assert.equal(await other.holds(p, signal()), true, "the other instance's consumer still holds");
    } finally {
      await other.close();
    }
  });

  void it("refuses a database name another role owns before making the role", async () => {
    const p = provision({ name: "postgres" });
    await assert.rejects(admin.create(p, signal()), NotMadeHereError);
    assert.equal(await admin.exists!(p.as), false);
  });

  void it("refuses to move a consumer to another database", async () => {
    const p = provision({ name: "first_home" });
    await admin.create(p, signal());
    await assert.rejects(
      admin.create({ ...p, values: { name: "second_home" } }, signal()),
      DerivedChangedError,
    );
    assert.equal(await admin.holds({ ...p, values: { name: "second_home" } }, signal()), false);
    assert.equal(await admin.holds(p, signal()), true);
  });

  void it("refuses names PostgreSQL reserves and invalid logins without asking the server", async () => {
    for (const as of ["pg_anything", "public", "none", "current_user"]) {
      await assert.rejects(
        admin.create({ as, password: "x", values: {}, derived: {} }, signal()),
        ReservedNameError,
      );
    }
    await assert.rejects(
      admin.holds({ as: "Bad", password: "x", values: {}, derived: {} }, signal()),
      InvalidLoginError,
    );
    await assert.rejects(admin.exists!("Bad;"), InvalidLoginError);
  });

  void it("ends a retired consumer's open sessions and keeps its data", async () => {
    const p = provision();
    await admin.create(p, signal());
    const client = new pg.Client({
      host: server.host,
      port: server.port,
      user: p.as,
      password: p.password,
      database: p.as,
    });
    client.on("error", () => {});
    await client.connect();
    try {
      await client.query("CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')");
      await admin.retire(p.as, {}, "unasked", new Date());
      await assert.rejects(client.query("SELECT 1"), "the open session was ended");
    } finally {
      await client.end().catch(() => {});
    }
    assert.deepEqual(await server.query("SELECT v FROM t", [], p.as), [{ v: "kept" }]);
    assert.equal((await roleRow(p.as))?.rolcanlogin, false);
  });

  void it("retires a role that is already gone without complaint", async () => {
    await admin.retire("never_was_here", {}, "unasked", new Date());
  });

  void it("records the applied password's mint time in the role's mark (never the password), read back by inventory", async () => {
    const minted = "2026-12-02T10:04:31.118Z";
    const p = { ...provision(), minted };
    await admin.create(p, signal());
    const comment = (await roleRow(p.as))?.comment ?? "";
    assert.match(comment, /"minted":"2026-12-02T10:04:31.118Z"/);
    assert.ok(!comment.includes(p.password));
    assert.equal((await admin.inventory()).find((e) => e.as === p.as)?.minted, minted);
    // A create without one (a mesh of 0.1.0) leaves a mark without one: nothing is refused on it.
    await admin.create({ ...p, minted: undefined }, signal());
    assert.equal((await admin.inventory()).find((e) => e.as === p.as)?.minted, undefined);
  });

  void it("converges when create is run again after an interruption at any step", async () => {
    const steps = ["role and mark", "membership", "database", "revoke"] as const;
    for (let done = 1; done <= steps.length; done++) {
      const p = provision({ extensions: ["pgcrypto"] }, "cut");
      // Steps as create runs them, as the non-superuser admin, up to where the "crash" happened;
      // the interrupted run had an older password.
      const r = await asUser(server, "mesh_admin", new URL(adminUrl).password, "postgres", async (c) => {
        const id = pg.escapeIdentifier(p.as);
        await c.query("BEGIN");
        await c.query(`CREATE ROLE ${id} LOGIN PASSWORD ${pg.escapeLiteral(await scramVerifier("older"))}`);
        const mark = formatMark({ instance: INSTANCE, database: p.as, state: "active" });
        await c.query(`COMMENT ON ROLE ${id} IS ${pg.escapeLiteral(mark)}`);
        await c.query("COMMIT");
        if (done >= 2) await c.query(`GRANT ${id} TO mesh_admin`);
        if (done >= 3) await c.query(`CREATE DATABASE ${id} OWNER ${id}`);
        if (done >= 4) await c.query(`REVOKE CONNECT, TEMPORARY ON DATABASE ${id} FROM PUBLIC`);
      });
      assert.equal(r.refused, false);
      assert.equal(await admin.holds(p, signal()), false, `not held after "${steps[done - 1]}"`);
      await admin.create(p, signal());
      assert.equal(await admin.holds(p, signal()), true, `held after re-running from "${steps[done - 1]}"`);
      assert.equal(await logsIn(p), true);
      const ext = await server.query("SELECT 1 FROM pg_extension WHERE extname = 'pgcrypto'", [], p.as);
      assert.equal(ext.length, 1, `pgcrypto installed after "${steps[done - 1]}"`);
    }
  });

  void it("classifies a refused admin password as credentials-rejected, without the password in the error", async () => {
    const url = new URL(adminUrl);
    url.password = "certainly-wrong-pw";
    const wrong = guarded({ adminUrl: url.toString(), instance: INSTANCE, logger: quietLogger });
    try {
      const err = await wrong.inventory().catch((e: unknown) => e);
      assert.equal(wrong.classify(err), "credentials-rejected");
      assert.ok(!String(err).includes("certainly-wrong-pw"));
    } finally {
      await wrong.close();
    }
  });

  void it("classifies network and server-shutdown errors as unreachable", () => {
    for (const code of ["ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "57P01", "57P03"]) {
      assert.equal(classifyPostgresError(Object.assign(new Error("x"), { code })), "unreachable", code);
    }
    assert.equal(classifyPostgresError(new Error("Connection terminated unexpectedly")), "unreachable");
    assert.equal(
      classifyPostgresError(Object.assign(new Error("x"), { code: "28P01" })),
      "credentials-rejected",
    );
    assert.equal(classifyPostgresError(Object.assign(new Error("x"), { code: "42601" })), undefined);
  });

  void it("describes itself to the CLI as the postgres provider of postgres-database", async () => {
    assert.equal(provider.name, "postgres");
    assert.equal(provider.interface, "postgres-database");
    assert.equal(provider.adminUrlEnv, "MESH_POSTGRES_URL");
    const adapter = provider.createAdapter({ adminUrl, instance: INSTANCE, logger: quietLogger });
    try {
      assert.ok(Array.isArray(await adapter.inventory()));
    } finally {
      await adapter.close?.();
    }
  });

  // Last: it stops the shared server for a while.
  void it("survives its server going away: errors are unreachable, and it works again once it is back", async () => {
    const p = provision();
    await admin.create(p, signal());
    await server.halt();
    try {
      const err = await admin.holds(p, signal()).catch((e: unknown) => e);
      assert.ok(err instanceof Error, "unable to ask is an error, not a false");
      assert.equal(admin.classify(err), "unreachable");
      const createErr = await admin.create(provision(), signal()).catch((e: unknown) => e);
      assert.equal(admin.classify(createErr), "unreachable");
    } finally {
      await server.resume();
    }
    assert.equal(await admin.holds(p, signal()), true);
  });
});
