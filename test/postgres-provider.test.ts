// The Postgres provider as an operator runs it — `mesh provider postgres` in its own process — through
// the faults of its life: the backend going away and coming back, a wrong admin password, a kill -9
// in the middle of provisioning. Everything the processes print, and every tool answer, is kept and
// searched at the end for every password used.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { StatusReport } from "@mesh/sdk";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";

const MESH = fileURLToPath(new URL("../packages/cli/bin/mesh.js", import.meta.url));
const output: string[] = [];
/** Every password these tests used: minted ones by login, and the admin's. */
const passwords = new Map<string, string>();

interface Running {
  readonly child: ChildProcess;
  readonly exited: Promise<number | null>;
}

function runProvider(args: string[], env: Record<string, string>): Running {
  const child = spawn(process.execPath, [MESH, "provider", "postgres", ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (d: Buffer) => output.push(d.toString()));
  child.stderr?.on("data", (d: Buffer) => output.push(d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("close", (code) => resolve(code)));
  return { child, exited };
}

async function tool<T>(control: string, ...args: string[]): Promise<T> {
  const child = spawn(process.execPath, [MESH, "tool", "--control", control, ...args, "--json"], {
    stdio: "pipe",
  });
  let out = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => output.push(d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
  output.push(out);
  if (code !== 0) throw new Error(`mesh tool ${args.join(" ")} exited ${code}`);
  return JSON.parse(out) as T;
}

async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp-${randomBytes(4).toString("hex")}`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, path);
}

/** A directory playing the mesh: a contributions file and one secret file per consumer. */
async function meshDir(): Promise<{
  dir: string;
  receives: string;
  control: string;
  ask(logins: string[]): Promise<void>;
}> {
  const dir = await mkdtemp(join(tmpdir(), "mesh-pgproc-"));
  const receives = join(dir, "postgres-database.json");
  return {
    dir,
    receives,
    control: join(dir, "control.sock"),
    async ask(logins) {
      for (const login of logins) {
        const secret = join(dir, `${login}.secret`);
        // Awkward on purpose: quotes, a backslash, $$ and unicode must all work.
        const password = `${randomBytes(18).toString("base64url")}'"\\$$-ü`;
        if (!passwords.has(login)) {
          passwords.set(login, password);
          await writeAtomic(secret, `${password}\n`);
        }
      }
      await writeAtomic(
        receives,
        JSON.stringify({
          requirement: "postgres-database",
          given: logins.map((as) => ({ as, secret: join(dir, `${as}.secret`), node: "n1" })),
        }),
      );
    },
  };
}

function states(report: StatusReport): Record<string, string> {
  return Object.fromEntries(report.consumers.map((c) => [c.login, c.state]));
}

