// Upgrades, through a real `mesh up` against a real Postgres: the state directory mesh 0.1.0 left
// (test/fixtures/state-0.1.0, made by make-fixture.ts there: one node, a Postgres provider, two apps
// that log in with psql) is started with this checkout's code. It is backed up beside the state and
// migrated, and said so; the bus's buckets are migrated; both apps log in with the passwords 0.1.0
// minted, their password files unchanged; mesh status names the node's release and protocol. A state
// of a newer format is refused, naming both versions, before anything starts.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { MESH_RELEASE, PROTOCOL_VERSION, STATE_FORMAT } from "@mesh/manifest";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { APP_MANIFESTS, fleetYaml } from "./fixtures/state-0.1.0/fleet.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const FIXTURE = join(root, "test", "fixtures", "state-0.1.0", "state.tar.gz");
const APPS = Object.keys(APP_MANIFESTS);

/** Unpacks the 0.1.0 state into `dir/state`, with the apps' manifests and a fleet for `port` beside it. */
async function unpackFixture(dir: string, port: number): Promise<string> {
  const state = join(dir, "state");
  await mkdir(state, { mode: 0o700 });
  execFileSync("tar", ["--extract", "--gzip", "--file", FIXTURE, "--same-permissions", "-C", state]);
  for (const [name, manifest] of Object.entries(APP_MANIFESTS)) {
    await mkdir(join(dir, name), { recursive: true });
    await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest, null, 2));
  }
  await writeFile(
    join(dir, "mesh.yaml"),
    fleetYaml(join(root, "providers", "postgres", "module.json"), port),
  );
  return state;
}

describe("a state made by mesh 0.1.0, started by this mesh", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let state: string;
  let up: MeshProcess;
  let admin: string;
  /** When this mesh started on the state: every ledger entry older than this is 0.1.0's. */
  let upgradedAt: string;
  const passwords = new Map<string, string>();
  const passwordFile = (app: string) =>
    join(state, "nodes", "node-1", "modules", app, "passwords", "postgres-database");
  const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();

  before(async () => {
    server = await startPostgres();
    admin = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-upgrade-"));
    // Readable by the modules' own users, so that --isolation auto runs each app as its own user.
    await chmod(dir, 0o755);
    state = await unpackFixture(dir, server.port);
    for (const app of APPS) passwords.set(app, await readFile(passwordFile(app), "utf8"));
    upgradedAt = new Date().toISOString();
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state, "--isolation", "auto"], {
      MESH_POSTGRES_URL: admin,
    });
    await up.waitFor(/the modules start|error:/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("backs the state up beside it, says so, and migrates it to this format", async () => {
    const said = up.output();
    assert.match(
      said,
      new RegExp(
        `the state in \\S+ is format 1 \\(mesh 0\\.1\\.0\\); this mesh ${MESH_RELEASE.replace(/\./g, "\\.")} migrates it to format ${STATE_FORMAT}`,
      ),
      said,
    );
    const backups = (await readdir(dir)).filter((f) => /^state\.format-1-\d{8}T\d{6}Z\.tar\.gz$/.test(f));
    assert.equal(backups.length, 1, `one backup beside the state: ${(await readdir(dir)).join(", ")}`);
    const backup = join(dir, backups[0] ?? "");
    assert.ok(said.includes(backup), "the log names the backup");
    assert.equal((await stat(backup)).mode & 0o777, 0o600);
    const listed = execFileSync("tar", ["--list", "--gzip", "--file", backup], { encoding: "utf8" });
    for (const kept of ["./controller/controller-keys.json", "./nodes/node-1/keys.json", "./bus/jetstream/"])
      assert.ok(
        listed.split("\n").some((l) => l.startsWith(kept)),
        `the backup holds ${kept}`,
      );
    assert.ok(!listed.includes("format.json"), "the backup is the state as 0.1.0 left it");
    const record = JSON.parse(await readFile(join(state, "format.json"), "utf8")) as {
      format: number;
      release: string;
      migratedFrom?: { format: number; backup: string };
    };
    assert.equal(record.format, STATE_FORMAT);
    assert.equal(record.release, MESH_RELEASE);
    assert.deepEqual(record.migratedFrom, { format: 1, backup });
  });

  it("converges with no password changed: each app logs in with the password 0.1.0 minted", async () => {
    for (const app of APPS) {
      const login = join(state, "nodes", "node-1", "modules", app, "home", "login");
      const said = await until(`${app} to log in`, async () => (await read(login)) || undefined, {
        seconds: 120,
      }).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
      });
      assert.equal(said, `${app}_postgres`, `${app} logged in`);
      assert.equal(
        await readFile(passwordFile(app), "utf8"),
        passwords.get(app),
        `${app}'s password file is unchanged`,
      );
      // The password 0.1.0 minted is the one the backend takes.
      const client = new pg.Client({
        host: "127.0.0.1",
        port: server.port,
        user: `${app}_postgres`,
        password: (passwords.get(app) ?? "").trim(),
        database: "postgres",
      });
      await client.connect();
      await client.end();
    }
    assert.match(
      up.output(),
      new RegExp(
        `the bus's buckets were state format 1 \\(mesh 0\\.1\\.0\\): migrated to format ${STATE_FORMAT}`,
      ),
    );
  });

  it("copies 0.1.0's ledgers into the shared one, every entry, and leaves the old streams for the operator", async () => {
    const copied = await until(
      "the ledgers copied",
      () => (/the operator may remove them/.test(up.output()) ? true : undefined),
      { seconds: 60 },
    );
    assert.ok(copied);
    const said = [...up.output().matchAll(/copied (\d+) entr(?:y|ies) of LEDGER_postgres into MESH_LEDGER/g)];
    const entries = said.reduce((sum, m) => sum + Number(m[1]), 0);
    assert.ok(entries >= 1, "0.1.0 wrote postgres's ledger");
    const ledger = await runMesh(["ledger", "postgres", "--state", state, "--json", "--limit", "1000"]);
    assert.equal(ledger.code, 0, ledger.stderr);
    const shown = (JSON.parse(ledger.stdout) as { entries: { subject: string; at: string }[] }).entries;
    const before = shown.filter((e) => Date.parse(e.at) < Date.parse(upgradedAt));
    assert.equal(before.length, entries, "every entry 0.1.0 wrote, once, with the time it was written");
  });

  it("mesh status shows the node's release and protocol, and the controller's", async () => {
    const json = await runMesh(["status", "--state", state, "--json"]);
    assert.equal(json.code, 0, json.stderr);
    const answer = JSON.parse(json.stdout) as {
      nodes: { name: string; version?: { release: string | null; protocol: number; compatible: boolean } }[];
      mesh?: { release: string; protocol: number; stateFormat: number };
    };
    assert.deepEqual(answer.mesh, {
      release: MESH_RELEASE,
      protocol: PROTOCOL_VERSION,
      stateFormat: STATE_FORMAT,
    });
    const node = await until("node-1 to report its version", async () => {
      const again = JSON.parse(
        (await runMesh(["status", "--state", state, "--json"])).stdout,
      ) as typeof answer;
      return again.nodes.find((n) => n.name === "node-1" && n.version !== undefined);
    });
    assert.deepEqual(node.version, { release: MESH_RELEASE, protocol: PROTOCOL_VERSION, compatible: true });
    const text = await runMesh(["status", "--state", state]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(
      text.stdout,
      new RegExp(
        `^node-1 .*, mesh ${MESH_RELEASE.replace(/\./g, "\\.")} \\(protocol ${PROTOCOL_VERSION}\\)$`,
        "m",
      ),
    );
    assert.match(
      text.stdout,
      new RegExp(
        `^version  mesh ${MESH_RELEASE.replace(/\./g, "\\.")} \\(protocol ${PROTOCOL_VERSION}, state format ${STATE_FORMAT}\\)`,
        "m",
      ),
    );
  });

  it("starts again on the migrated state without another backup", async () => {
    up.child.kill("SIGINT");
    const stopped = await up.done;
    assert.equal(stopped.code, 0, stopped.stderr);
    const again = startMesh(["up", join(dir, "mesh.yaml"), "--state", state, "--isolation", "auto"], {
      MESH_POSTGRES_URL: admin,
    });
    up = again;
    await again.waitFor(/the modules start|error:/);
    assert.doesNotMatch(again.output(), /migrates it|buckets were state format/);
    assert.equal((await readdir(dir)).filter((f) => f.startsWith("state.format-")).length, 1);
  });
});

