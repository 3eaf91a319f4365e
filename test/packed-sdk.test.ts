// A module outside the checkout, against the packed @mesh/sdk: `scripts/pack.mjs packages/sdk`
// makes the tarball (its @mesh/* packages inside), `npm install --offline` puts it into a temporary
// directory beside the example module of packages/sdk/example/greeter, and a real `mesh up` runs
// that module, which says a greeting on the bus and hears it. Nothing is resolved from a registry
// (--offline), nor from this checkout: the module's @mesh/sdk is the tarball's.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmod, cp, mkdtemp, readFile, readdir, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const run = promisify(execFile);

describe("a module outside the checkout, with the packed @mesh/sdk", { timeout: 180_000 }, () => {
  let dir: string;
  let moduleDir: string;
  let up: MeshProcess | undefined;

  before(async () => {
    // Readable by the module's own user, should the agent run it as one.
    dir = await realpath(await mkdtemp(join(tmpdir(), "mesh-packed-sdk-")));
    await chmod(dir, 0o755);
    const { stdout } = await run(
      process.execPath,
      [join(ROOT, "scripts", "pack.mjs"), "packages/sdk", "--out", dir],
      {
        cwd: ROOT,
      },
    );
    const tarball = stdout.trim();
    assert.equal(tarball, join(dir, "mesh-sdk-0.2.0.tgz"));
    moduleDir = join(dir, "greeter");
    await cp(join(ROOT, "packages", "sdk", "example", "greeter"), moduleDir, { recursive: true });
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--prefix", moduleDir, tarball], {
      cwd: dir,
    });
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("installs with its @mesh/* packages inside, JavaScript with type declarations, its entry points", async () => {
    const sdk = join(moduleDir, "node_modules", "@mesh", "sdk");
    const pkg = JSON.parse(await readFile(join(sdk, "package.json"), "utf8")) as {
      exports: Record<string, Record<string, string>>;
      bundleDependencies: string[];
    };
    assert.deepEqual(Object.keys(pkg.exports), [".", "./provider", "./client", "./duration", "./redact"]);
    for (const entry of Object.values(pkg.exports)) {
      assert.equal(entry["source"], undefined, "no TypeScript source condition in the shipped package");
      assert.match(entry["types"] ?? "", /\.d\.ts$/);
      await readFile(join(sdk, entry["types"] ?? ""), "utf8");
      await readFile(join(sdk, entry["default"] ?? ""), "utf8");
    }
    assert.ok(
      pkg.bundleDependencies.includes("@mesh/bus") && pkg.bundleDependencies.includes("@mesh/manifest"),
    );
    const bundled = await readdir(join(sdk, "node_modules", "@mesh"));
    assert.deepEqual(bundled.sort(), ["bus", "manifest"]);
    await readFile(join(sdk, "README.md"), "utf8");
    // The installed tree is copies, none a link back into this checkout.
    const bus = await realpath(join(sdk, "node_modules", "@mesh", "bus"));
    assert.ok(relative(ROOT, bus).startsWith(".."), `${bus} is not inside the checkout`);
    assert.ok(bus.startsWith(`${dir}/`), bus);
  });

  it("names only an author's exports on @mesh/sdk, the provider process's on @mesh/sdk/provider", async () => {
    const probe = join(moduleDir, "probe.mjs");
    await writeFile(
      probe,
      `const sdk = await import("@mesh/sdk");
const provider = await import("@mesh/sdk/provider");
console.log(JSON.stringify({ sdk: Object.keys(sdk), provider: Object.keys(provider) }));\n`,
    );
    const { stdout } = await run(process.execPath, [probe], { cwd: moduleDir });
    const { sdk, provider } = JSON.parse(stdout) as { sdk: string[]; provider: string[] };
    for (const name of ["runProvisioner", "connectModuleBus", "guardAdapter", "defineProvider", "ToolError"])
      assert.ok(sdk.includes(name), name);
    for (const name of ["runProviderMain", "serveControl", "callControl", "ActionJournal"]) {
      assert.ok(provider.includes(name), name);
      assert.ok(!sdk.includes(name), `${name} is not on the author's face`);
    }
  });

  it("runs in a mesh: mesh up starts it from its manifest beside the fleet, and it hears its own greeting", async () => {
    const state = join(dir, "state");
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:\n  node-a: {}\nmodules:\n  greeter: { manifest: ./greeter/module.json, node: node-a }\n`,
    );
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state], {}, dir);
    const heard = join(state, "nodes", "node-a", "modules", "greeter", "home", "heard");
    const body = await until(
      "greeter to hear its own greeting",
      async () => (await readFile(heard, "utf8").catch(() => "")) || undefined,
      { seconds: 90 },
    ).catch(async (err: unknown) => {
      const log = await readFile(join(state, "nodes", "node-a", "modules", "greeter", "log"), "utf8").catch(
        () => "(no log)",
      );
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output()}\ngreeter's log:\n${log}`);
    });
    const said = JSON.parse(body) as { text: string; count: number };
    assert.equal(said.text, "hello");
    assert.ok(said.count >= 1);
    // What the SDK's README says `mesh logs greeter` shows.
    const logs = await runMesh(["logs", "greeter", "--state", state], {}, dir);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /greeter: heard \{"text":"hello","count":\d+\} from greeter/);
  });
});
