// `mesh` as an installed command, on a machine without the checkout: `scripts/pack.mjs
// packages/cli` makes the tarball with every @mesh/* package inside, `npm install -g --offline
// --prefix` installs it (nothing from a registry), and the installed bin runs from a directory
// outside the checkout with plain node.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { chmod, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { cleanEnv, type MeshRun } from "../packages/cli/test/run-mesh.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const exec = promisify(execFile);

describe("mesh installed from its packed tarball", { timeout: 180_000 }, () => {
  let dir: string;
  let bin: string;
  let installed: string;

  /** Runs the installed `mesh args…` in the temporary directory, its PATH without the checkout. */
  const mesh = (args: readonly string[]): Promise<MeshRun> =>
    new Promise((resolve, reject) => {
      const child = spawn(bin, args, { cwd: dir, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
      child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
      child.on("error", reject);
      child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
    });

  before(async () => {
    dir = await realpath(await mkdtemp(join(tmpdir(), "mesh-packed-cli-")));
    await chmod(dir, 0o755);
    const { stdout } = await exec(
      process.execPath,
      [join(ROOT, "scripts", "pack.mjs"), "packages/cli", "--out", dir, "--no-types"],
      { cwd: ROOT },
    );
    const prefix = join(dir, "prefix");
    await exec(
      "npm",
      ["install", "--global", "--offline", "--no-audit", "--no-fund", "--prefix", prefix, stdout.trim()],
      { cwd: dir },
    );
    bin = join(prefix, "bin", "mesh");
    installed = join(prefix, "lib", "node_modules", "@mesh", "cli");
  });

  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("is installed with its @mesh/* packages inside it, copied, none a link into the checkout", async () => {
    for (const name of ["agent", "bus", "controller", "manifest", "sdk", "provider-postgres"]) {
      const at = await realpath(join(installed, "node_modules", "@mesh", name));
      assert.ok(at.startsWith(`${installed}/`), `@mesh/${name} is at ${at}`);
      assert.ok(relative(ROOT, at).startsWith(".."), `@mesh/${name} is not inside the checkout`);
    }
    // The dashboard's page travels with the controller.
    await readFile(join(installed, "node_modules", "@mesh", "controller", "static", "dashboard.js"), "utf8");
  });

  it("says its version and its help, and refuses an unknown command's help with exit 2", async () => {
    const version = JSON.parse(await readFile(join(ROOT, "packages", "cli", "package.json"), "utf8")) as {
      version: string;
    };
    const said = await mesh(["--version"]);
    assert.equal(said.code, 0, said.stderr);
    assert.equal(said.stdout.split("\n")[0], version.version);
    assert.match(said.stdout, /^state format \d+ .*protocol \d+ /m);
    const help = await mesh(["--help"]);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /^Usage: mesh /);
    assert.match(help.stdout, /\bstatus\b/);
    const unknown = await mesh(["unknown", "--help"]);
    assert.equal(unknown.code, 2, unknown.stdout);
    assert.match(unknown.stderr, /unknown command 'unknown'/);
  });

  it("answers mesh status with no mesh running, writes bash completion, and checks a fleet of its providers", async () => {
    const status = await mesh(["status", "--state", join(dir, "no-state")]);
    assert.equal(status.code, 3, `${status.stdout}${status.stderr}`);
    const completion = await mesh(["completion", "bash"]);
    assert.equal(completion.code, 0, completion.stderr);
    assert.match(completion.stdout, /complete .*mesh/);
    // The providers' manifests and built code come with the CLI: a fleet can name them there.
    const manifest = join(installed, "node_modules", "@mesh", "provider-postgres", "module.json");
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:\n  node-a: {}\nmodules:\n  postgres:\n    manifest: ${JSON.stringify(manifest)}\n    node: node-a\n    admin: { env: MESH_POSTGRES_URL }\n`,
    );
    const check = await mesh(["check", "--fleet", join(dir, "mesh.yaml")]);
    assert.equal(check.code, 0, `${check.stdout}${check.stderr}`);
  });
});
