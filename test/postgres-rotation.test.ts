// A Postgres consumer rotated again and again through a real `mesh up`, while an app that reads its
// credential file, then the password file it names, before each connection logs in every 100 ms:
// not one login fails. Postgres holds one password per role, so each rotation moves the consumer to
// its other login (`app_postgres` and `app_postgres_2`, a member of the first acting as it), the
// old one valid until the drain ends (MESH_ROTATION_GRACE, short here), then disabled.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { callControl } from "@mesh/sdk/provider";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const ROTATIONS = 4;

const appManifest = {
  name: "app",
  needs: { "postgres-database": { values: {} } },
  // The app's logins are made by the test itself, reading the files the agent writes for it.
  run: { command: "/bin/sh", args: ["-c", "exec sleep 100000"] },
};

interface Attempts {
  total: number;
  failed: string[];
  logins: Set<string>;
}

describe(
  "a Postgres consumer rotated through mesh up, with an app that re-reads its files",
  { timeout: 300_000 },
  () => {
    let server: PostgresServer;
    let dir: string;
    let up: MeshProcess;
    const state = () => join(dir, "state");
    const nodeState = () => join(state(), "nodes", "node-a");
    const credentialFile = () => join(nodeState(), "modules", "app", "credentials", "postgres-database.json");
    const providerStatus = async () =>
      callControl(join(nodeState(), "modules", "postgres", "home", "control.sock"), {
        tool: "status",
        who: "test",
      }).catch(() => undefined);

    // One login as the app makes it: the credential file, then the password file it names.
    const logInOnce = async (): Promise<{ login: string; ok: boolean; why?: string }> => {
      const credential = JSON.parse(await readFile(credentialFile(), "utf8")) as {
        login: string;
        passwordFile: string;
        endpoint: { host: string; port: number; path: string };
      };
      const password = (await readFile(credential.passwordFile, "utf8")).replace(/\r?\n$/, "");
      const client = new pg.Client({
        host: credential.endpoint.host,
        port: credential.endpoint.port,
        user: credential.login,
        password,
        database: credential.endpoint.path.replace(/^\//, ""),
        connectionTimeoutMillis: 5_000,
      });
      client.on("error", () => {});
      try {
        await client.connect();
        const { rows } = await client.query<{ who: string }>("SELECT current_user AS who");
        return { login: credential.login, ok: rows[0]?.who === "app_postgres" };
      } catch (err) {
        return { login: credential.login, ok: false, why: (err as Error).message };
      } finally {
        await client.end().catch(() => {});
      }
    };

    before(async () => {
      server = await startPostgres();
      const admin = await server.createAdmin("mesh_admin");
      dir = await mkdtemp(join(tmpdir(), "mesh-pgrot-"));
      // Readable by the modules' own users, so that --isolation auto runs each as its own user.
      await chmod(dir, 0o755);
      await mkdir(join(dir, "app"));
      await writeFile(join(dir, "app", "module.json"), JSON.stringify(appManifest, null, 2));
      await writeFile(
        join(dir, "mesh.yaml"),
        `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s, MESH_ROTATION_GRACE: 2s }
  app: { manifest: ./app/module.json, node: node-a }
`,
      );
      up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
        MESH_POSTGRES_URL: admin,
        MESH_EVERY: "1s",
      });
      await up.waitFor(/the modules start/);
    });

    after(async () => {
      if (up && up.child.exitCode === null) {
        up.child.kill("SIGINT");
        await up.done;
      }
      await server?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it(`logs in every 100 ms through ${ROTATIONS} rotations without one failed login, alternating its two logins`, async () => {
      await until("the app's first login", async () => (await logInOnce().catch(() => undefined))?.ok, {
        seconds: 90,
      }).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
      });

      const attempts: Attempts = { total: 0, failed: [], logins: new Set() };
      let stop = false;
      const loop = (async () => {
        while (!stop) {
          const started = Date.now();
          const r = await logInOnce().catch((err: unknown) => ({
            login: "?",
            ok: false,
            why: (err as Error).message,
          }));
          attempts.total++;
          attempts.logins.add(r.login);
          if (!r.ok) attempts.failed.push(`${new Date().toISOString()} as ${r.login}: ${r.why ?? "?"}`);
          await new Promise((resolve) => setTimeout(resolve, Math.max(0, 100 - (Date.now() - started))));
        }
      })();

      const loginOf = async () =>
        (JSON.parse(await readFile(credentialFile(), "utf8")) as { login: string }).login;
      try {
        for (let i = 0; i < ROTATIONS; i++) {
          const was = await loginOf();
          const rotated = await runMesh(["rotate", "app", "postgres-database", "--state", state()]);
          assert.equal(rotated.code, 0, rotated.stdout + rotated.stderr);
          const now = await until(
            "the credential file to name the other login",
            async () => {
              const login = await loginOf();
              return login !== was ? login : undefined;
            },
            { seconds: 60, everyMs: 50 },
          );
          assert.equal(now, was === "app_postgres" ? "app_postgres_2" : "app_postgres");
          // The drain ends (2 s here) and the old login is disabled before the next rotation.
          await until(
            "the rotation to end",
            async () => {
              const status = await providerStatus();
              const c = status?.consumers.find((x) => x.login === "app_postgres");
              return c !== undefined && c.rotation === undefined ? true : undefined;
            },
            { seconds: 60, everyMs: 100 },
          );
          const old = await server.query<{ can: boolean }>(
            "SELECT rolcanlogin AS can FROM pg_roles WHERE rolname = $1",
            [was],
          );
          assert.equal(old[0]?.can, false, `${was} no longer logs in once the rotation ended`);
        }
      } finally {
        stop = true;
        await loop;
      }
      console.log(
        `postgres rotation: ${attempts.total} logins over ${ROTATIONS} rotations, ${attempts.failed.length} failed`,
      );
      assert.deepEqual(
        attempts.failed,
        [],
        `no login failed; mesh up said:\n${up
          .output()
          .split("\n")
          .filter((l) => /app|rotat|delivery/.test(l))
          .join("\n")}`,
      );
      assert.ok(attempts.total >= 30, `the app kept logging in (${attempts.total} logins)`);
      assert.deepEqual([...attempts.logins].sort(), ["app_postgres", "app_postgres_2"]);
      const owners = await server.query<{ owner: string }>(
        "SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = 'app_postgres'",
        [],
      );
      assert.equal(owners[0]?.owner, "app_postgres", "the database still belongs to the first login");
      assert.doesNotMatch(
        up.output(),
        /postgresql:\/\/[^@\s]*:[^@\s]+@/,
        "no URL with a password in the log",
      );
    });
  },
);
