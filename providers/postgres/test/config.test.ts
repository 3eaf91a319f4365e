import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { AdminSettingError } from "@mesh/sdk";
import { resolvePostgresConfig } from "../src/config.ts";

const resolve = (adminUrl: string, instance = "main") => resolvePostgresConfig({ adminUrl, instance });

function refusal(adminUrl: string, instance = "main"): AdminSettingError {
  try {
    resolve(adminUrl, instance);
  } catch (err) {
    assert.ok(err instanceof AdminSettingError, String(err));
    return err;
  }
  assert.fail(`${adminUrl} was accepted`);
}

void describe("the Postgres provider's configuration", () => {
  void it("reads host, port, admin and database from the URL, with defaults", () => {
    const c = resolve("postgresql://mesh_admin:p%40ss@db.example:6543/meshdb?sslmode=require");
    assert.deepEqual(c.server, { host: "db.example", port: 6543, ssl: { rejectUnauthorized: false } });
    assert.equal(c.admin.user, "mesh_admin");
    assert.equal(c.admin.password, "p@ss");
    assert.equal(c.adminDatabase, "meshdb");
    assert.equal(c.poolSize, 5);
    const d = resolve("postgres://a:b@127.0.0.1");
    assert.equal(d.server.port, 5432);
    assert.equal(d.adminDatabase, "postgres");
    assert.equal(d.server.ssl, false);
  });

  void it("says which variable and flag to fix for a URL it cannot use, and never the password", () => {
    for (const url of [
      "not a url s3cr3t",
      "mysql://admin:s3cr3t@h/db",
      "postgresql://:s3cr3t@h/db",
      "postgresql://admin:s3cr3t@h:99999/db",
      "postgresql://admin:s3cr3t@h/db?sslmode=sometimes",
      "",
    ]) {
      const err = refusal(url);
      assert.match(err.message, /MESH_POSTGRES_URL/);
      assert.match(err.message, /--admin-url/);
      assert.ok(!err.message.includes("s3cr3t"), err.message);
      assert.equal(err.setting, "adminUrl");
    }
  });

  void it("refuses an admin URL on template1, whose open sessions block CREATE DATABASE", () => {
    assert.match(refusal("postgresql://a:s3cr3t@h/template1").message, /template1/);
  });

  void it("refuses an instance name that cannot name a mark", () => {
    assert.equal(refusal("postgresql://a:b@h/postgres", "").setting, "instance");
    assert.equal(refusal("postgresql://a:b@h/postgres", 'x"y').setting, "instance");
  });
});
