// A consumer removed by an apply and retired by its provider comes back as it was after
// `mesh fleet rollback`: the same password, the same data. `mesh up` runs the Postgres provider (its
// periodic pass every second, so its five stable passes take seconds) for two apps that log in with
// Debian's psql; `notes` writes one random row at its first start. An apply from another file takes
// it out of the fleet; once the provider counts it retired, a rollback to the first revision brings
// it back, and it logs in with the password it had and reads the row it wrote.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startPostgres, type PostgresServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";
import { postgresFleetYaml } from "./postgres-fleet.ts";

// At its first start it makes its table and one random row; at every start it writes, in its HOME,
// the digest of the URL it was given (its password in it) and the row it reads.
const NOTES = [
  'psql "$DATABASE_URL" -w -qc "create table if not exists notes (note text)" &&',
  'psql "$DATABASE_URL" -w -qc "insert into notes select md5(random()::text) where not exists (select 1 from notes)" &&',
  'psql "$DATABASE_URL" -w -tAc "select note from notes" > "$HOME/row.tmp" &&',
  'printf %s "$DATABASE_URL" | sha256sum > "$HOME/url.tmp" &&',
  'mv "$HOME/url.tmp" "$HOME/url" && mv "$HOME/row.tmp" "$HOME/row";',
  "exec sleep 100000",
].join(" ");

const app = (name: string): object => ({
  name,
  needs: { "postgres-database": { values: {} } },
  run: { command: "/bin/sh", args: ["-c", NOTES], env: { DATABASE_URL: "{postgres-database.url}" } },
});

interface ProviderAnswer {
  provider: string;
  counts: Record<string, number> | null;
}

describe("a rollback brings a retired consumer back as it was", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const home = (m: string) => join(state(), "nodes", "node-a", "modules", m, "home");
  const read = async (path: string) => (await readFile(path, "utf8").catch(() => "")).trim();
  const fleetText = (apps: readonly string[]) => postgresFleetYaml(server, apps);
  const waitFor = <T>(what: string, probe: () => Promise<T | undefined>) =>
    until(what, probe, { seconds: 120, everyMs: 500 }).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up.output()}`);
    });
  const postgres = async (): Promise<ProviderAnswer | undefined> => {
    const run = await runMesh(["status", "--state", state(), "--json"]);
    if (run.code !== 0) return undefined;
    return (JSON.parse(run.stdout) as { providers?: ProviderAnswer[] }).providers?.find(
      (p) => p.provider === "postgres",
    );
  };

  before(async () => {
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-rollback-"));
    await chmod(dir, 0o755);
    for (const name of ["notes", "other"]) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify(app(name)));
    }
    await writeFile(join(dir, "mesh.yaml"), fleetText(["notes", "other"]));
    await writeFile(join(dir, "without-notes.yaml"), fleetText(["other"]));
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
    });
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("removed, retired past its stable passes, then rolled back: same password, same row", async () => {
    const row = await waitFor(
      "notes to write its row",
      async () => (await read(join(home("notes"), "row"))) || undefined,
    );
    const url = await read(join(home("notes"), "url"));
    assert.match(row, /^[0-9a-f]{32}$/);

    const removed = await runMesh(["apply", join(dir, "without-notes.yaml"), "--state", state()]);
    assert.equal(removed.code, 0, removed.stdout + removed.stderr);
    assert.match(removed.stdout, /applied: revision 2 \(was 1\)/);
    await waitFor("the provider to retire notes", async () => {
      const counts = (await postgres())?.counts;
      return counts?.["retired"] === 1 && counts["active"] === 1 ? true : undefined;
    });
    // Retired: its login is refused (NOLOGIN), its data kept.
    const roles = await server.query<{ rolcanlogin: boolean }>(
      "select rolcanlogin from pg_roles where rolname = $1",
      ["notes_postgres"],
    );
    assert.equal(roles[0]?.rolcanlogin, false, "retired: its login is disabled");

    await rm(join(home("notes"), "row"), { force: true });
    await rm(join(home("notes"), "url"), { force: true });
    const rolled = await runMesh(["fleet", "rollback", "1", "--state", state()]);
    assert.equal(rolled.code, 0, rolled.stdout + rolled.stderr);
    assert.match(rolled.stdout, /notes/, "the plan names the consumer brought back");
    assert.doesNotMatch(rolled.stdout, /password\(s\) minted/, "no password is minted: the kept one is used");
    assert.match(rolled.stdout, /applied: revision 3 \(was 2\)/);

    const back = await waitFor(
      "notes to log in again and read its row",
      async () => (await read(join(home("notes"), "row"))) || undefined,
    );
    assert.equal(back, row, "the row it wrote is there: its data was kept");
    assert.equal(await read(join(home("notes"), "url")), url, "it logged in with the same password");
    await waitFor("the provider to count both active", async () =>
      (await postgres())?.counts?.["active"] === 2 ? true : undefined,
    );
    assert.doesNotMatch(up.output(), /postgresql:\/\/[^@\s]*:[^@\s]+@/, "no URL with a password in the log");
  });
});
