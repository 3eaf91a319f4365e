// Tools through the mesh, end to end on one machine: `mesh up` runs nats-server, the controller, one
// agent and a real Postgres provider with a consumer; `mesh tool postgres …` from another shell goes
// controller → node-1's agent → the provider's control socket and back, and `mesh ledger postgres`
// shows each call with who asked and what came of it. No password is printed or kept on the way.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";

const root = fileURLToPath(new URL("..", import.meta.url));

// The ledger half needs the controller to issue each module's ledger credential and the agent to
// keep it in its `ledgers` secret; until a controller that does is here, that half is skipped.
const LEDGERS_ISSUED = "MODULE_CREDENTIALS_BUCKET" in (await import("@mesh/controller"));
const WAITS_FOR_LEDGERS = LEDGERS_ISSUED
  ? false
  : "waits for the controller to issue module ledger credentials (MODULE_CREDENTIALS_BUCKET in @mesh/controller)";
const MESH = join(root, "packages", "cli", "bin", "mesh.js");

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

interface LedgerAnswer {
  readonly ok: boolean;
  readonly entries: { seq: number; entry: Record<string, unknown> }[];
}

describe("a tool asked through the mesh", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: ChildProcess;
  let output = "";
  const state = (): string => join(dir, "state");

  /** `mesh args… --state <state>`, from another shell, with no terminal. */
  const mesh = (...args: string[]): Promise<Run> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [MESH, ...args, "--state", state()], {
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.on("close", (code) => resolve({ code, stdout, stderr }));
    });

  const toolEntries = async (): Promise<Record<string, unknown>[]> => {
    const run = await mesh("ledger", "postgres", "--json", "--limit", "100");
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as LedgerAnswer;
    return answer.entries.map((e) => e.entry).filter((e) => e["kind"] === "tool");
  };

  before(async () => {
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-tool-through-"));
    // Traversable, so that where the checkout is readable by other users the provider and notes run
    // as their own users (--isolation auto runs them as this one otherwise).
    await chmod(dir, 0o755);
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-1: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-1
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  notes: { manifest: ${JSON.stringify(join(root, "examples", "fleet", "notes", "module.json"))}, node: node-1 }
`,
    );
    up = spawn(
      process.execPath,
      [MESH, "up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"],
      {
        env: { ...process.env, MESH_POSTGRES_URL: adminUrl, MESH_EVERY: "1s" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    up.stdout?.on("data", (d: Buffer) => (output += d.toString()));
    up.stderr?.on("data", (d: Buffer) => (output += d.toString()));
  });

  after(async () => {
    if (up && up.exitCode === null) {
      up.kill("SIGINT");
      await new Promise((resolve) => up.once("close", resolve));
    }
    await server?.stop();
    if (process.env["MESH_TEST_LOG"]) console.log(output);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("mesh tool postgres status answers from the provider on node-1, as the local path prints it", async () => {
    const status = await until("postgres's status through the mesh, notes' database made", async () => {
      const run = await mesh("tool", "postgres", "status", "--json");
      if (run.code !== 0) throw new Error(run.stderr);
      const report = JSON.parse(run.stdout) as { consumers: { login: string; state: string }[] };
      return report.consumers.some((c) => c.login === "notes_postgres" && c.state === "active")
        ? report
        : undefined;
    });
    assert.equal(status.consumers.length, 1);

    const text = await mesh("tool", "postgres", "status");
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /^LOGIN\s+STATE\s+CLASS\s+SINCE\s+WHY$/m);
    assert.match(text.stdout, /^notes_postgres\s+active\s/m);
  });

  it(
    "each call lands in postgres's ledger: the tool, who asked and what it answered",
    { skip: WAITS_FOR_LEDGERS },
    async () => {
      // Once the agent holds postgres's ledger credential, a call answers with no warning that its
      // ledger entry is missing.
      await until("a status call whose ledger entry is written", async () => {
        const run = await mesh("tool", "postgres", "status", "--json");
        if (run.code !== 0 || run.stderr.includes("warning")) throw new Error(run.stderr);
        return true;
      });
      const entries = await toolEntries();
      const last = entries.at(-1);
      assert.ok(last, "the ledger holds the tool calls");
      assert.equal(last["tool"], "status");
      assert.deepEqual(last["args"], []);
      assert.equal(last["who"], userInfo().username);
      assert.equal(last["ok"], true);
      const kept = last["answer"] as { consumers?: { login: string }[] };
      assert.equal(kept.consumers?.[0]?.login, "notes_postgres");

      const shown = await mesh("ledger", "postgres");
      assert.equal(shown.code, 0, shown.stderr);
      assert.match(shown.stdout, new RegExp(`\\s${userInfo().username} via mesh tool\\s+status\\s+ok`));
    },
  );

  it("a deletion the provider refuses is refused through the mesh (exit 1), and the refusal is in the ledger", async () => {
    const run = await mesh("tool", "postgres", "cleanup", "delete", "notes_postgres", "--yes");
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /postgres did not run cleanup delete/);
    const rows = await server.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_roles WHERE rolname = 'notes_postgres'",
    );
    assert.equal(rows[0]?.n, 1, "notes' login is still there");
    if (!LEDGERS_ISSUED) return;

    assert.doesNotMatch(run.stderr, /warning/);
    const last = (await toolEntries()).at(-1);
    assert.equal(last?.["tool"], "cleanup delete");
    assert.deepEqual(last?.["args"], ["notes_postgres"]);
    assert.equal(last?.["ok"], false);
    assert.equal(typeof last?.["code"], "string");
  });

  it("without a terminal or --yes, a deletion is refused before anything travels (exit 2)", async () => {
    const before = (await toolEntries()).length;
    const run = await mesh("tool", "postgres", "cleanup", "delete", "notes_postgres");
    assert.equal(run.code, 2);
    assert.match(run.stderr, /pass --yes/);
    assert.equal((await toolEntries()).length, before, "nothing reached the ledger");
  });

  it("a module the fleet does not have is refused, naming the modules it has (exit 1)", async () => {
    const run = await mesh("tool", "mysql", "status");
    assert.equal(run.code, 1);
    assert.match(run.stderr, /mysql is not a module of the fleet being served.*notes, postgres/);
  });

  it("a module with no tools says so, naming its node (exit 3)", async () => {
    const run = await mesh("tool", "notes", "status");
    assert.equal(run.code, 3, run.stderr);
    assert.match(run.stderr, /notes on node node-1 answers no tools/);
  });

  it("no password appears in what the tools printed or in the ledger", async () => {
    const secret = (
      await readFile(
        join(state(), "nodes", "node-1", "modules", "notes", "passwords", "postgres-database"),
        "utf8",
      )
    ).trim();
    assert.ok(secret.length > 20);
    const ledger = await mesh("ledger", "postgres", "--json", "--limit", "100");
    const status = await mesh("tool", "postgres", "status", "--json");
    for (const text of [ledger.stdout, status.stdout, status.stderr, output]) {
      assert.ok(!text.includes(secret), "the consumer's password is nowhere");
    }
  });
});
