// Two nodes on one machine: `mesh up` runs one nats-server, the controller and two agents with their
// own state directories and keys. The Postgres provider runs on node-a; the notes app on node-b, and a
// second app (blog) on node-a. node-b never receives blog's secret; node-a's provider lists both.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";

const root = fileURLToPath(new URL("..", import.meta.url));
const MESH = join(root, "packages", "cli", "bin", "mesh.js");

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

describe("two agents as two nodes over one nats-server", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: ChildProcess;
  let output = "";
  const state = () => join(dir, "state");

  before(async () => {
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-two-nodes-"));
    const notes = JSON.stringify(join(root, "examples", "fleet", "notes", "module.json"));
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-a: {}
  node-b: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
  notes: { manifest: ${notes}, node: node-b }
  blog:
    manifest: ${notes}
    node: node-a
    needs: { postgres-database: { values: { name: blog } } }
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
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("the consumer on node-b uses the database its provider on node-a made", async () => {
    const log = join(state(), "nodes", "node-b", "modules", "notes", "log");
    await until("notes on node-b storing a note", async () =>
      /stored note/.test(await readFile(log, "utf8")) ? true : undefined,
    );
    const rows = await server.query<{ n: number }>("SELECT count(*)::int AS n FROM notes", [], "notes");
    assert.ok((rows[0]?.n ?? 0) >= 1, "notes were stored in the database on node-a's server");
  });

  it("node-a's provider lists both consumers in its contributions", async () => {
    const file = join(
      state(),
      "nodes",
      "node-a",
      "modules",
      "postgres",
      "receives",
      "postgres-database.json",
    );
    const doc = JSON.parse(await readFile(file, "utf8")) as {
      requirement: string;
      given: { as: string; node: string }[];
    };
    assert.equal(doc.requirement, "postgres-database");
    assert.deepEqual(doc.given.map((g) => `${g.as}@${g.node}`).sort(), [
      "blog_postgres@node-a",
      "notes_postgres@node-b",
    ]);
  });

  it("node-b receives notes' secret and never blog's; every secret file is 0600", async () => {
    // A node's password copies: each consumer's own, and each provider's flat secrets directory.
    const secretsOf = async (node: string): Promise<string[]> => {
      const modules = join(state(), "nodes", node, "modules");
      const files = await filesUnder(modules);
      return files
        .map((f) => f.slice(modules.length + 1))
        .filter((f) => /^[^/]+\/(passwords|secrets)\//.test(f))
        .sort();
    };
    const bFiles = await secretsOf("node-b");
    assert.deepEqual(
      bFiles,
      ["notes/passwords/postgres-database"],
      "node-b holds only its own consumer's secret",
    );
    const aFiles = await secretsOf("node-a");
    assert.deepEqual(
      aFiles,
      [
        "blog/passwords/postgres-database",
        "postgres/secrets/blog.postgres-database",
        "postgres/secrets/notes.postgres-database",
      ],
      "node-a, the provider's node, holds the provider's copy of both and blog's own",
    );
    for (const [node, files] of [
      ["node-a", aFiles],
      ["node-b", bFiles],
    ] as const) {
      for (const f of files) {
        const path = join(state(), "nodes", node, "modules", f);
        assert.equal((await stat(path)).mode & 0o777, 0o600, `${path} is 0600`);
      }
    }
    const blog = await readFile(
      join(state(), "nodes", "node-a", "modules", "blog", "passwords", "postgres-database"),
      "utf8",
    );
    const everythingOnB = await Promise.all(
      (await filesUnder(join(state(), "nodes", "node-b"))).map((f) => readFile(f, "utf8").catch(() => "")),
    );
    assert.ok(
      !everythingOnB.some((text) => text.includes(blog.trim())),
      "blog's password is nowhere on node-b",
    );
    assert.ok(!output.includes(blog.trim()), "nor in anything mesh up printed");
  });

  it("mesh status names both nodes and every consumer; mesh rotate gives notes a new password that works", async () => {
    const run = (...args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const c = spawn(process.execPath, [MESH, ...args, "--state", state()], { stdio: "pipe" });
        let out = "";
        c.stdout.on("data", (d: Buffer) => (out += d.toString()));
        c.stderr.on("data", (d: Buffer) => (out += d.toString()));
        c.on("close", (code) => resolve({ code, out }));
      });
    const status = await run("status", "--json");
    assert.equal(status.code, 0, status.out);
    const answer = JSON.parse(status.out) as { nodes: { name: string }[]; consumers: { login: string }[] };
    assert.deepEqual(answer.nodes.map((n) => n.name).sort(), ["node-a", "node-b"]);
    assert.deepEqual(answer.consumers.map((c) => c.login).sort(), ["blog_postgres", "notes_postgres"]);

    // The credential file names the login and the password file in use: Postgres moves a consumer
    // to its other login (notes_postgres_2) at each rotation, each with its own password file.
    const credential = join(
      state(),
      "nodes",
      "node-b",
      "modules",
      "notes",
      "credentials",
      "postgres-database.json",
    );
    const named = async () =>
      JSON.parse(await readFile(credential, "utf8")) as { login: string; passwordFile: string };
    const first = await named();
    const before = await readFile(first.passwordFile, "utf8");
    const rotated = await run("rotate", "notes", "postgres-database");
    assert.equal(rotated.code, 0, rotated.out);
    const { login, after } = await until("the new password on node-b", async () => {
      const now = await named();
      const password = await readFile(now.passwordFile, "utf8").catch(() => before);
      return password !== before ? { login: now.login, after: password } : undefined;
    });
    assert.equal(login, "notes_postgres_2", "the credential names the second login");
    const { default: pg } = await import("pg");
    await until("the provider applied it", async () => {
      const client = new pg.Client({
        host: server.host,
        port: server.port,
        user: login,
        password: after.trim(),
        database: "notes",
      });
      try {
        await client.connect();
        return true;
      } finally {
        await client.end().catch(() => {});
      }
    });
    const unknown = await run("rotate", "nobody", "postgres-database");
    assert.equal(unknown.code, 1, "an unknown consumer is refused");
    assert.ok(
      !output.includes(after.trim()) && !status.out.includes(after.trim()),
      "the new password is printed nowhere",
    );
  });

  it("each module gets its own bus credential and ledger credential on its own node only", async () => {
    const node = (n: string) => join(state(), "nodes", n);
    for (const [n, modules] of [
      ["node-a", ["blog", "postgres"]],
      ["node-b", ["notes"]],
    ] as const) {
      const ledgers = await until(`${n}'s ledger credentials`, async () => {
        const map = JSON.parse(await readFile(join(node(n), "ledgers"), "utf8")) as Record<string, unknown>;
        return Object.keys(map).length === modules.length ? map : undefined;
      });
      assert.deepEqual(Object.keys(ledgers).sort(), [...modules]);
      assert.equal((await stat(join(node(n), "ledgers"))).mode & 0o777, 0o600);
      for (const m of modules) {
        const creds = join(node(n), "modules", m, "bus.creds");
        await until(`${m}'s bus credential`, () => stat(creds));
        assert.equal((await stat(creds)).mode & 0o777, 0o600);
      }
    }
    const onB = await filesUnder(node("node-b"));
    assert.ok(!onB.some((f) => f.includes(join("modules", "blog"))), "nothing of blog on node-b");
  });

  it("each node has its own keys", async () => {
    const a = await readFile(join(state(), "nodes", "node-a", "keys.json"), "utf8");
    const b = await readFile(join(state(), "nodes", "node-b", "keys.json"), "utf8");
    assert.notEqual(a, b);
    assert.equal((await stat(join(state(), "nodes", "node-b", "keys.json"))).mode & 0o777, 0o600);
  });
});