describe("mesh provider postgres, through its faults", () => {
  let server: PostgresServer;
  let adminUrl: string;

  before(async () => {
    server = await startPostgres();
    adminUrl = await server.createAdmin("mesh_admin");
    passwords.set("(admin)", decodeURIComponent(new URL(adminUrl).password));
  });

  after(async () => {
    await server?.stop();
    // The one check over everything: no password used anywhere in these tests was ever printed.
    const everything = output.join("");
    for (const pw of passwords.values()) {
      for (const form of [pw, encodeURIComponent(pw)]) {
        assert.ok(!everything.includes(form), "a password appeared in what the provider or a tool printed");
      }
    }
    assert.ok(everything.length > 1000, "the output was captured");
  });

  it("Postgres down and back: consumers show unreachable, then all converge without a restart", async () => {
    const mesh = await meshDir();
    await mesh.ask(["down_a", "down_b", "down_c"]);
    const p = runProvider(
      [
        ...["--receives", mesh.receives, "--control", mesh.control, "--instance", "downandback"],
        ...["--every", "200ms", "--verify-every", "1s"],
      ],
      { MESH_POSTGRES_URL: adminUrl },
    );
    try {
      await until("all active", async () => {
        const s = states(await tool<StatusReport>(mesh.control, "status"));
        return ["down_a", "down_b", "down_c"].every((l) => s[l] === "active") ? true : undefined;
      });
      await server.halt();
      const failing = await until("all failing, unreachable", async () => {
        const r = await tool<StatusReport>(mesh.control, "status");
        return r.consumers.length === 3 && r.consumers.every((c) => c.state === "failing") ? r : undefined;
      });
      for (const c of failing.consumers) assert.equal(c.class, "unreachable", `${c.login}: ${c.why}`);
      await server.resume();
      await until(
        "all active again",
        async () => {
          const s = states(await tool<StatusReport>(mesh.control, "status"));
          return Object.values(s).every((v) => v === "active") ? true : undefined;
        },
        120,
      );
      assert.equal(p.child.exitCode, null, "the provider never stopped");
    } finally {
      p.child.kill("SIGTERM");
      assert.equal(await p.exited, 0, "SIGTERM stops it cleanly");
      await rm(mesh.dir, { recursive: true, force: true });
    }
  });

  it("a wrong admin password: each consumer failing with class credentials-rejected", async () => {
    const mesh = await meshDir();
    await mesh.ask(["cred_a", "cred_b"]);
    const wrong = new URL(adminUrl);
    wrong.password = "certainly-not-it";
    passwords.set("(wrong admin)", "certainly-not-it");
    const p = runProvider(
      [
        "--receives",
        mesh.receives,
        "--control",
        mesh.control,
        "--instance",
        "wrongadmin",
        "--every",
        "200ms",
      ],
      {
        MESH_POSTGRES_URL: wrong.toString(),
      },
    );
    try {
      const report = await until("both failing", async () => {
        const r = await tool<StatusReport>(mesh.control, "status");
        return r.consumers.length === 2 && r.consumers.every((c) => c.state === "failing") ? r : undefined;
      });
      for (const c of report.consumers) assert.equal(c.class, "credentials-rejected", `${c.login}: ${c.why}`);
    } finally {
      p.child.kill("SIGTERM");
      await p.exited;
      await rm(mesh.dir, { recursive: true, force: true });
    }
  });

  it("kill -9 in the middle of provisioning: a restart converges and still knows what was retired", async () => {
    const mesh = await meshDir();
    const args = [
      "--receives",
      mesh.receives,
      "--control",
      mesh.control,
      "--every",
      "200ms",
      "--verify-every",
      "2s",
    ];
    const env = { MESH_POSTGRES_URL: adminUrl };
    await mesh.ask(["keep_db", "old_db"]);
    let p = runProvider(args, env);
    await until("both active", async () => {
      const s = states(await tool<StatusReport>(mesh.control, "status"));
      return s.keep_db === "active" && s.old_db === "active" ? true : undefined;
    });
    await mesh.ask(["keep_db"]);
    await until("old_db retired", async () =>
      states(await tool<StatusReport>(mesh.control, "status")).old_db === "retired" ? true : undefined,
    );

    const batch = Array.from({ length: 12 }, (_, i) => `batch_${i}`);
    await mesh.ask(["keep_db", ...batch]);
    const admin = new pg.Client({ connectionString: server.superuserUrl });
    await admin.connect();
    try {
      await until(
        "provisioning under way",
        async () => {
          const { rows } = await admin.query<{ n: number }>(
            "SELECT count(*)::int AS n FROM pg_roles WHERE rolname LIKE 'batch\\_%'",
          );
          return (rows[0]?.n ?? 0) >= 1 ? true : undefined;
        },
        60,
      );
      p.child.kill("SIGKILL");
      await p.exited;
      const { rows: made } = await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_database WHERE datname LIKE 'batch\\_%'",
      );
      output.push(`killed with ${made[0]?.n ?? 0} of ${batch.length} databases made\n`);

      p = runProvider(args, env);
      const report = await until("all converged after the restart", async () => {
        const r = await tool<StatusReport>(mesh.control, "status");
        const s = states(r);
        return ["keep_db", ...batch].every((l) => s[l] === "active") ? r : undefined;
      });
      assert.equal(states(report).old_db, "retired", "what was retired before the kill is still retired");
      const cleanup = await tool<{ login: string }[]>(mesh.control, "cleanup", "list");
      assert.deepEqual(
        cleanup.map((c) => c.login),
        ["old_db"],
      );
      const { rows: dbs } = await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_database WHERE datname LIKE 'batch\\_%'",
      );
      assert.equal(dbs[0]?.n, batch.length, "every database exists once");
      const { rows: canLogin } = await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_roles WHERE rolname LIKE 'batch\\_%' AND rolcanlogin",
      );
      assert.equal(canLogin[0]?.n, batch.length);
      const old = await admin.query<{ rolcanlogin: boolean }>(
        "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'old_db'",
      );
      assert.equal(
        old.rows[0]?.rolcanlogin,
        false,
        "old_db is still retired, not deleted and not re-enabled",
      );
      const consumer = new pg.Client({
        host: server.host,
        port: server.port,
        user: "batch_7",
        password: passwords.get("batch_7"),
        database: "batch_7",
      });
      await consumer.connect();
      await consumer.end();
    } finally {
      await admin.end();
      p.child.kill("SIGTERM");
      await p.exited;
      await rm(mesh.dir, { recursive: true, force: true });
    }
  });
});
