// Apps that do not know the mesh, run by a real `mesh up --isolation auto` against a real Postgres:
// two shell scripts that log in with Debian's psql. `report` takes DATABASE_URL from its
// environment (restarted on a new password); `pgpass` reads a rendered .pgpass and service file
// (0600, its own user) and logs in again on SIGHUP. After `mesh rotate`, each is handed the new password only once the
// provider's own status says the backend took it; the gap between that apply and the restart or
// signal is measured and printed.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { callControl } from "@mesh/sdk/provider";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

// Logs in once and writes what the server said, and its PID, into its own HOME.
const LOGIN = `psql -w -tAc "select current_user" > "$HOME/login.tmp" 2>&1; mv "$HOME/login.tmp" "$HOME/login"`;

const reportManifest = {
  name: "report",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "sh",
    args: [
      "-c",
      `echo $$ > "$HOME/pid"; psql() { command psql "$DATABASE_URL" "$@"; }; ${LOGIN}; exec sleep 100000`,
    ],
    env: { DATABASE_URL: "{postgres-database.url}" },
  },
};

const pgpassManifest = {
  name: "pgpass",
  needs: { "postgres-database": { values: {} } },
  run: {
    command: "/bin/sh",
    args: [
      "-c",
      `echo $$ > "$HOME/pid"; n=0; trap 'n=$((n+1)); echo $n > "$HOME/hups"; ${LOGIN}' HUP; ${LOGIN}; while :; do sleep 1; done`,
    ],
    // The login in a file too, not in the environment: Postgres moves a consumer to its other
    // login at each rotation, and a signal can change what a file says but not an environment.
    env: {
      PGPASSFILE: "{files.pgpass}",
      PGSERVICEFILE: "{files.service}",
      PGSERVICE: "mesh",
    },
    files: {
      pgpass:
        "{postgres-database.host}:{postgres-database.port}:*:{postgres-database.login}:{postgres-database.password}\n",
      service:
        "[mesh]\nhost={postgres-database.host}\nport={postgres-database.port}\nuser={postgres-database.login}\ndbname={postgres-database.values.name}\n",
    },
    onNewPassword: { signal: "SIGHUP" },
  },
};

