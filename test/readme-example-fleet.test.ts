// The README's example, run as written: `mesh up examples/fleet/mesh.yaml` in a shell where no
// admin URL is set. Each provider is not started for want of its admin URL, and `mesh status` says
// which variable is missing, not "starting"; the README and the example fleet say where the URLs go.
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const PROVIDERS = [
  ["postgres", "MESH_POSTGRES_URL"],
  ["redis", "MESH_REDIS_URL"],
  ["mariadb", "MESH_MARIADB_URL"],
  ["s3", "MESH_S3_URL"],
  ["oidc", "MESH_OIDC_URL"],
] as const;

describe("the README's example fleet without its admin URLs", { timeout: 120_000 }, () => {
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-readme-"));
    // Readable by the modules' own users, as a checkout's ./.mesh-state is.
    await chmod(dir, 0o755);
    // As the README runs it, from the checkout; startMesh's environment has no MESH_ variable.
    up = startMesh(["up", "examples/fleet/mesh.yaml", "--state", state()], {}, root);
    await up.waitFor(/the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("mesh status names each provider's missing variable, and none of them is starting", async () => {
    const text = await until(
      "mesh status to say why each provider is not started",
      async () => {
        const run = await runMesh(["status", "--state", state()]);
        return PROVIDERS.every(([p]) => new RegExp(`\\n {2}${p} +stopped`).test(run.stdout))
          ? run.stdout
          : undefined;
      },
      { seconds: 60, everyMs: 1000 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up.output().slice(-4000)}`);
    });
    for (const [provider, variable] of PROVIDERS) {
      assert.match(
        text,
        new RegExp(
          `\\n {2}${provider} +stopped[^\\n]*\\n {4}not started: the admin URL of ${provider} ` +
            `\\(the agent's variable ${variable}\\) is not set`,
        ),
      );
      assert.doesNotMatch(text, new RegExp(`\\n {2}${provider} +starting`));
    }
    const json = JSON.parse((await runMesh(["status", "--state", state(), "--json"])).stdout) as {
      nodes: { modules: { name: string; state: string; reason?: string }[] }[];
    };
    const modules = json.nodes.flatMap((n) => n.modules);
    for (const [provider, variable] of PROVIDERS) {
      const m = modules.find((x) => x.name === provider);
      assert.equal(m?.state, "stopped", provider);
      assert.match(m?.reason ?? "", new RegExp(`${variable}\\) is not set`));
    }
  });

  it("the README and the example fleet say where each admin URL goes", async () => {
    const fleet = await readFile(join(root, "examples", "fleet", "mesh.yaml"), "utf8");
    const readme = await readFile(join(root, "README.md"), "utf8");
    for (const [provider, variable] of PROVIDERS) {
      assert.match(
        fleet,
        new RegExp(`\\n  ${provider}:\\n(?:    .*\\n)*?    admin: \\{ env: ${variable} \\}`),
      );
      assert.match(
        fleet,
        new RegExp(`set [^\\n]*${variable}|${variable}[^\\n]*before`),
        `the fleet says to set ${variable}`,
      );
      assert.ok(readme.includes(`\`${variable}\``), `the README names ${variable}`);
    }
  });
});
