// The example fleet's consumer apps, run as the agent runs them (the manifest's `run`, from the
// manifest's directory, with MESH_CREDENTIALS), against a private Postgres and Redis. The mesh's
// part is played by hand through @mesh/manifest: the plan from the real mesh.yaml, credential files
// as credentialFor writes them, and each consumer made by its provider's own adapter.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  checkFleet,
  credentialFor,
  credentialPath,
  derivePlan,
  formatProblem,
  loadFleet,
  loadFleetManifests,
  secretPath,
  type Fleet,
  type Manifest,
  type Plan,
  type PlanEntry,
  type PlanInstance,
} from "@mesh/manifest";
import { createPostgresAdapter, type PostgresAdapter } from "@mesh/provider-postgres";
import { createRedisAdapter, type RedisNamespaceAdapter } from "@mesh/provider-redis";
import { startPostgres, startRedis, type PostgresServer, type RedisServer } from "@mesh/testkit";
import { count, killApps, startApp as runApp, waitForOutput, type RunningApp } from "./run-app.ts";
import { Redis } from "ioredis";

const FLEET_FILE = fileURLToPath(new URL("../mesh.yaml", import.meta.url));
const WAIT_MS = 90_000;

let fleet: Fleet;
let manifests: Map<string, Manifest>;
let plan: Plan;
let stateDir: string;
let postgres: PostgresServer | undefined;
let redis: RedisServer | undefined;
let pgAdapter: PostgresAdapter | undefined;
let redisAdapter: RedisNamespaceAdapter | undefined;

before(async () => {
  fleet = await loadFleet(FLEET_FILE);
  manifests = await loadFleetManifests(fleet);
  plan = derivePlan(fleet, manifests);
  stateDir = await mkdtemp(join(tmpdir(), "mesh-example-apps-"));
  [postgres, redis] = await Promise.all([startPostgres(), startRedis({ aclFile: true })]);
  pgAdapter = createPostgresAdapter({
    adminUrl: await postgres.createAdmin("mesh_admin"),
    instance: "apps-test",
  });
  redisAdapter = createRedisAdapter({ adminUrl: redis.adminUrl, instance: "apps-test" });
});

after(async () => {
  killApps();
  await pgAdapter?.close();
  await redisAdapter?.close();
  await Promise.all([postgres?.stop(), redis?.stop()]);
  if (stateDir) await rm(stateDir, { recursive: true, force: true });
});

function planned(consumer: string, iface: string): { entry: PlanEntry; instance: PlanInstance } {
  for (const instance of plan.instances) {
    const entry = instance.consumers.find((c) => c.consumer === consumer && c.interface === iface);
    if (entry) return { entry, instance };
  }
  assert.fail(`the example fleet's plan has no ${consumer} consuming ${iface}`);
}

async function writeAtomic(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, text, { mode: 0o600 });
  await rename(temp, path);
}

/** Writes the consumer's secret file and credential file as the agent does, for a server on `port`. */
async function deliver(consumer: string, iface: string, port: number, password: string): Promise<void> {
  const { entry, instance } = planned(consumer, iface);
  assert.ok(instance.endpoint, `${instance.provider}'s manifest declares no endpoint`);
  await writeAtomic(secretPath(stateDir, consumer, iface), password);
  const credential = credentialFor(entry, { ...instance.endpoint, host: "127.0.0.1", port }, stateDir);
  await writeAtomic(credentialPath(stateDir, consumer, iface), `${JSON.stringify(credential, null, 2)}\n`);
}

function newPassword(): string {
  return randomBytes(24).toString("base64url");
}

function startApp(name: string, iface: string): RunningApp {
  const manifest = manifests.get(name);
  assert.ok(manifest?.run, `${name}'s manifest says how to run it`);
  return runApp(
    dirname(resolve(manifest.file)),
    {
      MESH_MODULE: name,
      MESH_CREDENTIALS: dirname(credentialPath(stateDir, name, iface)),
      EXAMPLE_INTERVAL_MS: "300",
    },
    manifest.run,
  );
}

/** Waits until the app has printed a line matching `pattern` after `from` characters of output. */
const waitFor = (app: RunningApp, pattern: RegExp, from = 0): Promise<RegExpExecArray> =>
  waitForOutput(app, pattern, WAIT_MS, from);

async function stop(app: RunningApp): Promise<number | null> {
  app.child.kill("SIGTERM");
  return app.exited;
}

const signal = new AbortController().signal;

describe("the example fleet", () => {
  it("checks clean, and each module's manifest says how to start it", () => {
    assert.deepEqual(checkFleet(fleet, manifests).map(formatProblem), []);
    for (const name of ["postgres", "redis", "s3", "oidc", "notes", "counter", "files", "api-client"]) {
      assert.equal(manifests.get(name)?.run?.command, "node", name);
    }
    assert.deepEqual(
      plan.instances.flatMap((i) => i.consumers.map((c) => `${c.consumer} on ${c.consumerNode}`)),
      [
        "mysqld-exporter on node-1",
        "api-client on node-1",
        "notes on node-1",
        "postgres-exporter on node-1",
        "counter on node-1",
        "redis-exporter on node-1",
        "files on node-1",
      ],
    );
  });
});

