// Manifests travel with the fleet: the fleet is applied with every manifest it names, and each
// node's delivery carries its modules' manifests. A node needs only each module's code, in the
// module's directory at the path the fleet names: here, after an apply, one module's module.json is
// removed and another's whole directory, and the mesh is started again from what it stores. The
// first still starts (its MESH_MANIFEST is the delivered text the agent keeps); the second, and a
// module whose command is not there, are not started and `mesh status` says why, naming the node
// and the path, in text and in JSON, without restarting them over and over.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

// Reads a file of its own directory (its code's), and what MESH_MANIFEST names, into its HOME.
const plain = {
  name: "plain",
  description: "a module whose module.json is not on its node",
  run: {
    command: "/bin/sh",
    args: [
      "-c",
      'cat ./code.txt > "$HOME/code"; cat "$MESH_MANIFEST" > "$HOME/seen.tmp"; ' +
        'mv "$HOME/seen.tmp" "$HOME/seen"; echo "$MESH_MANIFEST" > "$HOME/where"; exec sleep 100000',
    ],
  },
};
const absent = { name: "absent", run: { command: "/bin/sh", args: ["-c", "exec sleep 100000"] } };
const ghost = { name: "ghost", run: { command: "./run-me" } };

interface StatusJson {
  nodes: { node: string; modules: { name: string; state: string; restarts: number; reason?: string }[] }[];
}

void describe("manifests travel with the fleet", { timeout: 240_000 }, () => {
  let dir: string;
  let up: MeshProcess | undefined;
  const state = (): string => join(dir, "state");
  const home = (m: string): string => join(state(), "nodes", "node-a", "modules", m, "home");
  const read = async (path: string): Promise<string> => readFile(path, "utf8").catch(() => "");

  const stop = async (): Promise<void> => {
    if (up !== undefined && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    up = undefined;
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-manifests-"));
    await chmod(dir, 0o755);
    for (const m of [plain, absent, ghost]) {
      await mkdir(join(dir, m.name));
      await writeFile(join(dir, m.name, "module.json"), `${JSON.stringify(m, null, 2)}\n`);
    }
    await writeFile(join(dir, "plain", "code.txt"), "the module's own code\n");
    await chmod(join(dir, "plain", "code.txt"), 0o644);
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-a: {}
modules:
  plain: { manifest: ./plain/module.json, node: node-a }
  absent: { manifest: ./absent/module.json, node: node-a }
  ghost: { manifest: ./ghost/module.json, node: node-a }
`,
    );
  });

  after(async () => {
    await stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  void it("starts a module whose module.json is not on its node, from the manifest delivered", async () => {
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"]);
    await until("plain to start", async () => (await read(join(home("plain"), "seen"))) || undefined, {
      seconds: 60,
    }).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
    });
    await stop();

    // Only the code stays: plain's module.json goes, and absent's whole directory.
    await rm(join(dir, "plain", "module.json"));
    await rm(join(dir, "absent"), { recursive: true });
    await rm(join(home("plain"), "seen"));
    up = startMesh(["up", "--state", state(), "--isolation", "auto"]);
    const seen = await until(
      "plain to start again without its module.json",
      async () => (await read(join(home("plain"), "seen"))) || undefined,
      { seconds: 60 },
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; mesh up said:\n${up?.output() ?? ""}`);
    });
    assert.deepEqual(JSON.parse(seen), plain, "MESH_MANIFEST holds the manifest as applied");
    assert.equal(
      (await read(join(home("plain"), "where"))).trim(),
      join(state(), "nodes", "node-a", "modules", "plain", "module.json"),
      "MESH_MANIFEST is the copy the agent keeps",
    );
    assert.equal(
      await read(join(home("plain"), "code")),
      "the module's own code\n",
      "it ran in its directory",
    );
  });

  void it("says in mesh status, naming node and path, which module's directory or command is not on its node", async () => {
    const text = await until(
      "mesh status to say why absent and ghost are not started",
      async () => {
        const run = await runMesh(["status", "--state", state()]);
        return /absent +stopped/.test(run.stdout) && /ghost +stopped/.test(run.stdout)
          ? run.stdout
          : undefined;
      },
      { seconds: 60, everyMs: 1000 },
    );
    const absentDir = join(dir, "absent");
    const ghostCommand = join(dir, "ghost", "run-me");
    assert.ok(
      text.includes(`not started: its directory ${absentDir} is not on node node-a`),
      `status names absent's directory and node:\n${text}`,
    );
    assert.ok(
      text.includes(`not started: its command ${ghostCommand} is not an executable file on node node-a`),
      `status names ghost's command and node:\n${text}`,
    );
    // Not started over and over: a few seconds on, neither has been restarted.
    await new Promise((resolve) => setTimeout(resolve, 3000));
    const run = await runMesh(["status", "--state", state(), "--json"]);
    assert.equal(run.code, 0, run.stderr);
    const modules = (JSON.parse(run.stdout) as StatusJson).nodes.flatMap((n) => n.modules);
    const a = modules.find((m) => m.name === "absent");
    const g = modules.find((m) => m.name === "ghost");
    assert.equal(a?.state, "stopped");
    assert.equal(a?.restarts, 0);
    assert.ok(a?.reason?.includes(`its directory ${absentDir} is not on node node-a`), JSON.stringify(a));
    assert.equal(g?.state, "stopped");
    assert.equal(g?.restarts, 0);
    assert.ok(g?.reason?.includes(`its command ${ghostCommand} is not an executable file on node node-a`));
    assert.equal(modules.find((m) => m.name === "plain")?.state, "running");
    assert.doesNotMatch(up?.output() ?? "", /(absent|ghost) started/, "neither is ever started");
  });
});
