// `mesh status` shows the retirement that waits for a person and the retired consumers, as the
// dashboard does: `mesh up` runs the Postgres provider for five consumers; four are taken out of the
// fleet, which is more than retires on its own, so after the periodic passes it waits; mesh status
// names the set, its id and the command that approves it. Once approved, it counts four retired.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const CONSUMERS = ["app1", "app2", "app3", "app4", "app5"];

interface ProviderAnswer {
  provider: string;
  answered: boolean;
  counts: Record<string, number> | null;
  waiting: { id: string | null; logins: string[]; count: number } | null;
}

describe("retirements in mesh status", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const fleet = () => join(dir, "mesh.yaml");
  const writeFleet = (consumers: readonly string[]) =>
    writeFile(
      fleet(),
      `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
${consumers.map((c) => `  ${c}: { manifest: ./${c}/module.json, node: node-a }`).join("\n")}
`,
    );
  const status = async (...flags: string[]) => {
    const run = await runMesh(["status", "--state", state(), ...flags]);
    assert.equal(run.code, 0, `mesh status failed:\n${run.stdout}${run.stderr}`);
    return run.stdout;
  };
  const postgres = async (): Promise<ProviderAnswer | undefined> =>
    (JSON.parse(await status("--json")) as { providers?: ProviderAnswer[] }).providers?.find(
      (p) => p.provider === "postgres",
    );

  before(async () => {
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-retirements-"));
    for (const c of CONSUMERS) {
      await mkdir(join(dir, c));
      await writeFile(
        join(dir, c, "module.json"),
        JSON.stringify({ name: c, needs: { "postgres-database": { values: {} } } }),
      );
    }
    await writeFleet(CONSUMERS);
    up = startMesh(["up", fleet(), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
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

  it("names the set waiting for a person, its id and the command that approves it", async () => {
    await up.until("five active consumers", async () =>
      (await postgres())?.counts?.["active"] === 5 ? true : undefined,
    );
    await writeFleet(CONSUMERS.slice(0, 1));
    const waiting = await up.until("the retirement to wait for a person", async () => {
      const p = await postgres();
      return p?.waiting?.id ? p.waiting : undefined;
    });
    assert.deepEqual(waiting.logins, ["app2_postgres", "app3_postgres", "app4_postgres", "app5_postgres"]);
    assert.equal(waiting.count, 4);
    const text = await status();
    assert.match(
      text,
      /WAITS FOR A PERSON: retiring 4 consumer\(s\): app2_postgres, app3_postgres, app4_postgres, app5_postgres/,
    );
    assert.match(text, new RegExp(`approve with: mesh tool postgres retire approve ${waiting.id}`));

    const approve = await runMesh([
      "tool",
      "postgres",
      "retire",
      "approve",
      waiting.id ?? "",
      "--yes",
      "--state",
      state(),
    ]);
    assert.equal(approve.code, 0, approve.stdout + approve.stderr);
    await up.until("four retired consumers", async () =>
      (await postgres())?.counts?.["retired"] === 4 ? true : undefined,
    );
    const after = await status();
    assert.match(after, /4 retired: `mesh tool postgres cleanup list` lists them/);
    assert.doesNotMatch(after, /WAITS FOR A PERSON/);
    assert.match(after, /\npostgres +node-a +1 +0 +0 +0 +4 /);
  });
});