describe("a state of a newer format than this mesh knows", { timeout: 120_000 }, () => {
  let dir: string;
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("is refused by mesh up and mesh agent, naming both versions, before anything starts", async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-newer-"));
    const state = await unpackFixture(dir, 5432);
    const newer = STATE_FORMAT + 1;
    await writeFile(
      join(state, "format.json"),
      JSON.stringify({ format: newer, release: "9.1.0", at: new Date().toISOString() }),
    );
    const before = await readdir(join(state, "bus"));
    const up = await runMesh(["up", join(dir, "mesh.yaml"), "--state", state]);
    assert.equal(up.code, 1, up.stdout + up.stderr);
    const said = up.stderr;
    assert.match(said, new RegExp(`is format ${newer} \\(written by mesh 9\\.1\\.0\\)`), said);
    assert.match(
      said,
      new RegExp(`this mesh ${MESH_RELEASE.replace(/\./g, "\\.")} reads formats up to ${STATE_FORMAT}`),
    );
    assert.match(said, /Run mesh 9\.1\.0 or later on it/);
    assert.doesNotMatch(said, /starting nats-server/, "no bus was started");
    assert.deepEqual(await readdir(join(state, "bus")), before, "nothing was written in the bus's directory");
    assert.equal((await readdir(dir)).filter((f) => f.startsWith("state.format-")).length, 0, "no backup");

    const agentState = join(state, "nodes", "node-1");
    await writeFile(join(agentState, "format.json"), JSON.stringify({ format: newer }));
    const agent = await runMesh(["agent", "--node", "node-1", "--state", agentState]);
    assert.equal(agent.code, 1, agent.stdout + agent.stderr);
    assert.match(
      agent.stderr,
      new RegExp(
        `is format ${newer}, and this mesh ${MESH_RELEASE.replace(/\./g, "\\.")} reads formats up to ${STATE_FORMAT}`,
      ),
    );
  });
});
