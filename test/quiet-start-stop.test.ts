// Quiet when all is well: a one-machine mesh (a Postgres provider and an app that logs in with what
// the mesh gives it) started, asked for its status as the app runs, and stopped with Ctrl-C says no
// warning and no error, at the level it always logs at. Its status names every provider as heard.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { postgresFleetYaml } from "./postgres-fleet.ts";

// Logs in once with its DATABASE_URL, writes what the server said into its HOME, then waits.
const app = {
  name: "app",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "sh",
    args: [
      "-c",
      `psql -w "$DATABASE_URL" -tAc "select current_user" > "$HOME/login.tmp" 2>&1; mv "$HOME/login.tmp" "$HOME/login"; exec sleep 100000`,
    ],
    env: { DATABASE_URL: "{postgres-database.url}" },
  },
};

describe("a one-machine mesh where all is well", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess | undefined;
  const state = () => join(dir, "state");

  before(async () => {
    server = await startPostgres();
    dir = await mkdtemp(join(tmpdir(), "mesh-quiet-"));
    await chmod(dir, 0o755);
    await mkdir(join(dir, "app"));
    await writeFile(join(dir, "app", "module.json"), JSON.stringify(app, null, 2));
    await writeFile(join(dir, "mesh.yaml"), postgresFleetYaml(server, ["app"], { everySecond: false }));
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("starts, answers status with every provider heard, and stops on Ctrl-C with no warning", async () => {
    const admin = await server.createAdmin("mesh_admin");
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: admin,
    });
    const login = join(state(), "nodes", "node-a", "modules", "app", "home", "login");
    const said = await until(
      "the app to log in",
      async () => (await readFile(login, "utf8").catch(() => "")).trim() || undefined,
      {
        seconds: 120,
      },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output()}`);
    });
    assert.equal(said, "app_postgres");

    // Asked once the app runs: the node reports its provider's standing on its own beat, so the
    // provider is heard within a few seconds of the app's first login (bounded), and then nothing is
    // failing and nothing warns.
    const status = await until(
      "status to hear the provider",
      async () => {
        const run = await runMesh(["status", "--state", state()]);
        return run.code === 0 && !/not heard from/.test(run.stdout) ? run : undefined;
      },
      { seconds: 30, everyMs: 500 },
    ).catch(() => runMesh(["status", "--state", state()]));
    assert.equal(status.code, 0, status.stderr);
    assert.doesNotMatch(status.stdout, /not heard from/, status.stdout);
    assert.match(status.stdout, /FAILING: none \(/, status.stdout);

    up.child.kill("SIGINT");
    const ended = await up.done;
    assert.equal(ended.code, 0, up.output());
    const loud = up
      .output()
      .split("\n")
      .filter((l) => /│ (warning|error): /.test(l));
    assert.deepEqual(loud, [], `mesh up said:\n${up.output()}`);
  });
});
