import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { cleanEnv, meshInProcess, runMesh, startMesh } from "./run-mesh.ts";

const REPO = fileURLToPath(new URL("../../..", import.meta.url));
const PASSWORD = "Pa55-w0rd/with@odd chars";
const ESCAPED = encodeURIComponent(PASSWORD);

/** A loopback port nothing listens on: the kernel's choice, released again. */
function unusedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

// Usage errors and help in this process (a spawned mesh costs seconds to start); a provider that
// runs is the real mesh, stopped by a real signal, its logs on its real streams.
describe("mesh provider", () => {
  let dir: string;
  let receives: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-cli-provider-"));
    receives = join(dir, "postgres-database.json");
    await writeFile(receives, JSON.stringify({ requirement: "postgres-database", given: [] }));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("without an admin URL exits 2 naming --admin-url and MESH_POSTGRES_URL", async () => {
    const run = await meshInProcess(["provider", "postgres", "--receives", receives]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--admin-url/);
    assert.match(run.stderr, /MESH_POSTGRES_URL/);
  });

  it("without a contributions file exits 2 naming --receives and MESH_RECEIVES", async () => {
    const run = await meshInProcess(["provider", "postgres"], {
      env: { MESH_POSTGRES_URL: "postgres://a:b@127.0.0.1:1/postgres" },
    });
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--receives/);
    assert.match(run.stderr, /MESH_RECEIVES/);
  });

  it("exits 2 on a duration without a unit and says how to write one", async () => {
    const run = await meshInProcess(["provider", "postgres", "--receives", receives, "--every", "5"], {
      env: { MESH_POSTGRES_URL: "postgres://a:b@127.0.0.1:1/postgres" },
    });
    assert.equal(run.code, 2);
    assert.match(run.stderr, /--every: "5" is not a duration/);
    assert.match(run.stderr, /5s/);
  });

  it("exits 2 on a bad duration in MESH_VERIFY_EVERY, naming the variable", async () => {
    const run = await meshInProcess(["provider", "postgres", "--receives", receives], {
      env: { MESH_POSTGRES_URL: "postgres://a:b@127.0.0.1:1/postgres", MESH_VERIFY_EVERY: "-1m" },
    });
    assert.equal(run.code, 2);
    assert.match(run.stderr, /MESH_VERIFY_EVERY/);
  });

  it("exits 2 on a provider it does not know", async () => {
    const run = await meshInProcess(["provider", "oracle"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /postgres, redis, mariadb/);
  });

  for (const [name, scheme, iface] of [
    ["postgres", "postgres", "postgres-database"],
    ["redis", "redis", "redis-namespace"],
    ["mariadb", "mysql", "mysql-database"],
    ["s3", "http", "s3-bucket"],
    ["oidc", "http", "oidc-client"],
  ] as const) {
    it(`${name}: never shows the admin URL's password, prints its control socket, and stops cleanly on SIGTERM`, async () => {
      const port = await unusedPort();
      const control = join(dir, `${name}.sock`);
      const contributions = join(dir, `${iface}.json`);
      await writeFile(contributions, JSON.stringify({ requirement: iface, given: [] }));
      const adminUrl = `${scheme}://mesh_admin:${ESCAPED}@127.0.0.1:${port}/postgres`;
      const mesh = startMesh(
        [
          "provider",
          name,
          "--receives",
          contributions,
          "--admin-url",
          adminUrl,
          "--control",
          control,
          "--every",
          "1s",
        ],
        {},
      );
      try {
        await mesh.waitFor(new RegExp(`control socket: ${control.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
        // The first pass fails to reach the server; what it says about that must not carry the password.
        await mesh.waitFor(/first pass|ECONNREFUSED|unreachable|cannot/);
        assert.equal((await stat(control)).mode & 0o777, 0o600);
      } finally {
        mesh.child.kill("SIGTERM");
      }
      const run = await mesh.done;
      assert.equal(run.code, 0, run.stderr);
      const said = `${run.stdout}${run.stderr}`;
      assert.match(said, new RegExp(`mesh_admin:\\*\\*\\*@127\\.0\\.0\\.1:${port}`));
      assert.ok(!said.includes(PASSWORD), said);
      assert.ok(!said.includes(ESCAPED), said);
      await assert.rejects(stat(control), { code: "ENOENT" });
    });
  }

  it("does not show a password given in MESH_POSTGRES_URL when the control socket is taken", async () => {
    const control = join(dir, "taken.txt");
    await writeFile(control, "not a socket");
    const port = await unusedPort();
    const run = await runMesh(["provider", "postgres", "--receives", receives, "--control", control], {
      MESH_POSTGRES_URL: `postgres://mesh_admin:${ESCAPED}@127.0.0.1:${port}/postgres`,
    });
    assert.equal(run.code, 1);
    assert.match(run.stderr, /cannot serve the control socket/);
    assert.ok(!`${run.stdout}${run.stderr}`.includes(PASSWORD));
    assert.ok(!`${run.stdout}${run.stderr}`.includes(ESCAPED));
  });

  it("shows an example and the exit codes in its help", async () => {
    const run = await meshInProcess(["provider", "--help"]);
    assert.equal(run.code, 0);
    assert.match(run.stdout, /Example/);
    assert.match(run.stdout, /Exit codes:/);
  });

  it("a provider's own entry point exits 2 naming the variables it needs", async () => {
    const main = fileURLToPath(new URL("../../../providers/redis/src/main.ts", import.meta.url));
    const child = spawn(process.execPath, ["--import", "tsx", main], {
      cwd: REPO,
      env: cleanEnv(),
      stdio: "pipe",
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    assert.equal(code, 2);
    assert.match(stderr, /MESH_RECEIVES/);
    assert.match(stderr, /MESH_REDIS_URL/);
    assert.ok(!stderr.includes("--admin-url"), "a provider run on its own has no flags");
  });

  it("a provider's own entry point runs from the environment and stops cleanly on SIGINT", async () => {
    const main = fileURLToPath(new URL("../../../providers/postgres/src/main.ts", import.meta.url));
    const port = await unusedPort();
    const control = join(dir, "main.sock");
    const env = cleanEnv({
      MESH_RECEIVES: receives,
      MESH_POSTGRES_URL: `postgres://mesh_admin:${ESCAPED}@127.0.0.1:${port}/postgres`,
      MESH_CONTROL: control,
      MESH_EVERY: "1s",
    });
    const child = spawn(process.execPath, ["--import", "tsx", main], { cwd: REPO, env, stdio: "pipe" });
    let said = "";
    const started = new Promise<void>((resolve) => {
      const collect = (chunk: Buffer): void => {
        said += chunk.toString("utf8");
        if (said.includes(`control socket: ${control}`)) resolve();
      };
      child.stdout.on("data", collect);
      child.stderr.on("data", collect);
    });
    const closed = new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    await Promise.race([started, closed]);
    child.kill("SIGINT");
    assert.equal(await closed, 0, said);
    assert.ok(!said.includes(PASSWORD) && !said.includes(ESCAPED), said);
    await assert.rejects(stat(control), { code: "ENOENT" });
  });
});
