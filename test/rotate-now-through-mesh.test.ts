// `mesh rotate --now` for a leaked password, through a real `mesh up` against a real Postgres,
// Redis and MariaDB: no overlap, the old password is refused and the sessions opened with it are ended within
// 2 s of the provider taking the new one, also when the consumer was in the middle of an
// overlapping rotation (Redis: both earlier passwords go). Each rotation is in the ledger.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createConnection, type Connection } from "mysql2/promise";
import pg from "pg";
import type { Redis } from "ioredis";
import { credentialPath } from "@mesh/manifest";
import {
  startMariadb,
  startPostgres,
  startRedis,
  type MariadbServer,
  type PostgresServer,
  type RedisServer,
  until,
} from "@mesh/testkit";
import { connectAs } from "../providers/redis/test/conformance-target.ts";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const SLEEPER = { command: "sleep", args: ["100000"] };

describe("mesh rotate --now: the leaked password refused, its sessions ended", { timeout: 300_000 }, () => {
  let postgres: PostgresServer;
  let redis: RedisServer;
  let mariadb: MariadbServer;
  let admin: pg.Pool;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", "node-a");
  const said = (err: unknown): never => {
    throw new Error(`${(err as Error).message}; mesh up said:\n${up.output().slice(-6000)}`);
  };
  // What the credential file names: Postgres moves a consumer to its other login, and that login's
  // own password file, at each rotation.
  const namedOf = async (consumer: string, iface: string) => {
    const credential = JSON.parse(await readFile(credentialPath(nodeState(), consumer, iface), "utf8")) as {
      login: string;
      passwordFile: string;
    };
    return { login: credential.login, password: (await readFile(credential.passwordFile, "utf8")).trim() };
  };
  const passwordOf = async (consumer: string, iface: string) => (await namedOf(consumer, iface)).password;
  // The consumer's copy is written by its agent once the provider has applied the new password, on
  // the agent's next look (every 200 ms): --wait returns on the provider's word, a moment before.
  // The consumer's password once its backend takes it: `logsIn` tries it (and closes what it opened).
  const passwordTaken = (
    consumer: string,
    iface: string,
    backend: string,
    logsIn: (password: string) => Promise<unknown>,
  ): Promise<string> =>
    until(
      `${consumer}'s password to be taken by ${backend}`,
      async () => {
        const password = await passwordOf(consumer, iface).catch(() => undefined);
        if (password === undefined) return undefined;
        return (await logsIn(password).then(
          () => true,
          () => false,
        ))
          ? password
          : undefined;
      },
      { seconds: 90, everyMs: 250 },
    ).catch(said);
  const passwordAfter = (consumer: string, iface: string, old: string): Promise<string> =>
    until(
      `${consumer}'s new password in its file`,
      async () => {
        const p = await passwordOf(consumer, iface);
        return p === old ? undefined : p;
      },
      { seconds: 10, everyMs: 50 },
    );

  before(async () => {
    [postgres, redis, mariadb] = await Promise.all([startPostgres(), startRedis(), startMariadb()]);
    const pgAdmin = await postgres.createAdmin("mesh_admin");
    const mariadbAdmin = await mariadb.createAdmin("mesh_admin");
    admin = new pg.Pool({ connectionString: pgAdmin, max: 2 });
    admin.on("error", () => undefined);
    dir = await mkdtemp(join(tmpdir(), "mesh-rotate-now-"));
    await chmod(dir, 0o755);
    const apps = {
      leaky: { name: "leaky", needs: { "postgres-database": {} }, run: SLEEPER },
      spill: { name: "spill", needs: { "redis-namespace": {} }, run: SLEEPER },
      drip: { name: "drip", needs: { "mysql-database": {} }, run: SLEEPER },
    };
    for (const [name, manifest] of Object.entries(apps)) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest));
    }
    const env = "env: { MESH_EVERY: 1s, MESH_ROTATION_GRACE: 5m }";
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: ${postgres.host}, port: ${postgres.port} }
    admin: { env: MESH_POSTGRES_URL }
    ${env}
  redis:
    manifest: ${JSON.stringify(join(root, "providers", "redis", "module.json"))}
    node: node-a
    endpoint: { host: ${redis.host}, port: ${redis.port} }
    admin: { env: MESH_REDIS_URL }
    ${env}
  mariadb:
    manifest: ${JSON.stringify(join(root, "providers", "mariadb", "module.json"))}
    node: node-a
    endpoint: { host: ${mariadb.host}, port: ${mariadb.port} }
    admin: { env: MESH_MARIADB_URL }
    ${env}
  drip: { manifest: ./drip/module.json, node: node-a }
  leaky: { manifest: ./leaky/module.json, node: node-a }
  spill: { manifest: ./spill/module.json, node: node-a }
