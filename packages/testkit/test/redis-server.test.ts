import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { access, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { promisify } from "node:util";
import { startRedis, type RedisServer } from "@mesh/testkit";
import { RedisNotFoundError } from "../src/redis-server.ts";

const run = promisify(execFile);

/** Runs one command through redis-cli as `user`, the password passed in the environment, not argv. */
async function cli(server: RedisServer, user: string, password: string, ...args: string[]): Promise<string> {
  const { stdout, stderr } = await run(
    "redis-cli",
    ["-h", server.host, "-p", String(server.port), "--user", user, "--no-auth-warning", ...args],
    { env: { ...process.env, REDISCLI_AUTH: password } },
  );
  return `${stdout}${stderr}`.trim();
}

function adminPassword(server: RedisServer): string {
  return decodeURIComponent(new URL(server.adminUrl).password);
}

void describe("startRedis", () => {
  const servers: RedisServer[] = [];
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });

  void it("starts a server on a loopback port that answers the admin and refuses a wrong password", async () => {
    const server = await startRedis();
    servers.push(server);
    assert.equal(server.host, "127.0.0.1");
    assert.notEqual(server.port, 6379);
    assert.match(server.adminUrl, /^redis:\/\/admin:[0-9a-f]{48}@127\.0\.0\.1:\d+$/);
    assert.equal(await cli(server, "admin", adminPassword(server), "PING"), "PONG");
    assert.match(await cli(server, "admin", "not-the-password", "PING"), /WRONGPASS|NOAUTH/);
    assert.match(await cli(server, "default", "", "PING"), /WRONGPASS|NOAUTH/);
  });

  void it("saves nothing to disk and keeps no plaintext password in its files", async () => {
    const server = await startRedis({ aclFile: true });
    servers.push(server);
    const password = adminPassword(server);
    assert.equal(await cli(server, "admin", password, "CONFIG", "GET", "save"), "save");
    assert.equal(await cli(server, "admin", password, "CONFIG", "GET", "appendonly"), "appendonly\nno");
    assert.ok(server.aclFile, "an ACL file is configured");
    const acl = await readFile(server.aclFile, "utf8");
    assert.ok(!acl.includes(password), "the ACL file holds no plaintext password");
    assert.match(acl, /^user admin on #[0-9a-f]{64}/m);
  });

  void it("keeps ACL users across a restart when it has an ACL file", async () => {
    const server = await startRedis({ aclFile: true });
    servers.push(server);
    const password = adminPassword(server);
    assert.equal(
      await cli(server, "admin", password, "ACL", "SETUSER", "kept", "on", ">pw", "~kept:*", "+ping"),
      "OK",
    );
    assert.equal(await cli(server, "admin", password, "ACL", "SAVE"), "OK");
    assert.equal(await cli(server, "admin", password, "SET", "kept:data", "1"), "OK");
    const port = server.port;
    await server.restart();
    assert.equal(server.port, port);
    assert.equal(await cli(server, "kept", "pw", "PING"), "PONG");
    assert.equal(await cli(server, "admin", password, "EXISTS", "kept:data"), "0");
  });

  void it("forgets ACL users across a restart when it has no ACL file, and runs whileDown while stopped", async () => {
    const server = await startRedis();
    servers.push(server);
    const password = adminPassword(server);
    assert.equal(server.aclFile, undefined);
    await cli(server, "admin", password, "ACL", "SETUSER", "gone", "on", ">pw", "~gone:*", "+ping");
    let sawDown = false;
    await server.restart({
      whileDown: async () => {
        await assert.rejects(cli(server, "admin", password, "PING"));
        sawDown = true;
      },
    });
    assert.ok(sawDown, "whileDown ran");
    assert.equal(await cli(server, "admin", password, "PING"), "PONG");
    assert.match(await cli(server, "gone", "pw", "PING"), /WRONGPASS|NOAUTH/);
  });

  void it("stops idempotently and removes its directory", async () => {
    const server = await startRedis({ aclFile: true });
    assert.ok(server.aclFile, "an ACL file is configured");
    const dir = dirname(server.aclFile);
    await server.stop();
    await server.stop();
    await assert.rejects(access(dir));
    await assert.rejects(cli(server, "admin", adminPassword(server), "PING"));
    await assert.rejects(server.restart(), /was stopped/);
  });

  void it("says how to install redis-server when it is not on PATH", async () => {
    const empty = await mkdtemp(join(tmpdir(), "mesh-empty-path-"));
    const saved = process.env["PATH"];
    process.env["PATH"] = empty;
    try {
      await assert.rejects(startRedis(), (err: unknown) => {
        assert.ok(err instanceof RedisNotFoundError, "the error says redis-server is missing");
        assert.equal(err.message, "redis-server not found on PATH; install the Debian package redis-server");
        return true;
      });
    } finally {
      process.env["PATH"] = saved;
      await rm(empty, { recursive: true, force: true });
    }
  });
});