describe("an app that does not know the mesh, through mesh up", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const nodeState = () => join(state(), "nodes", "node-a");
  const home = (m: string) => join(nodeState(), "modules", m, "home");
  const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();
  const appliedTag = async (login: string): Promise<string | undefined> => {
    const status = await callControl(join(home("postgres"), "control.sock"), {
      tool: "status",
      who: "test",
    }).catch(() => undefined);
    return status?.consumers.find((c) => c.login === login)?.applied;
  };

  before(async () => {
    server = await startPostgres();
    const admin = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-apps-"));
    // Readable by the modules' own users, so that --isolation auto runs each app as its own user.
    await chmod(dir, 0o755);
    const ghost = { name: "ghost", run: { command: "no-such-program-for-mesh" } };
    const crasher = {
      name: "crasher",
      run: { command: "/bin/sh", args: ["-c", 'echo "crasher: cannot open /etc/crasher.conf" >&2; exit 3'] },
    };
    for (const m of [reportManifest, pgpassManifest, ghost, crasher]) {
      await mkdir(join(dir, m.name));
      await writeFile(join(dir, m.name, "module.json"), JSON.stringify(m, null, 2));
    }
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
    env: { MESH_EVERY: 1s }
  report: { manifest: ./report/module.json, node: node-a }
  pgpass: { manifest: ./pgpass/module.json, node: node-a }
  ghost: { manifest: ./ghost/module.json, node: node-a }
  crasher: { manifest: ./crasher/module.json, node: node-a }
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

  it("starts each app once its provider has applied its password: both log in", async () => {
    for (const m of ["report", "pgpass"]) {
      const said = await until(
        `${m} to log in`,
        async () => (await read(join(home(m), "login"))) || undefined,
        {
          seconds: 90,
        },
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
      });
      assert.equal(said, `${m}_postgres`, `${m} logged in with its password`);
    }
    const pgpass = join(nodeState(), "modules", "pgpass", "files", "pgpass");
    const st = await stat(pgpass);
    assert.equal(st.mode & 0o777, 0o600, "the rendered file is 0600");
    const pid = await read(join(home("pgpass"), "pid"));
    const uid = /\nUid:\s+(\d+)/.exec(await readFile(`/proc/${pid}/status`, "utf8"))?.[1];
    assert.equal(String(st.uid), uid, "the rendered file is owned by the user the module runs as");
    assert.notEqual(st.uid, 0, "the app runs as its own user (mesh-pgpass), not as the agent");
  });

  it("after mesh rotate, restarts (or signals) each app only after the provider applied, and it logs in with the new password", async () => {
    const before = {
      reportPid: await read(join(home("report"), "pid")),
      pgpassPid: await read(join(home("pgpass"), "pid")),
      reportTag: await appliedTag("report_postgres"),
      pgpassTag: await appliedTag("pgpass_postgres"),
    };
    assert.ok(before.reportTag && before.pgpassTag, "the provider names the password it applied");
    for (const m of ["report", "pgpass"]) {
      await rm(join(home(m), "login"), { force: true });
      const rotated = await runMesh(["rotate", m, "postgres-database", "--state", state()]);
      assert.equal(rotated.code, 0, rotated.stdout + rotated.stderr);
    }
    const seen: Record<string, { applied?: number; handed?: number; appliedWhenHanded?: boolean }> = {
      report: {},
      pgpass: {},
    };
    await until(
      "both apps to be handed their new password",
      async () => {
        const now = Date.now();
        for (const m of ["report", "pgpass"] as const) {
          const s = seen[m] ?? {};
          const tag = await appliedTag(`${m}_postgres`);
          if (s.applied === undefined && tag !== undefined && tag !== before[`${m}Tag`]) s.applied = now;
          const handed =
            m === "report"
              ? (await read(join(home(m), "pid"))) !== before.reportPid
              : (await read(join(home(m), "hups"))) !== "";
          if (s.handed === undefined && handed) {
            s.handed = Date.now();
            // Asked again at once: the agent hands a password over only after the provider applied it.
            const again = await appliedTag(`${m}_postgres`);
            s.appliedWhenHanded = again !== undefined && again !== before[`${m}Tag`];
            s.applied ??= s.handed;
          }
        }
        return seen["report"]?.handed !== undefined && seen["pgpass"]?.handed !== undefined
          ? true
          : undefined;
      },
      { seconds: 90, everyMs: 25 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
    });
    for (const m of ["report", "pgpass"]) {
      const s = seen[m] ?? {};
      console.log(
        `${m}: ${m === "report" ? "restarted" : "signalled (SIGHUP)"} ${(s.handed ?? 0) - (s.applied ?? 0)} ms ` +
          `after the provider's status first named the new password as applied (polled every 25 ms)`,
      );
      assert.equal(
        s.appliedWhenHanded,
        true,
        `${m} was handed its password only after the provider applied it`,
      );
    }
    assert.equal(
      await read(join(home("pgpass"), "pid")),
      before.pgpassPid,
      "pgpass was signalled, not restarted",
    );
    for (const m of ["report", "pgpass"]) {
      const said = await until(
        `${m} to log in again`,
        async () => (await read(join(home(m), "login"))) || undefined,
        {
          seconds: 60,
        },
      );
      assert.equal(said, `${m}_postgres`, `${m} logged in with its new password`);
    }
    assert.doesNotMatch(up.output(), /postgresql:\/\/[^@\s]*:[^@\s]+@/, "no URL with a password in the log");
  });

  it("mesh status says a module's command is not on its node, and shows a crashing module's last log lines", async () => {
    const text = await until(
      "mesh status to show the crashing module's log",
      async () => {
        const run = await runMesh(["status", "--state", state()]);
        return /crasher +crashing/.test(run.stdout) ? run.stdout : undefined;
      },
      { seconds: 120, everyMs: 1000 },
    );
    assert.match(
      text,
      /ghost +stopped[^\n]*\n +not started: its command no-such-program-for-mesh is not found on node node-a's PATH \([^)]*\): install it, or give run.command as an absolute path/,
    );
    assert.match(
      text,
      /crasher +crashing[^\n]*\n(?: {4}.*\n)*? {4}last log lines:\n {6}\S+Z err +\| crasher: cannot open \/etc\/crasher.conf/,
    );
    const json = JSON.parse((await runMesh(["status", "--state", state(), "--json"])).stdout) as {
      nodes: { modules: { name: string; state: string; reason?: string; logTail?: string[] }[] }[];
    };
    const modules = json.nodes.flatMap((n) => n.modules);
    assert.match(modules.find((m) => m.name === "ghost")?.reason ?? "", /not found on node node-a's PATH/);
    const tail = modules.find((m) => m.name === "crasher")?.logTail ?? [];
    assert.ok(tail.length >= 1 && tail.length <= 5, JSON.stringify(tail));
    assert.doesNotMatch(up.output(), /ghost started/, "a missing command is never started");
  });
});