`,
    );
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: pgAdmin,
      MESH_REDIS_URL: redis.adminUrl,
      MESH_MARIADB_URL: mariadbAdmin,
    });
    await up.waitFor(/the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await admin?.end().catch(() => undefined);
    await Promise.all([postgres?.stop(), redis?.stop(), mariadb?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const pgConnect = async (password: string, user = "leaky_postgres"): Promise<pg.Client> => {
    const client = new pg.Client({
      host: postgres.host,
      port: postgres.port,
      user,
      password,
      database: "leaky_postgres",
      connectionTimeoutMillis: 3_000,
    });
    client.on("error", () => undefined);
    await client.connect();
    return client;
  };

  it("Postgres: the leaked password is refused and its open sessions are gone within 2 s", async () => {
    const leaked = await passwordTaken("leaky", "postgres-database", "Postgres", async (password) => {
      const c = await pgConnect(password);
      await c.end();
    });
    const sessions = await Promise.all([pgConnect(leaked), pgConnect(leaked)]);
    let ended = 0;
    for (const s of sessions) s.on("end", () => ended++);
    const started = Date.now();
    const run = await runMesh([
      "rotate",
      "leaky",
      "postgres-database",
      "--now",
      "--wait",
      "60s",
      "--state",
      state(),
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const applied = Date.now();
    // The new password is on leaky's other login (Postgres alternates two): the leaked one's login
    // no longer logs in at all.
    await assert.rejects(
      pgConnect(leaked),
      /password authentication failed|not permitted to log in/,
      "the leaked password is refused",
    );
    const gone = await until(
      "the leaked password's sessions to end",
      async () => {
        const { rows } = await admin.query<{ n: string }>(
          "SELECT count(*) AS n FROM pg_stat_activity WHERE usename = $1",
          ["leaky_postgres"],
        );
        return Number(rows[0]?.n) === 0 && ended === sessions.length ? Date.now() : undefined;
      },
      { seconds: 10, everyMs: 50 },
    ).catch(said);
    console.log(
      `postgres --now: applied ${applied - started} ms after mesh rotate began (the CLI's start included); ` +
        `sessions gone ${gone - applied} ms after`,
    );
    assert.ok(gone - applied <= 2_000, `the sessions ended within 2 s (${gone - applied} ms)`);
    const next = await until(
      "leaky's credential to name its other login",
      async () => {
        const named = await namedOf("leaky", "postgres-database");
        return named.login !== "leaky_postgres" ? named : undefined;
      },
      { seconds: 30, everyMs: 100 },
    ).catch(said);
    const fresh = await pgConnect(next.password, next.login);
    await fresh.end();
    // The provider's ledger says what it did, with how many sessions (never a password).
    const entry = await until(
      "the provider's ledger to record the sessions it ended",
      async () => {
        const ledger = await runMesh(["ledger", "postgres", "--json", "--state", state()]);
        return /sessions-ended[\s\S]*2 open session\(s\) ended/.test(ledger.stdout)
          ? ledger.stdout
          : undefined;
      },
      { seconds: 30, everyMs: 500 },
    ).catch(said);
    assert.ok(!entry.includes(leaked), "no password in the ledger");
  });

  it("Redis, during an overlapping rotation: both earlier passwords are refused and their sessions gone within 2 s", async () => {
    const first = await passwordTaken("spill", "redis-namespace", "Redis", async (password) => {
      const c = await connectAs(redis, "spill_redis", password);
      await c.disconnect();
    });
    const rotated = await runMesh([
      "rotate",
      "spill",
      "redis-namespace",
      "--wait",
      "60s",
      "--state",
      state(),
    ]);
    assert.equal(rotated.code, 0, rotated.stdout + rotated.stderr);
    const second = await until(
      "spill's copy of the second password",
      async () => {
        const p = await passwordOf("spill", "redis-namespace");
        return p !== first ? p : undefined;
      },
      { seconds: 30, everyMs: 100 },
    ).catch(said);
    // Both valid now (the drain lasts 5 minutes here): a plain rotation is refused, --now is not.
    const plain = await runMesh(["rotate", "spill", "redis-namespace", "--state", state()]);
    assert.equal(plain.code, 1, plain.stdout + plain.stderr);
    assert.match(plain.stderr, /is being rotated \(phase (add|drain) since .*mesh rotate --now/);
    const sessions: Redis[] = [
      await connectAs(redis, "spill_redis", first),
      await connectAs(redis, "spill_redis", second),
    ];
    let ended = 0;
    for (const s of sessions) s.on("end", () => ended++);
    const started = Date.now();
    const run = await runMesh([
      "rotate",
      "spill",
      "redis-namespace",
      "--now",
      "--wait",
      "60s",
      "--state",
      state(),
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const applied = Date.now();
    for (const [which, password] of [
      ["the first", first],
      ["the second", second],
    ] as const) {
      await assert.rejects(
        connectAs(redis, "spill_redis", password),
        /WRONGPASS/,
        `${which} password is refused`,
      );
    }
    const gone = await until(
      "the old passwords' sessions to end",
      () => (ended === sessions.length ? Date.now() : undefined),
      { seconds: 10, everyMs: 20 },
    ).catch(said);
    console.log(
      `redis --now: applied ${applied - started} ms after mesh rotate began (the CLI's start included); ` +
        `sessions gone ${gone - applied} ms after`,
    );
    assert.ok(gone - applied <= 2_000, `the sessions ended within 2 s (${gone - applied} ms)`);
    const newest = await passwordAfter("spill", "redis-namespace", second);
    (await connectAs(redis, "spill_redis", newest)).disconnect();
    const ledger = await runMesh(["ledger", "spill", "--json", "--state", state()]);
    assert.match(ledger.stdout, /"now": ?true/, "the ledger says the rotation was --now");
  });

  it("MariaDB: the leaked password is refused and its open connections are gone within 2 s", async () => {
    const connect = (password: string): Promise<Connection> =>
      createConnection({
        host: mariadb.host,
        port: mariadb.port,
        user: "drip_mysql",
        password,
        connectTimeout: 3_000,
      });
    const leaked = await passwordTaken("drip", "mysql-database", "MariaDB", async (password) => {
      const c = await connect(password);
      await c.end();
    });
    const sessions = await Promise.all([connect(leaked), connect(leaked)]);
    for (const s of sessions) s.on("error", () => undefined);
    // A connection ended by the server fails its next query.
    const alive = async (): Promise<number> =>
      (
        await Promise.all(
          sessions.map((s) =>
            s.query("SELECT 1").then(
              () => 1,
              () => 0,
            ),
          ),
        )
      ).reduce((a: number, b: number) => a + b, 0);
    assert.equal(await alive(), 2, "both connections work before");
    const started = Date.now();
    const run = await runMesh([
      "rotate",
      "drip",
      "mysql-database",
      "--now",
      "--wait",
      "60s",
      "--state",
      state(),
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const applied = Date.now();
    await assert.rejects(connect(leaked), /Access denied/, "the leaked password is refused");
    const gone = await until(
      "the leaked password's connections to end",
      async () => ((await alive()) === 0 ? Date.now() : undefined),
      { seconds: 10, everyMs: 20 },
    ).catch(said);
    console.log(
      `mariadb --now: applied ${applied - started} ms after mesh rotate began (the CLI's start included); ` +
        `connections gone ${gone - applied} ms after`,
    );
    assert.ok(gone - applied <= 2_000, `the connections ended within 2 s (${gone - applied} ms)`);
    await (await connect(await passwordAfter("drip", "mysql-database", leaked))).end();
  });
});
