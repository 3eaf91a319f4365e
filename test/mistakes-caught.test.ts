// Mistakes an operator makes, caught where they are made, through a real `mesh up` and a real
// Postgres: a password its provider confirmed before starts its app at once after a restart even
// while the provider cannot reach its backend (a wrong admin URL); `mesh rotate` waits until the
// provider applied the new password and says, by its exit code, when it did not in time.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { EXIT_NOT_APPLIED } from "../packages/cli/src/exit-codes.ts";
import { postgresFleetYaml } from "./postgres-fleet.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

// Logs in once, writes who it is, then stays.
const reportManifest = {
  name: "report",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "sh",
    args: [
      "-c",
      `psql -w "$DATABASE_URL" -tAc "select current_user" > "$HOME/login.tmp" 2>&1; mv "$HOME/login.tmp" "$HOME/login"; exec psql -w "$DATABASE_URL" -tAc "select pg_sleep(100000)"`,
    ],
    env: { DATABASE_URL: "{postgres-database.url}" },
  },
};

// Needs a database and never connects: an app that never started its work, or looks elsewhere.
const idleManifest = {
  name: "idle",
  needs: { "postgres-database": { values: {} } },
  run: { command: "sleep", args: ["100000"] },
};

describe("mistakes caught where they are made, through mesh up", { timeout: 600_000 }, () => {
  let server: PostgresServer;
  let admin: string;
  let dir: string;
  let up: MeshProcess | undefined;
  const state = () => join(dir, "state");
  const home = (m: string) => join(state(), "nodes", "node-a", "modules", m, "home");
  const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();

  const start = async (adminUrl: string): Promise<MeshProcess> => {
    const started = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
      MESH_EVERY: "1s",
      MESH_NEVER_SEEN_AFTER: "3s",
    });
    await started.waitFor(/the modules start/);
    return started;
  };
  const stop = async (): Promise<void> => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    up = undefined;
  };

  before(async () => {
    server = await startPostgres();
    admin = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-mistakes-"));
    await chmod(dir, 0o755);
    for (const m of [reportManifest, idleManifest]) {
      await mkdir(join(dir, m.name));
      await writeFile(join(dir, m.name, "module.json"), JSON.stringify(m, null, 2));
    }
    // The same fleet with the provider's endpoint: left out, while its Postgres is not on 5432.
    await writeFile(
      join(dir, "no-endpoint.yaml"),
      `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    admin: { env: MESH_POSTGRES_URL }
  report: { manifest: ./report/module.json, node: node-a }
`,
    );
    await writeFile(join(dir, "mesh.yaml"), postgresFleetYaml(server, ["report", "idle"]));
  });

  after(async () => {
    await stop();
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("mesh check names both addresses when a provider entry has no endpoint: and its server is elsewhere", async () => {
    const checked = await runMesh(["check", "--fleet", join(dir, "no-endpoint.yaml")], {
      MESH_POSTGRES_URL: admin,
    });
    // Said, not refused: its consumers are sent where the running provider serves (its admin URL).
    assert.equal(checked.code, 0, `${checked.stdout}${checked.stderr}`);
    assert.ok(checked.stdout.includes(`127.0.0.1:5432`), checked.stdout);
    assert.ok(checked.stdout.includes(`127.0.0.1:${server.port}`), checked.stdout);
    assert.match(
      checked.stdout,
      /warning: modules\.postgres has no endpoint:, so its postgres-database consumers are sent where its admin URL points/,
    );
  });

  it("an app that never connects is said never seen connected, and one that connects is not", async () => {
    up = await start(admin);
    type Consumers = { consumers: { consumer: string; neverSeenConnected?: boolean }[] };
    const unseen = await until(
      "idle to be said never seen connected",
      async () => {
        const run = await runMesh(["status", "--state", state(), "--json"]);
        if (run.code !== 0) return undefined;
        const said = JSON.parse(run.stdout) as Consumers;
        return said.consumers.find((c) => c.consumer === "idle")?.neverSeenConnected === true
          ? said
          : undefined;
      },
      { seconds: 180 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
    });
    assert.notEqual(unseen.consumers.find((c) => c.consumer === "report")?.neverSeenConnected, true);
    const text = await runMesh(["status", "--state", state()]);
    assert.match(text.stdout, /NEVER SEEN CONNECTED: 1 consumer/);
    assert.match(text.stdout, /idle \(postgres-database, login idle_postgres/);
  });

  it("mesh rotate --wait ends with 0 once the provider has applied the new password", async () => {
    await until("report to log in", async () => (await read(join(home("report"), "login"))) || undefined, {
      seconds: 120,
    });
    const rotated = await runMesh([
      "rotate",
      "report",
      "postgres-database",
      "--state",
      state(),
      "--wait",
      "90s",
    ]);
    assert.equal(rotated.code, 0, `${rotated.stdout}${rotated.stderr}`);
    assert.match(rotated.stdout, /applied by postgres/);
  });

  it("after a restart with a wrong admin URL, an app whose password was confirmed starts at once", async () => {
    await stop();
    await rm(join(home("report"), "login"), { force: true });
    // Nothing listens there: the provider cannot reach its backend at all.
    up = await start(admin.replace(`:${server.port}/`, `:${await freePort()}/`));
    const said = await until(
      "report to log in again",
      async () => (await read(join(home("report"), "login"))) || undefined,
      { seconds: 90 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
    });
    assert.equal(said, "report_postgres", "it logged in with the password its provider confirmed before");
  });

  it("mesh rotate --wait ends with its own code when the provider cannot apply the new password", async () => {
    const rotated = await runMesh([
      "rotate",
      "report",
      "postgres-database",
      "--state",
      state(),
      "--wait",
      "5s",
    ]);
    assert.equal(rotated.code, EXIT_NOT_APPLIED, `${rotated.stdout}${rotated.stderr}`);
    assert.match(rotated.stderr, /has not applied report's new postgres-database password within 5s/);
  });
});
