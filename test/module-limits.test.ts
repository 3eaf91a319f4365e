// A module can harm only itself, end to end: `mesh up` as root puts each module in a cgroup of its
// own, named with the mesh id, with the fleet file's limits. A module that forks 300 children stops
// at its pids limit; one that takes more memory than its limit is killed, and `mesh status` and its
// log say so; a child that left its process group with an empty environment is gone once its module
// stops, and after a kill -9 of mesh up the next start ends it; two meshes on one machine run the
// same module as two users. Real processes, this machine's cgroups (v1 and the v2 unified mount).
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { removeStaleModuleUsers, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const IS_ROOT = process.getuid?.() === 0;
const HIERARCHIES = ["pids", "memory", "cpu", "freezer"].map((c) => `/sys/fs/cgroup/${c}`);
const HAS_CGROUPS = HIERARCHIES.some((h) => existsSync(join(h, "cgroup.procs")));
const SKIP = !IS_ROOT
  ? "needs root: only root makes cgroups and module users"
  : !HAS_CGROUPS
    ? "needs a cgroup hierarchy (v1 pids, memory, cpu or freezer under /sys/fs/cgroup)"
    : false;
const UNIFIED = "/sys/fs/cgroup/unified";

// Forks `sleep` 300 times as fast as it can, counting what the kernel lets start, then stays.
const FORKER = `import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
let started = 0, refused = 0;
const done = () => {
  if (started + refused === 300) writeFileSync(process.env.HOME + "/forked", JSON.stringify({ started, refused }));
};
for (let i = 0; i < 300; i++) {
  const child = spawn("sleep", ["600"], { stdio: "ignore" });
  child.once("spawn", () => { started++; done(); });
  child.once("error", () => { refused++; done(); });
}
process.on("SIGTERM", () => process.exit(0));
setInterval(() => {}, 1000);
`;

// Takes 16 MiB more every 10 ms, until the kernel says no.
const HOG = `const held = [];
setInterval(() => { for (let i = 0; i < 16; i++) held.push(Buffer.alloc(1 << 20, 1)); }, 10);
`;

// Leaves its process group with an empty environment, ignoring TERM and HUP, and says its PID.
const ESCAPER = `#!/bin/sh
setsid env -i /bin/sh -c 'trap "" TERM HUP; echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 1000' sh "$HOME/child.pid" &
trap 'exit 0' TERM
while :; do sleep 1; done
`;

const QUIET = `#!/bin/sh
trap 'exit 0' TERM
while :; do sleep 1; done
`;

interface StatusModule {
  readonly name: string;
  readonly state: string;
  readonly pid?: number;
  readonly cgroup?: string;
  readonly limits?: { pids: number | null; memory: number | null; cpu: number | null; home: number | null };
  readonly limitEvent?: { kind: string; text: string; at: string };
  readonly isolation?: { isolated: boolean; user: string };
}

async function statusOf(state: string, module: string): Promise<StatusModule | undefined> {
  const run = await runMesh(["status", "--json", "--state", state]);
  if (run.code !== 0) return undefined;
  const answer = JSON.parse(run.stdout) as { nodes: { modules?: StatusModule[] }[] };
  return answer.nodes.flatMap((n) => n.modules ?? []).find((m) => m.name === module);
}

const alive = (pid: number): boolean => {
  try {
    return !/^\d+ \(.*\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
};

// Every cgroup of the mesh `id` left in any hierarchy, v2 included.
const cgroupsOf = (id: string): string[] =>
  [...HIERARCHIES, UNIFIED].flatMap((h) => {
    try {
      return readdirSync(h)
        .filter((n) => n.startsWith(`mesh-${id}-`))
        .map((n) => join(h, n));
    } catch {
      return [];
    }
  });

describe("each module in a cgroup of its own, with its limits", { timeout: 600_000, skip: SKIP }, () => {
  let dir: string;
  let up: MeshProcess | undefined;
  let other: MeshProcess | undefined;
  const state = (): string => join(dir, "state");
  const otherState = (): string => join(dir, "other");
  const node = (s = state()): string => join(s, "nodes", "node-1");
  const home = (m: string): string => join(node(), "modules", m, "home");
  const meshId = (s = state()): string => readFileSync(join(node(s), "mesh-id"), "utf8").trim();

  const fleetYaml = (modules: readonly string[]): string => {
    const entries: Record<string, string> = {
      forker: "  forker: { manifest: ./forker/module.json, node: node-1, limits: { pids: 100 } }",
      hog: "  hog: { manifest: ./hog/module.json, node: node-1, limits: { memory: 64M } }",
      escaper: "  escaper: { manifest: ./escaper/module.json, node: node-1 }",
      quiet: "  quiet: { manifest: ./quiet/module.json, node: node-1 }",
    };
    return `nodes:\n  node-1: {}\nmodules:\n${modules.map((m) => entries[m]).join("\n")}\n`;
  };
  const writeFleet = async (file: string, modules: readonly string[]): Promise<void> => {
    await writeFile(`${file}.next`, fleetYaml(modules), { mode: 0o644 });
    await rename(`${file}.next`, file);
  };
  const startUp = (fleet: string, s: string): MeshProcess => {
    const mesh = startMesh(["up", fleet, "--state", s, "--grace", "3s"]);
    mesh.child.stdin?.end();
    return mesh;
  };
  const running = (s: string, module: string): Promise<StatusModule> =>
    until(
      `${module} to run`,
      async () => {
        const m = await statusOf(s, module);
        return m?.state === "running" && m.pid !== undefined ? m : undefined;
      },
      { seconds: 180 },
    );

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-limits-"));
    await chmod(dir, 0o755);
    const programs: Record<string, { command: string; args: string[]; file: string; text: string }> = {
      forker: { command: "/usr/bin/node", args: ["./forker.mjs"], file: "forker.mjs", text: FORKER },
      hog: { command: "/usr/bin/node", args: ["./hog.mjs"], file: "hog.mjs", text: HOG },
      escaper: { command: "/bin/sh", args: ["./escaper.sh"], file: "escaper.sh", text: ESCAPER },
      quiet: { command: "/bin/sh", args: ["./quiet.sh"], file: "quiet.sh", text: QUIET },
    };
    for (const [name, p] of Object.entries(programs)) {
      await mkdir(join(dir, name), { mode: 0o755 });
      await writeFile(
        join(dir, name, "module.json"),
        JSON.stringify({ name, run: { command: p.command, args: p.args } }),
        { mode: 0o644 },
      );
      await writeFile(join(dir, name, p.file), p.text, { mode: 0o755 });
    }
    await writeFleet(join(dir, "mesh.yaml"), ["forker", "hog", "escaper", "quiet"]);
    // The second mesh's fleet names the same quiet module, from its own directory.
    await mkdir(join(dir, "second"), { mode: 0o755 });
    await writeFile(join(dir, "second", "mesh.yaml"), fleetYaml(["quiet"]).replace("./quiet/", "../quiet/"), {
      mode: 0o644,
    });
    up = startUp(join(dir, "mesh.yaml"), state());
    other = startUp(join(dir, "second", "mesh.yaml"), otherState());
    await running(state(), "quiet");
  });

  after(async () => {
    for (const mesh of [up, other]) {
      if (mesh !== undefined && mesh.child.exitCode === null && mesh.child.signalCode === null) {
        mesh.child.kill("SIGINT");
        await mesh.done;
      }
    }
    if (process.env["MESH_TEST_LOG"]) console.log(up?.output(), other?.output());
    if (dir) await rm(dir, { recursive: true, force: true });
    removeStaleModuleUsers();
  });

  it("runs each module in a cgroup named with the mesh id, in every hierarchy, as its own user, under the default limits", async () => {
    const id = meshId();
    assert.match(id, /^[a-z2-7]{6}$/);
    const quiet = await running(state(), "quiet");
    assert.equal(quiet.cgroup, `mesh-${id}-quiet`);
    assert.deepEqual(quiet.isolation, { isolated: true, user: `mesh-${id}-quiet` });
    assert.deepEqual(quiet.limits, { pids: 512, memory: null, cpu: null, home: null });
    const lines = readFileSync(`/proc/${quiet.pid}/cgroup`, "utf8").split("\n");
    for (const controller of ["pids", "memory", "cpu", "freezer"]) {
      const line = lines.find((l) => l.split(":")[1]?.split(",").includes(controller));
      assert.ok(line?.endsWith(`/mesh-${id}-quiet`), `${controller}: ${line}`);
    }
    if (existsSync(UNIFIED)) assert.ok(lines.includes(`0::/mesh-${id}-quiet`), lines.join("\n"));
  });

  it("stops a module's forks at pids: 100 — of 300 children fewer than 100 start — and mesh status says the limit was reached", async () => {
    const forked = await until(
      "forker to count its children",
      async () =>
        JSON.parse(await readFile(join(home("forker"), "forked"), "utf8")) as {
          started: number;
          refused: number;
        },
      { seconds: 180 },
    );
    assert.ok(forked.started > 0 && forked.started < 100, JSON.stringify(forked));
    assert.equal(forked.started + forked.refused, 300);
    const shown = await until(
      "mesh status to say the pids limit",
      async () => (await statusOf(state(), "forker"))?.limitEvent,
      { seconds: 120 },
    );
    assert.equal(shown.kind, "pids");
    assert.match(shown.text, /^pids limit 100 reached/);
    const text = await runMesh(["status", "--state", state()]);
    assert.match(
      text.stdout,
      /forker +running[^\n]*\n(?: {4}[^\n]*\n)*? {4}pids limit 100 reached[^\n]* at /,
    );
    const log = await readFile(join(node(), "modules", "forker", "log"), "utf8");
    assert.match(log, /mesh *\| mesh agent: forker pids limit 100 reached/);
  });

  it("kills a module that takes more memory than its 64M, and mesh status and its log say out of memory", async () => {
    const shown = await until(
      "mesh status to say hog ran out of memory",
      async () => {
        const m = await statusOf(state(), "hog");
        return m?.limitEvent?.kind === "out-of-memory" ? m : undefined;
      },
      { seconds: 180 },
    );
    assert.match(shown.limitEvent?.text ?? "", /^killed: out of memory \(limit 64M\)$/);
    assert.deepEqual(shown.limits?.memory, 64 * 1024 * 1024);
    const text = await runMesh(["status", "--state", state()]);
    assert.match(text.stdout, / {4}killed: out of memory \(limit 64M\) at /);
    const log = await readFile(join(node(), "modules", "hog", "log"), "utf8");
    assert.match(log, /mesh *\| mesh agent: hog killed: out of memory \(limit 64M\)/);
  });

  it("after a kill -9 of mesh up, the next start ends the child a module left with setsid and an empty environment", async () => {
    const id = meshId();
    await running(state(), "escaper");
    const child = await until(
      "escaper's child to say its PID",
      async () => Number((await readFile(join(home("escaper"), "child.pid"), "utf8")).trim()) || undefined,
    );
    const environ = readFileSync(`/proc/${child}/environ`, "latin1");
    assert.doesNotMatch(environ, /MESH_/, "nothing in its environment says it is the mesh's");
    up?.child.kill("SIGKILL");
    await up?.done;
    assert.ok(alive(child), "a kill -9 of mesh up leaves it running");
    await rm(join(home("escaper"), "child.pid"), { force: true });
    up = startUp(join(dir, "mesh.yaml"), state());
    await up.waitFor(
      /ended what the last run of node node-1 left in its modules' cgroups: .*in mesh-[a-z2-7]{6}-escaper/,
    );
    await until("the old child to be gone", () => !alive(child), { seconds: 30 });
    await running(state(), "escaper");
    assert.equal(meshId(), id, "a restart keeps the mesh id");
  });

  it("a module's setsid child that ignores SIGTERM is gone once the module stops, and so is its cgroup", async () => {
    const id = meshId();
    const child = await until(
      "escaper's child to say its PID",
      async () => Number((await readFile(join(home("escaper"), "child.pid"), "utf8")).trim()) || undefined,
    );
    assert.ok(alive(child));
    await writeFleet(join(dir, "mesh.yaml"), ["forker", "hog", "quiet"]);
    await until("escaper to leave the status", async () => {
      const run = await runMesh(["status", "--json", "--state", state()]);
      return run.code === 0 && !run.stdout.includes('"escaper"');
    });
    await until("its child to be gone", () => !alive(child), { seconds: 30 });
    assert.deepEqual(
      cgroupsOf(id).filter((p) => p.endsWith("-escaper")),
      [],
    );
  });

  it("runs the same module of two meshes on one machine as two users, in two cgroups", async () => {
    const ours = await running(state(), "quiet");
    const theirs = await running(otherState(), "quiet");
    assert.notEqual(meshId(), meshId(otherState()));
    assert.notEqual(ours.isolation?.user, theirs.isolation?.user);
    assert.notEqual(ours.cgroup, theirs.cgroup);
    const uid = (pid: number): string =>
      /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? "";
    assert.notEqual(uid(ours.pid ?? 0), uid(theirs.pid ?? 0));
  });

  it("leaves no cgroup of the mesh after a clean stop", async () => {
    const id = meshId();
    up?.child.kill("SIGINT");
    await up?.done;
    assert.deepEqual(cgroupsOf(id), []);
  });
});
