// A failing consumer shows in `mesh status`: `mesh up` runs a nats-server, the controller and one
// agent, which runs the Postgres provider with its own bus credential. The provider's admin password
// is wrong, so it cannot make the consumer; after MESH_FAILING_AFTER it announces the consumer as
// failing on the bus, and the controller's answer to `mesh status` names it. Then the admin's
// password is set to what the provider was given, the provider makes the consumer, announces the
// recovery, and `mesh status` no longer names it.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
// What the provider is told the admin's password is, and (until the fix) it is not.
const GIVEN_PASSWORD = "given-Adm1n-password-xyz";

interface FailingAnswer {
  provider: string;
  interface: string;
  consumer: string;
  login: string;
  node: string | null;
  class: string;
  since: string;
  attempts: number;
  error: string;
  at: string;
}

/** `promise`, or a failure naming `what` and what mesh up said, after `seconds`. */
async function within(what: string, promise: Promise<void>, up: MeshProcess, seconds = 120): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`gave up waiting for ${what}; mesh up said:\n${up.output()}`)),
      seconds * 1000,
    );
  });
  // A rejection after the race is lost is not news.
  promise.catch(() => undefined);
  try {
    await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

describe("a failing consumer in mesh status", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const status = async (...flags: string[]) => {
    const run = await runMesh(["status", "--state", state(), ...flags]);
    assert.equal(run.code, 0, `mesh status failed:\n${run.stdout}${run.stderr}`);
    return run.stdout;
  };
  const failingNow = async (): Promise<FailingAnswer[]> =>
    (JSON.parse(await status("--json")) as { failing?: FailingAnswer[] }).failing ?? [];

  before(async () => {
    server = await startPostgres();
    const realUrl = await server.createAdmin("mesh_admin");
    const url = new URL(realUrl);
    url.password = GIVEN_PASSWORD;
    dir = await mkdtemp(join(tmpdir(), "mesh-standings-"));
    await mkdir(join(dir, "notes"));
    // A consumer with no process of its own: only its standing matters here.
    await writeFile(
      join(dir, "notes", "module.json"),
      JSON.stringify({ name: "notes", needs: { "postgres-database": { values: {} } } }),
    );
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
    env: { MESH_EVERY: 1s, MESH_FAILING_AFTER: 2s }
  notes: { manifest: ./notes/module.json, node: node-a }
`,
    );
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: url.toString(),
      MESH_EVERY: "1s",
      MESH_FAILING_AFTER: "2s",
    });
    await up.waitFor(/4\/4 the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("names the consumer, its class, since when, its attempts and its last error; --json carries the same", async () => {
    // The controller says when it hears a standing; mesh status is asked after that (and again
    // until it answers with it, should the two race).
    await within(
      "the controller to hear the failing standing",
      up.waitFor(/postgres says notes_postgres \(postgres-database\) is failing/),
      up,
    );
    const failing = await until("mesh status to name a failing consumer", async () => {
      const now = await failingNow();
      return now.length > 0 ? now : undefined;
    });
    assert.equal(failing.length, 1, JSON.stringify(failing));
    const [f] = failing;
    assert.equal(f?.consumer, "notes");
    assert.equal(f?.login, "notes_postgres");
    assert.equal(f?.provider, "postgres");
    assert.equal(f?.interface, "postgres-database");
    assert.equal(f?.node, "node-a");
    assert.equal(f?.class, "credentials-rejected");
    assert.ok(!Number.isNaN(Date.parse(f?.since ?? "")), `since is a time: ${f?.since}`);
    assert.ok((f?.attempts ?? 0) >= 1);
    assert.match(f?.error ?? "", /password authentication failed/);

    const text = await status();
    assert.match(text, /FAILING: 1 consumer\(s\)/);
    assert.match(text, /notes \(login notes_postgres, on node-a\): postgres-database from postgres/);
    assert.match(
      text,
      /credentials-rejected since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((\S+ ago|just now)\), \d+ attempt\(s\)/,
    );
    assert.match(text, /last error: .*password authentication failed/);
    assert.ok(
      !text.includes(GIVEN_PASSWORD) && !up.output().includes(GIVEN_PASSWORD),
      "no password is printed",
    );
  });

  it("once the backend takes the provider's password, the consumer recovers and is no longer named", async () => {
    await server.query(`ALTER ROLE mesh_admin PASSWORD '${GIVEN_PASSWORD}'`);
    await within(
      "the controller to hear the recovery",
      up.waitFor(/postgres says notes_postgres is no longer failing/),
      up,
    );
    await until("the recovery to reach mesh status", async () =>
      (await failingNow()).length === 0 ? true : undefined,
    );
    assert.match(await status(), /FAILING: none announced/);
    const rows = await server.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM pg_roles WHERE rolname = 'notes_postgres'",
    );
    assert.equal(rows[0]?.n, 1, "the provider made the consumer's login");
  });
});
