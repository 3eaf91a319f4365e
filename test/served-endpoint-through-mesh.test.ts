// A consumer is given the endpoint its provider really serves, through a real `mesh up` and a real
// Postgres that is not on the manifest's default port: with no `endpoint:` in the fleet, the app's
// credential names the port the provider's admin URL points at and the app logs in; where the
// fleet's `endpoint:` and the provider disagree, `mesh status` names both.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { freePort, startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

// Logs in once, writes who it is and where it connected, then stays.
const reportManifest = {
  name: "report",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "sh",
    args: [
      "-c",
      `psql -w "$DATABASE_URL" -tAc "select current_user || ' ' || inet_server_port()" > "$HOME/login.tmp" 2>&1; mv "$HOME/login.tmp" "$HOME/login"; exec sleep 100000`,
    ],
    env: { DATABASE_URL: "{postgres-database.url}" },
  },
};

interface EndpointAnswer {
  interface: string;
  given: string;
  from: string;
  serves: string | null;
  disagrees: boolean;
}
interface StatusJson {
  providers?: { provider: string; serves?: string; endpoints?: EndpointAnswer[] }[];
}

describe(
  "a consumer is given the endpoint its provider serves, through mesh up",
  { timeout: 600_000 },
  () => {
    let server: PostgresServer;
    let admin: string;
    let dir: string;
    let up: MeshProcess | undefined;
    const state = () => join(dir, "state");
    const home = (m: string) => join(state(), "nodes", "node-a", "modules", m, "home");
    const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();
    const fleet = (endpoint: string) => `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
${endpoint}    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  report: { manifest: ./report/module.json, node: node-a }
`;
    const endpointOf = async (): Promise<EndpointAnswer | undefined> => {
      const run = await runMesh(["status", "--state", state(), "--json"]);
      if (run.code !== 0) return undefined;
      const said = JSON.parse(run.stdout) as StatusJson;
      return said.providers?.find((p) => p.provider === "postgres")?.endpoints?.[0];
    };

    before(async () => {
      server = await startPostgres();
      assert.notEqual(server.port, 5432, "the test's Postgres is not at the manifest's default port");
      admin = await server.createAdmin("mesh_admin");
      dir = await mkdtemp(join(tmpdir(), "mesh-served-"));
      await chmod(dir, 0o755);
      await mkdir(join(dir, "report"));
      await writeFile(join(dir, "report", "module.json"), JSON.stringify(reportManifest, null, 2));
      await writeFile(join(dir, "mesh.yaml"), fleet(""));
    });

    after(async () => {
      if (up && up.child.exitCode === null) {
        up.child.kill("SIGINT");
        await up.done;
      }
      await server?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("with no endpoint: in the fleet, the app's credential names the port the provider serves and the app logs in", async () => {
      up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
        MESH_POSTGRES_URL: admin,
        MESH_EVERY: "1s",
      });
      await up.waitFor(/the modules start/);
      const said = await until(
        "report to log in",
        async () => (await read(join(home("report"), "login"))) || undefined,
        {
          seconds: 180,
        },
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
      });
      assert.equal(said, `report_postgres ${server.port}`, "it logged in at the port its provider serves");
      const endpoint = await until(
        "status to say where consumers are sent",
        async () => {
          const e = await endpointOf();
          return e?.from === "provider" ? e : undefined;
        },
        { seconds: 120, everyMs: 1000 },
      );
      assert.deepEqual(endpoint, {
        interface: "postgres-database",
        given: `127.0.0.1:${server.port}`,
        from: "provider",
        serves: `127.0.0.1:${server.port}`,
        disagrees: false,
      });
      const text = await runMesh(["status", "--state", state()]);
      assert.match(
        text.stdout,
        new RegExp(`postgres-database consumers are sent to 127\\.0\\.0\\.1:${server.port}, where it serves`),
      );
      assert.doesNotMatch(text.stdout, /ENDPOINT DISAGREES/);
    });

    it("where the fleet's endpoint: and the provider disagree, mesh status names both", async () => {
      const elsewhere = await freePort();
      await writeFile(
        join(dir, "mesh.yaml"),
        fleet(`    endpoint: { host: 127.0.0.1, port: ${elsewhere} }\n`),
      );
      const endpoint = await until(
        "status to name the disagreement",
        async () => {
          const e = await endpointOf();
          return e?.disagrees === true ? e : undefined;
        },
        { seconds: 120, everyMs: 1000 },
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
      });
      assert.deepEqual(endpoint, {
        interface: "postgres-database",
        given: `127.0.0.1:${elsewhere}`,
        from: "fleet",
        serves: `127.0.0.1:${server.port}`,
        disagrees: true,
      });
      const text = await runMesh(["status", "--state", state()]);
      assert.match(text.stdout, /ENDPOINT DISAGREES/);
      assert.ok(text.stdout.includes(`sent to 127.0.0.1:${elsewhere} (the fleet's endpoint:)`), text.stdout);
      assert.ok(text.stdout.includes(`serves at 127.0.0.1:${server.port} (its admin URL`), text.stdout);
    });
  },
);