describe("the notes app", () => {
  it("waits for its credential and its login, then stores notes, takes a new password, never prints one, and exits 0 on SIGTERM", async () => {
    assert.ok(postgres && pgAdapter);
    const { entry } = planned("notes", "postgres-database");
    const provision = { as: entry.login, values: entry.values, derived: entry.derived };
    const first = newPassword();
    const app = startApp("notes", "postgres-database");

    await waitFor(app, /notes: waiting for my credential: .* does not exist yet; retrying every second/);
    await deliver("notes", "postgres-database", postgres.port, first);
    // The credential is there before the provider made the login: the app keeps trying.
    await waitFor(app, /cannot connect to postgresql:\/\/notes_postgres@127\.0\.0\.1:\d+\/notes yet/);
    await pgAdapter.create({ ...provision, password: first }, signal);
    await waitFor(app, /notes: stored note #\d+, the database now holds 3 notes/);

    const second = newPassword();
    await pgAdapter.create({ ...provision, password: second }, signal);
    await deliver("notes", "postgres-database", postgres.port, second);
    const changedAt = (await waitFor(app, /my password changed; reconnecting with the new one/)).index;
    const after = await waitFor(app, /connected to [^\n]*\n(?:.*\n)*?.*holds (\d+) notes/, changedAt);
    assert.ok(Number(after[1]) > 3);

    assert.equal(await stop(app), 0, app.output);
    assert.match(app.output, /notes: stopping \(SIGTERM\)/);
    assert.equal(count(app.output, /waiting for my credential/), 1, `said once:\n${app.output}`);
    // Said once while it waited for its login. (A reconnect racing the rotation, on a busy machine,
    // may wait again, and says so again: that is a new wait, not a repeat.)
    const firstConnected = app.output.search(/connected to /);
    assert.ok(firstConnected > 0, app.output);
    assert.equal(count(app.output.slice(0, firstConnected), /cannot connect to/), 1, "said once");
    for (const password of [first, second]) assert.ok(!app.output.includes(password), app.output);

    const rows = await postgres.query<{ n: number; owner: string }>(
      "SELECT count(*)::int AS n, (SELECT tableowner FROM pg_tables WHERE tablename = 'notes') AS owner FROM notes",
      [],
      "notes",
    );
    assert.ok((rows[0]?.n ?? 0) >= Number(after[1]), JSON.stringify(rows));
    assert.equal(rows[0]?.owner, "notes_postgres");
  });
});

describe("the notes app, when Postgres goes away", () => {
  it("says it lost the connection, retries every second and goes on storing notes when Postgres is back", async () => {
    assert.ok(postgres && pgAdapter);
    const { entry } = planned("notes", "postgres-database");
    const password = newPassword();
    await pgAdapter.create(
      { as: entry.login, values: entry.values, derived: entry.derived, password },
      signal,
    );
    await deliver("notes", "postgres-database", postgres.port, password);
    const app = startApp("notes", "postgres-database");
    await waitFor(app, /stored note #\d+/);

    await postgres.halt();
    const lostAt = (await waitFor(app, /lost the connection|cannot connect to/)).index;
    await postgres.resume();
    await waitFor(app, /connected to [^\n]*\n(?:.*\n)*?.*stored note #\d+/, lostAt);

    assert.equal(await stop(app), 0, app.output);
    assert.ok(!app.output.includes(password), app.output);
  });
});

describe("the counter app", () => {
  it("waits for its credential and its login, then counts visits under its prefix, takes a new password, never prints one, and exits 0 on SIGTERM", async () => {
    assert.ok(redis && redisAdapter);
    const { entry } = planned("counter", "redis-namespace");
    const provision = { as: entry.login, values: entry.values, derived: entry.derived };
    const first = newPassword();
    const app = startApp("counter", "redis-namespace");

    await waitFor(app, /counter: waiting for my credential: .* does not exist yet; retrying every second/);
    await deliver("counter", "redis-namespace", redis.port, first);
    await waitFor(app, /cannot connect to redis:\/\/counter_redis@127\.0\.0\.1:\d+ yet/);
    await redisAdapter.create({ ...provision, password: first }, signal);
    await waitFor(app, /counter: counted visit #3 under counter_redis:visits/);

    const second = newPassword();
    await redisAdapter.create({ ...provision, password: second }, signal);
    await deliver("counter", "redis-namespace", redis.port, second);
    const changedAt = (await waitFor(app, /my password changed; reconnecting with the new one/)).index;
    const after = await waitFor(app, /connected to [^\n]*\n(?:.*\n)*?.*visit #(\d+)/, changedAt);
    assert.ok(Number(after[1]) > 3);

    assert.equal(await stop(app), 0, app.output);
    assert.match(app.output, /counter: stopping \(SIGTERM\)/);
    assert.equal(count(app.output, /waiting for my credential/), 1, `said once:\n${app.output}`);
    // Said once while it waited for its login. (A reconnect racing the rotation, on a busy machine,
    // may wait again, and says so again: that is a new wait, not a repeat.)
    const firstConnected = app.output.search(/connected to /);
    assert.ok(firstConnected > 0, app.output);
    assert.equal(count(app.output.slice(0, firstConnected), /cannot connect to/), 1, "said once");
    for (const password of [first, second]) assert.ok(!app.output.includes(password), app.output);

    const admin = new Redis(redis.adminUrl, { lazyConnect: true });
    try {
      await admin.connect();
      assert.ok(Number(await admin.get("counter_redis:visits")) >= Number(after[1]));
    } finally {
      admin.disconnect();
    }
  });
});
