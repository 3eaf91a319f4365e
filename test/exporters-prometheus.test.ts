// Debian's Prometheus and its exporters for Postgres, Redis and MySQL, run as the example fleet
// (examples/fleet/mesh.yaml) runs them, beside two Mesh-aware apps, by a real `mesh up` against a
// real Postgres, Redis and MariaDB. No line of Mesh code is theirs: their manifests hand them their
// credentials through run.env and run.files. Prometheus finds every target in the file_sd JSON the
// mesh keeps, and the test asks its HTTP API until every target is up and each exporter's own
// metric reads 1 (the controller's /metrics scraped with the mesh's scrape token, handed to
// Prometheus alone, in a 0600 file); then, after `mesh rotate` of each exporter's password, until each exporter was
// restarted after its provider applied the password and reads 1 from its new process, while the
// old password is refused.
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { parse } from "yaml";
import { credentialPath } from "@mesh/manifest";
import { callControl, passwordTag } from "@mesh/sdk/provider";
import {
  freePort,
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
const fleetDir = join(root, "examples", "fleet");

/** The example fleet's modules this test runs: three providers, two Mesh-aware apps, the four Debian programs. */
const RUN = [
  "postgres",
  "redis",
  "mariadb",
  "notes",
  "counter",
  "postgres-exporter",
  "redis-exporter",
  "mysqld-exporter",
  "prometheus",
];

const EXPORTERS = [
  {
    module: "postgres-exporter",
    iface: "postgres-database",
    provider: "postgres",
    login: "postgres_exporter_postgres",
    metric: "pg_up",
  },
  {
    module: "redis-exporter",
    iface: "redis-namespace",
    provider: "redis",
    login: "redis_exporter_redis",
    metric: "redis_up",
  },
  {
    module: "mysqld-exporter",
    iface: "mysql-database",
    provider: "mariadb",
    login: "mysqld_exporter_mysql",
    metric: "mysql_up",
  },
] as const;

interface Target {
  labels: Record<string, string>;
  health: string;
  lastError: string;
  scrapeUrl: string;
}

describe("Prometheus and Debian's exporters in the example fleet", { timeout: 240_000 }, () => {
  let postgres: PostgresServer;
  let redis: RedisServer;
  let mariadb: MariadbServer;
  let dir: string;
  let up: MeshProcess;
  let api: string;
  let fleet: { nodes: Record<string, unknown>; modules: Record<string, Record<string, unknown>> };
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", "node-1");
  // The password the consumer's credential file names now (Postgres moves it to the other login's
  // password file at each rotation).
  const passwordNamed = async (module: string, iface: string): Promise<string> => {
    const credential = JSON.parse(await readFile(credentialPath(nodeState(), module, iface), "utf8")) as {
      passwordFile: string;
    };
    return (await readFile(credential.passwordFile, "utf8")).trim();
  };
  const said = (err: unknown): never => {
    throw new Error(`${(err as Error).message}; mesh up said:\n${up.output().slice(-6000)}`);
  };

  const prom = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${api}${path}`);
    const body = (await res.json()) as { status: string; data: T };
    assert.equal(body.status, "success", `${path}: ${JSON.stringify(body)}`);
    return body.data;
  };
  const targets = async (): Promise<Target[]> =>
    (await prom<{ activeTargets: Target[] }>("/api/v1/targets?state=active")).activeTargets;
  const sample = async (query: string): Promise<number | undefined> => {
    const data = await prom<{ result: { value: [number, string] }[] }>(
      `/api/v1/query?query=${encodeURIComponent(query)}`,
    );
    const value = data.result[0]?.value[1];
    return value === undefined ? undefined : Number(value);
  };
  const pidOf = async (module: string): Promise<number | undefined> => {
    const text = await readFile(join(nodeState(), "processes.json"), "utf8").catch(() => "[]");
    // The agent's records of what it started: a restart removes the old process's, adds the new one's.
    const records = JSON.parse(text) as { kind: string; name: string; pid: number }[];
    return records.filter((r) => r.kind === "module" && r.name === module).at(-1)?.pid;
  };
  const appliedTag = async (provider: string, login: string): Promise<string | undefined> => {
    const control = join(nodeState(), "modules", provider, "home", "control.sock");
    const status = await callControl(control, { tool: "status", who: "test" }).catch(() => undefined);
    return status?.consumers.find((c) => c.login === login)?.applied;
  };

  before(async () => {
    [postgres, redis, mariadb] = await Promise.all([startPostgres(), startRedis(), startMariadb()]);
    const [pgAdmin, mariadbAdmin] = await Promise.all([
      postgres.createAdmin("mesh_admin"),
      mariadb.createAdmin("mesh_admin"),
    ]);
    dir = await mkdtemp(join(tmpdir(), "mesh-exporters-"));
    // Readable by the modules' own users: --isolation auto runs each one as its own user.
    await chmod(dir, 0o755);
    // The example fleet as written, its manifests where it names them; the servers this test started.
    const example = parse(await readFile(join(fleetDir, "mesh.yaml"), "utf8")) as {
      nodes: Record<string, unknown>;
      modules: Record<string, Record<string, unknown>>;
    };
    const served: Record<string, { host: string; port: number }> = {
      postgres: { host: postgres.host, port: postgres.port },
      redis: { host: redis.host, port: redis.port },
      mariadb: { host: mariadb.host, port: mariadb.port },
    };
    const promPort = await freePort();
    api = `http://127.0.0.1:${promPort}`;
    const modules: Record<string, Record<string, unknown>> = {};
    for (const name of RUN) {
      const entry = example.modules[name];
      assert.ok(entry, `the example fleet runs ${name}`);
      const manifest = String(entry["manifest"]);
      modules[name] = {
        ...entry,
        manifest: isAbsolute(manifest) ? manifest : resolve(fleetDir, manifest),
        ...(served[name]
          ? { endpoint: served[name], env: { MESH_EVERY: "1s", MESH_ROTATION_GRACE: "3s" } }
          : {}),
      };
    }
    assert.match(
      String(modules["prometheus"]?.["metrics"]),
      /^127\.0\.0\.1:\d+$/,
      "Prometheus's port is fixed",
    );
    // The example's own port may be taken on this machine; the test gives one that is free.
    modules["prometheus"] = { ...modules["prometheus"], metrics: `127.0.0.1:${promPort}` };
    fleet = { nodes: example.nodes, modules };
    await writeFile(join(dir, "mesh.yaml"), JSON.stringify(fleet, null, 2));
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: pgAdmin,
      MESH_REDIS_URL: redis.adminUrl,
      MESH_MARIADB_URL: mariadbAdmin,
      EXAMPLE_INTERVAL_MS: "1000",
    });
    await up.waitFor(/the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await Promise.all([postgres?.stop(), redis?.stop(), mariadb?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("Prometheus finds every target in the mesh's file_sd: the controller, each provider and each exporter, all up", async () => {
    const expected = [
      "controller",
      "mariadb",
      "mysqld-exporter",
      "postgres",
      "postgres-exporter",
      "prometheus",
      "redis",
      "redis-exporter",
    ];
    const seen = await until(
      "every target to be up in Prometheus",
      async () => {
        const all = await targets().catch(() => undefined);
        if (all === undefined) return undefined;
        const names = all.map((t) => t.labels["module"] ?? t.labels["mesh"] ?? "").sort();
        const upNow = all.every((t) => t.health === "up");
        return upNow && JSON.stringify(names) === JSON.stringify(expected) ? all : undefined;
      },
      { seconds: 120, everyMs: 500 },
    ).catch(said);
    for (const t of seen) assert.equal(t.lastError, "", `${t.scrapeUrl}: ${t.lastError}`);
    // The controller is scraped with the scrape token, by a job of its own: no module is sent it.
    for (const t of seen)
      assert.equal(
        t.labels["job"],
        t.labels["mesh"] === "controller" ? "mesh-controller" : "mesh",
        t.scrapeUrl,
      );
    const token = (await readFile(join(state(), "controller", "scrape.token"), "utf8")).trim();
    const tokenCopy = join(nodeState(), "modules", "prometheus", "files", "scrape-token");
    assert.equal(await readFile(tokenCopy, "utf8"), token, "Prometheus's own copy of the token");
    assert.equal((await stat(tokenCopy)).mode & 0o777, 0o600);
    const promPid = await pidOf("prometheus");
    assert.ok(promPid);
    const argv = await readFile(`/proc/${promPid}/cmdline`, "utf8");
    assert.ok(!argv.includes(token), "the token is never in argv");
    assert.ok(!up.output().includes(token), "nor in mesh up's output");
    const controller = seen.find((t) => t.labels["mesh"] === "controller")?.scrapeUrl ?? "";
    assert.equal((await fetch(controller)).status, 401, "the controller's /metrics asks for the token");
    // The file_sd JSON it read: world-readable, naming no secret, each target a loopback port.
    const file = await readFile(join(state(), "scrape", "targets.json"), "utf8");
    const groups = JSON.parse(file) as { targets: string[]; labels: Record<string, string> }[];
    assert.equal(groups.length, expected.length);
    for (const g of groups) assert.match(g.targets[0] ?? "", /^127\.0\.0\.1:\d+$/);
    for (const port of [9090, 9100, 9104, 9121, 9187])
      assert.ok(!file.includes(`:${port}"`), `no target on the packages' default port ${port}`);

    for (const e of EXPORTERS) {
      const value = await until(
        `${e.metric} to read 1`,
        async () => ((await sample(`${e.metric}{module="${e.module}"}`)) === 1 ? 1 : undefined),
        { seconds: 60, everyMs: 500 },
      ).catch(said);
      assert.equal(value, 1);
    }
    // INFO is all monitoring adds: the Redis exporter sees the server's counters, not CONFIG.
    assert.ok(((await sample('redis_connected_clients{module="redis-exporter"}')) ?? 0) >= 1);
  });

  it("after mesh rotate, each exporter is restarted once its provider applied the password, reads 1 from its new process, and the old password is refused", async () => {
    const before = new Map<
      string,
      { pid: number; tag: string | undefined; password: string; login: string; started: number }
    >();
    for (const e of EXPORTERS) {
      const login = e.login;
      const pid = await pidOf(e.module);
      assert.ok(pid, `${e.module} runs`);
      const password = await passwordNamed(e.module, e.iface);
      // The running process's start time, as Prometheus scraped it from the exporter itself.
      const started = await sample(`process_start_time_seconds{module="${e.module}"}`);
      assert.ok(started !== undefined, `Prometheus has ${e.module}'s process_start_time_seconds`);
      before.set(e.module, { pid, tag: await appliedTag(e.provider, login), password, login, started });
    }
    const rotatedAt = Date.now();
    const restarted = new Map<string, string>();
    const seenAt = new Map<string, number>();
    // Watched while the rotations are asked for, so each new process is seen as it starts.
    const watching = until(
      "each exporter to be restarted",
      async () => {
        for (const e of EXPORTERS) {
          if (restarted.has(e.module)) continue;
          const was = before.get(e.module);
          const pid = await pidOf(e.module);
          if (pid === undefined || pid === was?.pid) continue;
          seenAt.set(e.module, Date.now());
          // Asked the moment the new process is seen: its provider had applied the new password before.
          const tag = await appliedTag(e.provider, was?.login ?? "");
          // Where the login alternates the credential file may move a moment after the restart.
          const password = await until(
            `${e.module}'s credential file to name its new password`,
            async () => {
              const now = await passwordNamed(e.module, e.iface);
              return now !== was?.password ? now : undefined;
            },
            { seconds: 10, everyMs: 20 },
          );
          restarted.set(
            e.module,
            tag === passwordTag(password) && tag !== was?.tag
              ? "after"
              : `provider says ${tag} (was ${was?.tag}), the new password's tag is ${passwordTag(password)}`,
          );
        }
        return restarted.size === EXPORTERS.length ? true : undefined;
      },
      { seconds: 90, everyMs: 50 },
    );
    const askedAt = new Map<string, number>();
    const rotations = (async (): Promise<number> => {
      for (const e of EXPORTERS) {
        askedAt.set(e.module, Date.now());
        const run = await runMesh(["rotate", e.module, e.iface, "--state", state()]);
        assert.equal(run.code, 0, run.stdout + run.stderr);
      }
      return Date.now();
    })();
    const [, rotatedBy] = await Promise.all([watching.catch(said), rotations]);
    for (const e of EXPORTERS)
      assert.equal(restarted.get(e.module), "after", `${e.module} started only after ${e.provider} applied`);

    for (const e of EXPORTERS) {
      // A later process's own start time, as Prometheus scraped it, with its *_up beside it.
      const oldStart = before.get(e.module)?.started ?? Infinity;
      await until(
        `${e.metric} to read 1 from ${e.module}'s new process`,
        async () => {
          const started = await sample(`process_start_time_seconds{module="${e.module}"}`);
          if (started === undefined || started <= oldStart) return undefined;
          return (await sample(`${e.metric}{module="${e.module}"}`)) === 1 ? true : undefined;
        },
        { seconds: 60, everyMs: 500 },
      ).catch(said);
      console.log(
        `${e.module}: its new process seen ${(seenAt.get(e.module) ?? 0) - (askedAt.get(e.module) ?? 0)} ms ` +
          `after its mesh rotate was started, ${e.metric} 1 from it in Prometheus after ` +
          `${Date.now() - (askedAt.get(e.module) ?? 0)} ms (scrape interval 2 s; the three mesh rotate ` +
          `took ${rotatedBy - rotatedAt} ms)`,
      );
    }

    const old = (m: string) => before.get(m) ?? { login: "", password: "" };
    // Every backend keeps the old password valid beside the new one while the apps move (the
    // rotation's drain, 3 s here; Postgres on the consumer's other login); then it is refused.
    await until(
      "Postgres to refuse the old password once the drain ended",
      async () => {
        const pgOld = new pg.Client({
          host: postgres.host,
          port: postgres.port,
          user: old("postgres-exporter").login,
          password: old("postgres-exporter").password,
          database: old("postgres-exporter").login,
        });
        pgOld.on("error", () => {});
        try {
          await pgOld.connect();
          return false;
        } catch (error) {
          return /password authentication failed|not permitted to log in/.test(String(error));
        } finally {
          await pgOld.end().catch(() => {});
        }
      },
      { seconds: 60, everyMs: 500 },
    );
    await until(
      "Redis to refuse the old password once the drain ended",
      () =>
        connectAs(redis, old("redis-exporter").login, old("redis-exporter").password).then(
          (client) => {
            client.disconnect();
            return false;
          },
          (error: unknown) => /WRONGPASS/.test(String(error)),
        ),
      { seconds: 60, everyMs: 500 },
    );
    await until(
      "MariaDB to refuse the old password once the drain ended",
      async () => !(await mariadb.canLogin(old("mysqld-exporter").login, old("mysqld-exporter").password)),
      { seconds: 60, everyMs: 500 },
    );
    assert.doesNotMatch(up.output(), /:\/\/[^@\s/]*:[^@\s/]+@/, "no URL with a password in mesh up's output");
  });

  it("a module that leaves the fleet leaves the file_sd, and Prometheus stops scraping it", async () => {
    const { ["redis-exporter"]: _gone, ...kept } = fleet.modules;
    const path = join(dir, "mesh.yaml");
    await writeFile(`${path}.tmp`, JSON.stringify({ nodes: fleet.nodes, modules: kept }, null, 2));
    await rename(`${path}.tmp`, path);
    await until(
      "Prometheus to drop redis-exporter's target",
      async () => {
        const all = await targets();
        return all.some((t) => t.labels["module"] === "redis-exporter") ? undefined : all;
      },
      { seconds: 60, everyMs: 500 },
    ).catch(said);
    const file = await readFile(join(state(), "scrape", "targets.json"), "utf8");
    assert.doesNotMatch(file, /redis-exporter/);
    assert.match(file, /"postgres-exporter"/, "the others stay");
  });
});
