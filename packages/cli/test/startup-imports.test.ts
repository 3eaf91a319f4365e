// What `mesh` loads before it answers: building the program (every command's name, flags and help)
// loads no part of the mesh that runs (controller, agent, providers, the sdk's harness), no parser
// of manifests and fleets, and no cryptography; `mesh status` loads only the NATS client on top.
// Each is loaded by the action that needs it, and a command named first loads only the module that
// defines it (a plain `mesh status` not even that, nor Commander), so a short command starts quickly. The built code is run (dist/main.js,
// what bin/mesh.js runs when the build made no bundle), with a loader hook that lists every file
// loaded: file by file, what each command loads can be told apart. The bundle bin/mesh.js prefers
// (scripts/bundle.mjs) is split at the same dynamic imports, so it loads none of these parts sooner.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { freePort, startRedis, until } from "@mesh/testkit";
import { cleanEnv } from "./run-mesh.ts";

/** The program as tsc built it, module by module. */
const MESH_MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));

/** What no command may load before its action runs (checked against every file's URL). */
const NEVER_AT_START: readonly [string, RegExp][] = [
  ["@mesh/controller", /\/packages\/controller\//],
  ["@mesh/agent", /\/packages\/agent\//],
  ["a provider", /\/providers\/|\/@mesh\/provider-/],
  ["@mesh/sdk's harness or provider process", /\/packages\/sdk\/dist\/(index|provider-entry|harness)\.js$/],
  ["@mesh/manifest's parsers", /\/packages\/manifest\/dist\/(index|manifest|fleet)\.js$/],
  ["all of @mesh/bus", /\/packages\/bus\/dist\/(index|sealing|authority|state)\.js$/],
  ["libsodium", /\/libsodium/],
  ["zod", /\/node_modules\/zod\//],
  ["yaml", /\/node_modules\/yaml\//],
  ["pino", /\/node_modules\/pino\//],
  ["prom-client", /\/node_modules\/prom-client\//],
  ["the JetStream client", /\/@nats-io\/(jetstream|kv)\//],
  ["typescript", /\/node_modules\/typescript\//],
];

describe("what mesh loads before it answers", { timeout: 60_000 }, () => {
  let dir: string;
  let hooks: string;

  /** Runs the built `mesh args…` and returns its exit code and every file it loaded (ESM and CommonJS). */
  const loaded = async (
    args: readonly string[],
    env: Record<string, string> = {},
    whileRunning?: (stop: () => void) => Promise<void>,
  ): Promise<{ code: number | null; files: string[] }> => {
    const list = join(dir, `loaded-${Math.random().toString(36).slice(2)}.txt`);
    const code = await new Promise<number | null>((resolve, reject) => {
      const child = spawn(process.execPath, ["--import", pathToFileURL(hooks).href, MESH_MAIN, ...args], {
        cwd: dir,
        env: cleanEnv({ ...env, MESH_TEST_LOADED: list }),
        stdio: "ignore",
      });
      child.on("error", reject);
      child.on("close", resolve);
      whileRunning?.(() => child.kill("SIGTERM")).catch((error: unknown) => {
        child.kill("SIGKILL");
        reject(error instanceof Error ? error : new Error(String(error)));
      });
    });
    return { code, files: (await readFile(list, "utf8")).split("\n").filter((l) => l !== "") };
  };

  const assertLight = (what: string, files: readonly string[]): void => {
    for (const [name, pattern] of NEVER_AT_START) {
      const file = files.find((f) => pattern.test(f));
      assert.equal(file, undefined, `${what} loads ${name} (${file})`);
    }
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-startup-"));
    // Registered before the program loads: every ES module's URL as it is loaded, and at exit every
    // CommonJS module required (the NATS client is CommonJS), one a line.
    await writeFile(
      join(dir, "hooks.mjs"),
      `import { appendFileSync } from "node:fs";
export async function load(url, context, next) {
  appendFileSync(process.env.MESH_TEST_LOADED, url + "\\n");
  return next(url, context);
}\n`,
    );
    hooks = join(dir, "register.mjs");
    await writeFile(
      hooks,
      `import { appendFileSync } from "node:fs";
import { createRequire, register } from "node:module";
register(${JSON.stringify(pathToFileURL(join(dir, "hooks.mjs")).href)});
const require = createRequire(import.meta.url);
process.on("exit", () => {
  appendFileSync(process.env.MESH_TEST_LOADED, Object.keys(require.cache).map((f) => f + "\\n").join(""));
});\n`,
    );
  });

  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("builds the whole program for --help with none of the mesh's parts", async () => {
    const { code, files } = await loaded(["--help"]);
    assert.equal(code, 0);
    assert.ok(
      files.some((f) => f.endsWith("/packages/cli/dist/cli.js")),
      "the built program ran",
    );
    assertLight("mesh --help", files);
    assert.equal(
      files.find((f) => f.includes("/@nats-io/")),
      undefined,
      "mesh --help loads no NATS client",
    );
  });

  it("says there is no mesh without loading the NATS client", async () => {
    const { code, files } = await loaded(["status", "--state", join(dir, "none")]);
    assert.equal(code, 3);
    assertLight("mesh status (no mesh)", files);
    assert.equal(
      files.find((f) => f.includes("/@nats-io/")),
      undefined,
    );
    // A plain `mesh status` is read without the program: no module that defines commands is loaded,
    // nor Commander (status-flags.ts).
    assert.ok(files.some((f) => f.endsWith("/packages/cli/dist/ask-status.js")));
    assert.equal(
      files.find((f) => f.includes("/node_modules/commander/")),
      undefined,
      "mesh status loads Commander",
    );
    const others = [
      "up",
      "plan",
      "tool",
      "ledger",
      "logs",
      "check",
      "explain",
      "provider",
      "bus-config",
      "join-token",
      "completion",
    ];
    for (const other of others)
      assert.equal(
        files.find((f) => f.endsWith(`/packages/cli/dist/${other}-command.js`)),
        undefined,
        `mesh status loads ${other}-command.js`,
      );
  });

  it("builds status's own commands alone for its help", async () => {
    // Anything but status's plain flags goes to the program: of the modules that define commands,
    // only status's own (up-command.ts) is loaded.
    const { code, files } = await loaded(["status", "--help"]);
    assert.equal(code, 0);
    assertLight("mesh status --help", files);
    assert.ok(files.some((f) => f.endsWith("/packages/cli/dist/up-command.js")));
    for (const other of ["plan", "tool", "ledger", "logs", "completion"])
      assert.equal(
        files.find((f) => f.endsWith(`/packages/cli/dist/${other}-command.js`)),
        undefined,
        `mesh status --help loads ${other}-command.js`,
      );
  });

  it("asks the mesh with the NATS client alone", async () => {
    // A state directory as `mesh up` leaves it, whose bus is not there: the connection is tried.
    const state = join(dir, "state");
    await mkdir(state, { recursive: true });
    await writeFile(join(state, "operator.creds"), "not read before a server answers\n");
    await writeFile(
      join(state, "bus.json"),
      JSON.stringify({ servers: [`nats://127.0.0.1:${await freePort()}`] }),
    );
    const { code, files } = await loaded(["status", "--state", state]);
    assert.equal(code, 3);
    assert.ok(
      files.some((f) => f.includes("/@nats-io/transport-node/")),
      "the NATS client was loaded to ask",
    );
    assertLight("mesh status", files);
  });

  it("runs a provider on the NATS client without the bus's sealing or JWT code", async () => {
    // A provider process holds consumers' passwords: it loads what connects a module to the bus, and
    // nothing that seals, signs or verifies (those are the controller's and the agent's).
    const redis = await startRedis();
    try {
      const receives = join(dir, "redis-namespace.json");
      await writeFile(receives, JSON.stringify({ requirement: "redis-namespace", given: [] }));
      const control = join(dir, "redis.sock");
      const { files } = await loaded(
        ["provider", "redis", "--receives", receives, "--control", control, "--every", "200ms"],
        { MESH_REDIS_URL: redis.adminUrl },
        async (stop) => {
          // The socket is served once the provider runs; a few passes later it is stopped.
          await until("the provider's control socket", () => stat(control), 30);
          await new Promise((resolve) => setTimeout(resolve, 1_000));
          stop();
        },
      );
      assert.ok(
        files.some((f) => f.includes("/providers/redis/dist/")),
        "the redis provider was loaded",
      );
      assert.ok(
        files.some((f) => f.includes("/@nats-io/transport-node/")),
        "the NATS client is loaded, to open the module's bus",
      );
      for (const [name, pattern] of [
        ["libsodium", /\/libsodium/],
        ["the JWT library", /\/@nats-io\/jwt\//],
        ["all of @mesh/bus", /\/packages\/bus\/dist\/(index|sealing|authority|state)\.js$/],
        ["the JetStream client", /\/@nats-io\/(jetstream|kv)\//],
      ] as const) {
        const file = files.find((f) => pattern.test(f));
        assert.equal(file, undefined, `the provider loads ${name} (${file})`);
      }
    } finally {
      await redis.stop();
    }
  });
});
