import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { after, before, describe, it } from "node:test";
import mysql from "mysql2/promise";
import { startMariadb, type MariadbServer } from "@mesh/testkit";
import { MariadbNotFoundError } from "../src/mariadb-server.ts";

function withPassword(url: string, password: string): string {
  const u = new URL(url);
  u.password = password;
  return u.toString();
}

async function canConnect(url: string): Promise<boolean> {
  try {
    const conn = await mysql.createConnection(url);
    await conn.end();
    return true;
  } catch {
    return false;
  }
}

void describe("startMariadb", { timeout: 180_000 }, () => {
  let server: MariadbServer;
  before(async () => {
    server = await startMariadb();
  });
  after(async () => {
    await server?.stop();
  });

  void it("listens on a free loopback port that is not the machine's own 3306", () => {
    assert.equal(server.host, "127.0.0.1");
    assert.notEqual(server.port, 3306);
  });

  void it("keeps its temporary files out of the shared /tmp, where another server's start would remove them", async () => {
    const conn = await mysql.createConnection(server.rootUrl);
    try {
      const [rows] = await conn.query<mysql.RowDataPacket[]>("SELECT @@tmpdir AS tmpdir");
      const dir = String(rows[0]?.tmpdir);
      assert.notEqual(dir.replace(/\/$/, ""), tmpdir().replace(/\/$/, ""));
      assert.ok(existsSync(dir), dir);
    } finally {
      await conn.end();
    }
  });

  void it("lets root in with its password and refuses a wrong one", async () => {
    assert.equal(await canConnect(server.rootUrl), true);
    assert.equal(await canConnect(withPassword(server.rootUrl, "wrong")), false);
  });

  void it("leaves no anonymous account to shadow a consumer's login", async () => {
    const conn = await mysql.createConnection(server.rootUrl);
    try {
      const [rows] = await conn.query<mysql.RowDataPacket[]>(
        "SELECT COUNT(*) AS n FROM mysql.global_priv WHERE User = ''",
      );
      assert.equal(Number(rows[0]?.n), 0);
    } finally {
      await conn.end();
    }
  });

  void it("makes a non-root admin that can make users but is not root", async () => {
    const adminUrl = await server.createAdmin("tk_admin");
    assert.equal(await canConnect(withPassword(adminUrl, "wrong")), false);
    const conn = await mysql.createConnection(adminUrl);
    try {
      await conn.query("CREATE USER 'tk_user'@'%' IDENTIFIED BY 'pw'");
      await conn.query("CREATE DATABASE `tk_db`");
      await conn.query("GRANT ALL ON `tk\\_db`.* TO 'tk_user'@'%'");
      await assert.rejects(conn.query("SHUTDOWN"), /denied|privilege/i);
    } finally {
      await conn.end();
    }
    assert.equal(await canConnect(`mysql://tk_user:pw@127.0.0.1:${server.port}/tk_db`), true);
  });

  void it("halts and resumes on the same port with its data", async () => {
    const conn = await mysql.createConnection(server.rootUrl);
    await conn.query("CREATE DATABASE kept");
    await conn.query("CREATE TABLE kept.t (v INT)");
    await conn.query("INSERT INTO kept.t VALUES (7)");
    await conn.end();
    const port = server.port;
    await server.halt();
    assert.equal(await canConnect(server.rootUrl), false);
    await server.halt(); // idempotent
    await server.resume();
    assert.equal(server.port, port);
    const again = await mysql.createConnection(server.rootUrl);
    try {
      const [rows] = await again.query<mysql.RowDataPacket[]>("SELECT v FROM kept.t");
      assert.equal(rows[0]?.v, 7);
    } finally {
      await again.end();
    }
  });

  void it("removes its files on stop, and stopping twice is harmless", async () => {
    const other = await startMariadb();
    assert.equal(existsSync(other.dir), true);
    await other.stop();
    await other.stop();
    assert.equal(existsSync(other.dir), false);
    assert.equal(await canConnect(other.rootUrl), false);
  });
});

void describe("startMariadb without the binaries", () => {
  void it("says which Debian package to install", async () => {
    await assert.rejects(startMariadb({ mariadbd: "/nonexistent/mariadbd" }), (err: unknown) => {
      assert.ok(err instanceof MariadbNotFoundError);
      assert.match(err.message, /install the Debian package mariadb-server/);
      return true;
    });
  });
});
