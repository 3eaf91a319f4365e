import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { startPostgres, type PostgresServer } from "@mesh/testkit";

async function connects(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  client.on("error", () => {});
  try {
    await client.connect();
    await client.query("SELECT 1");
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

function withPassword(url: string, password: string): string {
  const u = new URL(url);
  u.password = password;
  return u.toString();
}

void describe("the private PostgreSQL launcher", () => {
  let server: PostgresServer;
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    await server?.stop();
  });

  void it("listens on a loopback port that is not PostgreSQL's default", () => {
    assert.equal(server.host, "127.0.0.1");
    assert.notEqual(server.port, 5432);
    assert.equal(new URL(server.superuserUrl).pathname, "/postgres");
  });

  void it("accepts the superuser's password and refuses a wrong one", async () => {
    assert.equal(await connects(server.superuserUrl), true);
    assert.equal(await connects(withPassword(server.superuserUrl, "not-the-password")), false);
  });

  void it("makes an admin that can create roles and databases but is not a superuser", async () => {
    const url = await server.createAdmin("mesh_admin");
    assert.equal(await connects(url), true);
    const [row] = await server.query<{ rolsuper: boolean; rolcreaterole: boolean; rolcreatedb: boolean }>(
      "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = $1",
      ["mesh_admin"],
    );
    assert.deepEqual(row, { rolsuper: false, rolcreaterole: true, rolcreatedb: true });
    assert.equal(await connects(withPassword(url, "wrong")), false);
  });

  void it("halts and resumes on the same port with its data kept", async () => {
    await server.query("CREATE TABLE kept (v text)");
    await server.query("INSERT INTO kept VALUES ('still here')");
    await server.halt();
    assert.equal(await connects(server.superuserUrl), false);
    await server.resume();
    const rows = await server.query<{ v: string }>("SELECT v FROM kept");
    assert.deepEqual(rows, [{ v: "still here" }]);
  });

  void it("stops more than once without complaint", async () => {
    const other = await startPostgres();
    await other.stop();
    await other.stop();
    assert.equal(await connects(other.superuserUrl), false);
  });
});
