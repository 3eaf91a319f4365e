// `mesh check --fleet` reads each manifest's `run` templates: an unknown credential field, an
// interface the module does not need and a password placed in `args` (which every user of the node
// reads in `ps`) are refused, each naming the manifest's line; a manifest that renders its files
// and environment from its credentials is accepted.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { meshInProcess } from "./run-mesh.ts";

const repo = join(import.meta.dirname, "..", "..", "..");

const app = (run: unknown) =>
  JSON.stringify({ name: "wiki", needs: { "postgres-database": { values: {} } }, run }, null, 2);

describe("mesh check --fleet reads run templates", () => {
  let dir: string;
  const fleet = async (run: unknown): Promise<string> => {
    await writeFile(join(dir, "wiki", "module.json"), app(run));
    const file = join(dir, "mesh.yaml");
    await writeFile(
      file,
      `nodes:\n  a: {}\nmodules:\n  postgres:\n    manifest: ${JSON.stringify(join(repo, "providers", "postgres", "module.json"))}\n    node: a\n    admin: { env: MESH_POSTGRES_URL }\n  wiki: { manifest: ./wiki/module.json, node: a }\n`,
    );
    return file;
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-check-run-"));
    await mkdir(join(dir, "wiki"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("accepts env values and files rendered from the module's credentials", async () => {
    const run = await meshInProcess([
      "check",
      "--fleet",
      await fleet({
        command: "sh",
        args: ["-c", "exec wiki --db-host {postgres-database.host} --config {files.config}"],
        env: { DATABASE_URL: "{postgres-database.url}", DATA: "{module.dir}/data" },
        files: {
          config: '{ "db": "{postgres-database.values.name}", "password": "{postgres-database.password}" }',
        },
        onNewPassword: { signal: "SIGHUP" },
      }),
    ]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
  });

  it("refuses an unknown field, naming the manifest's line", async () => {
    const run = await meshInProcess([
      "check",
      "--fleet",
      await fleet({ command: "wiki", env: { DB_PASSWORD: "{postgres-database.pasword}" } }),
    ]);
    assert.notEqual(run.code, 0);
    assert.match(
      run.stdout + run.stderr,
      /wiki\/module\.json:11: .*run\.env\.DB_PASSWORD .*\{postgres-database\.pasword\}, which is not a credential field/,
    );
  });

  it("refuses an interface the module does not need, naming the line", async () => {
    const run = await meshInProcess([
      "check",
      "--fleet",
      await fleet({ command: "wiki", files: { conf: "redis={redis-namespace.url}" } }),
    ]);
    assert.notEqual(run.code, 0);
    assert.match(
      run.stdout + run.stderr,
      /wiki\/module\.json:11: .*run\.files\.conf .*does not need redis-namespace/,
    );
  });

  it("refuses a password placed in args, which ps shows to every user", async () => {
    const run = await meshInProcess([
      "check",
      "--fleet",
      await fleet({ command: "wiki", args: ["--db", "{postgres-database.url}"] }),
    ]);
    assert.notEqual(run.code, 0);
    assert.match(
      run.stdout + run.stderr,
      /wiki\/module\.json:12: error: run\.args\[1\] puts .*in args, which every user of the node can read in ps.*fix: move it to "env"/s,
    );
  });

  it("refuses a signal that does not exist", async () => {
    const run = await meshInProcess([
      "check",
      "--fleet",
      await fleet({ command: "wiki", onNewPassword: { signal: "SIGNOPE" } }),
    ]);
    assert.notEqual(run.code, 0);
    assert.match(run.stdout + run.stderr, /run\.onNewPassword\.signal is not a signal \(SIGNOPE\)/);
  });
});
