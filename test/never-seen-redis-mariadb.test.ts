// Never seen connected, for Redis (one CLIENT LIST per verify pass) and MariaDB (its PROCESSLIST
// grouped by USER), through a real `mesh up`: an app that never connects is said so past the bound
// (MESH_NEVER_SEEN_AFTER, short here), one that holds a connection is not. The fleet names no
// endpoint: for either provider, whose servers are not at their manifests' default ports: the apps
// are sent where the providers serve.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startMariadb, startRedis, type MariadbServer, type RedisServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

const manifests = {
  // Holds one connection open: a blocking pop on a key of its own namespace.
  rapp: {
    name: "rapp",
    needs: { "redis-namespace": { values: {} } },
    run: {
      command: "sh",
      args: ["-c", `exec redis-cli -u "$REDIS_URL" BLPOP "$LOGIN:never" 0`],
      env: { REDIS_URL: "{redis-namespace.url}", LOGIN: "{redis-namespace.login}" },
    },
  },
  ridle: {
    name: "ridle",
    needs: { "redis-namespace": { values: {} } },
    run: { command: "sleep", args: ["100000"] },
  },
  // Holds one session open: a long sleep in SQL.
  mapp: {
    name: "mapp",
    needs: { "mysql-database": { values: {} } },
    run: {
      command: "sh",
      args: ["-c", `exec mariadb -h "$H" -P "$P" -u "$U" -e "select sleep(100000)"`],
      env: {
        H: "{mysql-database.host}",
        P: "{mysql-database.port}",
        U: "{mysql-database.login}",
        MYSQL_PWD: "{mysql-database.password}",
      },
    },
  },
  midle: {
    name: "midle",
    needs: { "mysql-database": { values: {} } },
    run: { command: "sleep", args: ["100000"] },
  },
};

type Consumers = { consumers: { consumer: string; neverSeenConnected?: boolean }[] };

describe("never seen connected, for Redis and MariaDB, through mesh up", { timeout: 600_000 }, () => {
  let redis: RedisServer;
  let mariadb: MariadbServer;
  let mariadbAdmin: string;
  let dir: string;
  let up: MeshProcess | undefined;
  const state = () => join(dir, "state");

  before(async () => {
    [redis, mariadb] = await Promise.all([startRedis(), startMariadb()]);
    mariadbAdmin = await mariadb.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-never-seen-"));
    await chmod(dir, 0o755);
    for (const m of Object.values(manifests)) {
      await mkdir(join(dir, m.name));
      await writeFile(join(dir, m.name, "module.json"), JSON.stringify(m, null, 2));
    }
    const provider = (name: string, variable: string) => `  ${name}:
    manifest: ${JSON.stringify(join(root, "providers", name, "module.json"))}
    node: node-a
    admin: { env: ${variable} }
    env: { MESH_EVERY: 1s, MESH_VERIFY_EVERY: 1s }
`;
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-a: {}
modules:
${provider("redis", "MESH_REDIS_URL")}${provider("mariadb", "MESH_MARIADB_URL")}${Object.keys(manifests)
        .map((m) => `  ${m}: { manifest: ./${m}/module.json, node: node-a }\n`)
        .join("")}`,
    );
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await redis?.stop();
    await mariadb?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("says the apps that never connect never seen connected, and not those that hold a connection", async () => {
    assert.notEqual(redis.port, 6379);
    assert.notEqual(mariadb.port, 3306);
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_REDIS_URL: redis.adminUrl,
      MESH_MARIADB_URL: mariadbAdmin,
      MESH_EVERY: "1s",
      MESH_NEVER_SEEN_AFTER: "3s",
    });
    await up.waitFor(/the modules start/);
    await until(
      "ridle and midle to be said never seen connected",
      async () => {
        const run = await runMesh(["status", "--state", state(), "--json"]);
        if (run.code !== 0) return undefined;
        const status = JSON.parse(run.stdout) as Consumers;
        const unseen = (c: string) =>
          status.consumers.find((x) => x.consumer === c)?.neverSeenConnected === true;
        return unseen("ridle") && unseen("midle") ? status : undefined;
      },
      { seconds: 240, everyMs: 1000 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
    });
    // The apps that connect are seen: once their connection is sampled (a verify pass, then the
    // node's report), they are not flagged, even if they took longer than the short bound to start.
    const seen = await until(
      "rapp and mapp to be seen connected",
      async () => {
        const run = await runMesh(["status", "--state", state(), "--json"]);
        if (run.code !== 0) return undefined;
        const status = JSON.parse(run.stdout) as Consumers;
        const flagged = (c: string) =>
          status.consumers.find((x) => x.consumer === c)?.neverSeenConnected === true;
        return !flagged("rapp") && !flagged("mapp") ? status : undefined;
      },
      { seconds: 60, everyMs: 1000 },
    ).catch(() => undefined);
    assert.ok(seen, `rapp and mapp hold a connection and are not flagged; mesh up said:\n${up.output()}`);
    for (const app of ["ridle", "midle"])
      assert.equal(
        seen.consumers.find((c) => c.consumer === app)?.neverSeenConnected,
        true,
        `${app} never connects and stays flagged`,
      );
    const text = await runMesh(["status", "--state", state()]);
    assert.match(text.stdout, /NEVER SEEN CONNECTED: 2 consumer/);
  });
});
