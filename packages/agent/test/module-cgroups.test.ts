// The cgroup layer alone, on this machine's own cgroups (as root): v1 pids, memory, cpu and freezer,
// and the empty v2 at /sys/fs/cgroup/unified. Real processes; each test removes what it made.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { quietLogger, recordingLogger, until } from "@mesh/testkit";
import { DEFAULT_MODULE_LIMITS } from "@mesh/manifest";
import { cgroupLayout, ModuleCgroup, ModuleCgroups, type CgroupLayout } from "../src/module-cgroups.ts";

const IS_ROOT = process.getuid?.() === 0;
const UNIFIED = "/sys/fs/cgroup/unified";
const V1 = ["pids", "memory", "cpu", "freezer"].map((c) => `/sys/fs/cgroup/${c}`);
const HAS_V1 = V1.every((p) => existsSync(join(p, "cgroup.procs")));
const HAS_UNIFIED = existsSync(join(UNIFIED, "cgroup.subtree_control"));
const SKIP_V1 = !IS_ROOT
  ? "needs root: cgroups are made by root"
  : !HAS_V1
    ? "needs the cgroup v1 pids, memory, cpu and freezer hierarchies under /sys/fs/cgroup"
    : false;
const SKIP_V2 = !IS_ROOT
  ? "needs root: cgroups are made by root"
  : !HAS_UNIFIED
    ? `needs a cgroup v2 mount at ${UNIFIED}`
    : false;

const HERE_MOUNTINFO = `30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw`;
const HERE_SELF = `9:name=systemd:/
8:pids:/
6:freezer:/
4:memory:/jobs/42
1:cpu:/
0::/`;

const DEBIAN_MOUNTINFO = `25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot`;

// A shell that stays up, and starts `children` sleeps of its own first (in the background).
function sleeper(cgroups: ModuleCgroups, cgroup: ModuleCgroup, script: string): ChildProcess {
  const confined = cgroups.confine(cgroup, "/bin/sh", ["-c", script]);
  return spawn(confined.command, [...confined.args], { stdio: "ignore", detached: true });
}

const cgroupOf = (pid: number): string => readFileSync(`/proc/${pid}/cgroup`, "utf8");
const alive = (pid: number): boolean => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX] /.test(stat);
  } catch {
    return false;
  }
};

void describe("where module cgroups go", () => {
  void it("on cgroup v1, in the agent's own cgroup of each of pids, memory, cpu and freezer, and the v2 mount beside them holds and kills", () => {
    const layout = cgroupLayout(HERE_MOUNTINFO, HERE_SELF);
    assert.equal(layout.version, "v1");
    assert.deepEqual(
      layout.hierarchies.map((h) => [h.version, h.base, h.controllers.join(",")]),
      [
        ["v1", "/sys/fs/cgroup/cpu", "cpu"],
        ["v1", "/sys/fs/cgroup/memory/jobs/42", "memory"],
        ["v1", "/sys/fs/cgroup/freezer", "freezer"],
        ["v1", "/sys/fs/cgroup/pids", "pids"],
        ["v2", "/sys/fs/cgroup/unified", ""],
      ],
    );
  });

  void it("on cgroup v2, in the cgroup systemd delegates to the agent's unit, also once the agent has moved to its leaf", () => {
    const layout = cgroupLayout(DEBIAN_MOUNTINFO, "0::/system.slice/mesh-up.service\n");
    assert.equal(layout.version, "v2");
    assert.equal(layout.hierarchies[0]?.base, "/sys/fs/cgroup/system.slice/mesh-up.service");
    const moved = cgroupLayout(DEBIAN_MOUNTINFO, "0::/system.slice/mesh-up.service/mesh-agent\n");
    assert.equal(moved.hierarchies[0]?.base, "/sys/fs/cgroup/system.slice/mesh-up.service");
  });

  void it("nowhere when no cgroup filesystem is mounted, and the mesh says why once", () => {
    const layout = cgroupLayout("30 22 0:27 / /sys rw - sysfs sysfs rw", "");
    assert.equal(layout.version, "none");
    const logger = recordingLogger();
    const cgroups = ModuleCgroups.open({
      meshId: "nonexx",
      stateDir: tmpdir(),
      logger,
      layout,
      privileged: true,
    });
    assert.equal(cgroups.available, false);
    assert.equal(cgroups.forModule("app"), undefined);
    assert.equal(logger.said.filter((l) => /without cgroups, so without limits/.test(l.message)).length, 1);
  });

  void it("nowhere when the agent is not root, said once", () => {
    const logger = recordingLogger();
    const cgroups = ModuleCgroups.open({ meshId: "nonexx", stateDir: tmpdir(), logger, privileged: false });
    assert.equal(cgroups.available, false);
    assert.match(cgroups.why ?? "", /not run as root/);
    assert.equal(logger.lines.length, 1);
  });
});

void describe("a module's cgroup on cgroup v1", { skip: SKIP_V1, timeout: 120_000 }, () => {
  let state: string;
  let cgroups: ModuleCgroups;
  const made: ModuleCgroup[] = [];
  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-cgroups-"));
    cgroups = ModuleCgroups.open({ meshId: "cgtest", stateDir: state, logger: quietLogger });
  });
  after(async () => {
    for (const cgroup of made) {
      await cgroup.kill();
      cgroup.remove();
    }
    await rm(state, { recursive: true, force: true });
  });

  void it("stops forks at its pids limit: of 300 children, no more than 100 processes run", async () => {
    const cgroup = cgroups.forModule("forker") as ModuleCgroup;
    made.push(cgroup);
    cgroup.make();
    assert.deepEqual(cgroup.limit({ ...DEFAULT_MODULE_LIMITS, pids: 100 }), []);
    const child = sleeper(
      cgroups,
      cgroup,
      'n=0; while [ "$n" -lt 300 ]; do sleep 60 & n=$((n+1)); done 2>/dev/null; sleep 60',
    );
    child.unref();
    await until("the forks to stop at the limit", () => cgroup.counters().pidsMax > 0, 60);
    const members = cgroup.members();
    assert.ok(members.length > 0 && members.length <= 100, `${members.length} processes in it`);
    // The shell itself may end as its fork fails, and a process that has exited but is not yet
    // reaped is already out of the v1 hierarchies while v2 still names it: look at a sleep.
    const live = members.filter((p) => alive(p) && commOf(p) === "sleep");
    assert.ok(live.length > 0, "the sleeps run on");
    assert.match(cgroupOf(live[0] as number), /:pids:\/mesh-cgtest-forker$/m);
    await cgroup.kill();
    assert.deepEqual(cgroup.members(), []);
  });

  void it("ends a child that left its process group and emptied its environment when it is killed", async () => {
    const cgroup = cgroups.forModule("escaper") as ModuleCgroup;
    made.push(cgroup);
    cgroup.make();
    const child = sleeper(
      cgroups,
      cgroup,
      "setsid env -i /bin/sh -c 'trap \"\" TERM HUP; exec sleep 300' & exec sleep 300",
    );
    // Until the child has left: in a session of its own and asleep (before its setsid ran, it was
    // still in the group the kill below reaches).
    const members = await until("the main process and its setsid child", () => {
      const all = cgroup.members();
      const left = all.filter((p) => p !== child.pid && sessionOf(p) === p && commOf(p) === "sleep");
      return all.length >= 2 && left.length > 0 ? all : undefined;
    });
    const escaped = members.filter((p) => p !== child.pid);
    process.kill(-(child.pid as number), "SIGKILL");
    assert.ok(escaped.every(alive), "the setsid child outlives its process group");
    assert.deepEqual(await cgroup.kill(), []);
    assert.ok(!escaped.some(alive), "the setsid child is gone");
    assert.equal(cgroup.remove(), true);
    assert.ok(!existsSync(join("/sys/fs/cgroup/pids", cgroup.name)));
  });

  void it("kills a process that takes more memory than its limit, and counts it", async () => {
    const cgroup = cgroups.forModule("hog") as ModuleCgroup;
    made.push(cgroup);
    cgroup.make();
    cgroup.limit({ ...DEFAULT_MODULE_LIMITS, memory: 32 * 1024 * 1024 });
    const confined = cgroups.confine(cgroup, process.execPath, [
      "-e",
      "const a = []; for (;;) a.push(Buffer.alloc(1 << 20, 1));",
    ]);
    const child = spawn(confined.command, [...confined.args], { stdio: "ignore" });
    const [, signal] = (await new Promise((resolve) => child.once("exit", (...e) => resolve(e)))) as [
      number | null,
      string | null,
    ];
    assert.equal(signal, "SIGKILL");
    assert.ok(cgroup.counters().oomKills >= 1);
  });

  void it("sets and lifts memory and cpu limits", () => {
    const cgroup = cgroups.forModule("limited") as ModuleCgroup;
    made.push(cgroup);
    cgroup.make();
    const base = cgroups.hierarchies;
    const memory = base.find((h) => h.controllers.includes("memory"))?.base as string;
    const cpu = base.find((h) => h.controllers.includes("cpu"))?.base as string;
    cgroup.limit({ memory: 64 * 1024 * 1024, pids: 50, cpu: 1.5, home: null });
    assert.equal(
      readFileSync(join(memory, cgroup.name, "memory.limit_in_bytes"), "utf8").trim(),
      String(64 * 1024 * 1024),
    );
    assert.equal(readFileSync(join(cpu, cgroup.name, "cpu.cfs_quota_us"), "utf8").trim(), "150000");
    cgroup.limit({ memory: null, pids: null, cpu: null, home: null });
    assert.ok(Number(readFileSync(join(memory, cgroup.name, "memory.limit_in_bytes"), "utf8")) > 2 ** 60);
    assert.equal(readFileSync(join(cpu, cgroup.name, "cpu.cfs_quota_us"), "utf8").trim(), "-1");
    assert.equal(readFileSync(join("/sys/fs/cgroup/pids", cgroup.name, "pids.max"), "utf8").trim(), "max");
  });

  void it("is swept at the next start with what it holds, and another mesh's cgroup is left alone", async () => {
    const mine = ModuleCgroups.open({ meshId: "cgswep", stateDir: state, logger: quietLogger });
    const ours = mine.forModule("left") as ModuleCgroup;
    const other = ModuleCgroups.open({ meshId: "cgothr", stateDir: state, logger: quietLogger });
    const theirs = other.forModule("left") as ModuleCgroup;
    made.push(ours, theirs);
    ours.make();
    theirs.make();
    const child = sleeper(mine, ours, "setsid sleep 300 & exec sleep 300");
    child.unref();
    const pids = await until("its processes", () =>
      ours.members().length >= 2 ? ours.members() : undefined,
    );
    const next = ModuleCgroups.open({ meshId: "cgswep", stateDir: state, logger: quietLogger });
    const swept = await next.sweep();
    assert.deepEqual(swept, [{ name: "mesh-cgswep-left", killed: 2 }]);
    assert.ok(!pids.some(alive));
    assert.ok(!existsSync(join("/sys/fs/cgroup/pids", ours.name)));
    assert.ok(existsSync(join("/sys/fs/cgroup/pids", theirs.name)), "the other mesh's cgroup stays");
  });
});

void describe("a module's cgroup on cgroup v2", { skip: SKIP_V2, timeout: 60_000 }, () => {
  let state: string;
  let cgroups: ModuleCgroups;
  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-cgroups-v2-"));
    // Only the v2 mount, as on a host where /sys/fs/cgroup is cgroup2 (here it has no controllers).
    const layout: CgroupLayout = {
      version: "v2",
      hierarchies: [{ version: "v2", mount: UNIFIED, base: UNIFIED, controllers: [] }],
    };
    cgroups = ModuleCgroups.open({ meshId: "cgvtwo", stateDir: state, logger: quietLogger, layout });
  });
  after(async () => {
    await rm(state, { recursive: true, force: true });
  });

  void it("is made, joined before the module runs, and killed whole with cgroup.kill", async () => {
    assert.equal(cgroups.version, "v2");
    const cgroup = cgroups.forModule("app") as ModuleCgroup;
    assert.equal(cgroup.paths[0], join(UNIFIED, "mesh-cgvtwo-app"));
    cgroup.make();
    try {
      const child = sleeper(cgroups, cgroup, "setsid sh -c 'trap \"\" TERM; sleep 300' & sleep 300");
      const pid = child.pid as number;
      const members = await until("the main process and its setsid child", () =>
        cgroup.members().length >= 2 ? cgroup.members() : undefined,
      );
      assert.match(cgroupOf(pid), /^0::\/mesh-cgvtwo-app$/m);
      assert.ok(members.includes(pid));
      assert.deepEqual(await cgroup.kill(), []);
      assert.ok(!members.some(alive));
      assert.equal(
        readFileSync(join(cgroup.paths[0] as string, "cgroup.events"), "utf8").match(/populated (\d)/)?.[1],
        "0",
      );
    } finally {
      await cgroup.kill();
      assert.equal(cgroup.remove(), true);
    }
    assert.ok(!existsSync(join(UNIFIED, "mesh-cgvtwo-app")));
  });

  void it("says it cannot bound modules where no controller is delegated", () => {
    const logger = recordingLogger();
    const layout: CgroupLayout = {
      version: "v2",
      hierarchies: [{ version: "v2", mount: UNIFIED, base: UNIFIED, controllers: [] }],
    };
    const v2 = ModuleCgroups.open({ meshId: "cgvtwo", stateDir: state, logger, layout });
    assert.equal(v2.available, true);
    assert.ok(
      logger.said.some((l) => /without a pids, memory, cpu limit .*Delegate=yes/.test(l.message)),
      JSON.stringify(logger.said),
    );
  });
});

void describe("v2 limits", () => {
  void it("are written as pids.max, memory.max (with no swap) and cpu.max, and lifted to max", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-cgroups-files-"));
    try {
      const cgroup = new ModuleCgroup("mesh-abcdef-app", [dir]);
      for (const file of ["pids.max", "memory.max", "memory.swap.max", "cpu.max"]) {
        await writeFile(join(dir, file), "max\n");
      }
      assert.deepEqual(cgroup.limit({ pids: 256, memory: 512 * 1024 * 1024, cpu: 1.5, home: null }), []);
      const read = (f: string): Promise<string> => readFile(join(dir, f), "utf8");
      assert.equal(await read("pids.max"), "256");
      assert.equal(await read("memory.max"), String(512 * 1024 * 1024));
      assert.equal(await read("memory.swap.max"), "0");
      assert.equal(await read("cpu.max"), "150000 100000");
      cgroup.limit({ pids: null, memory: null, cpu: null, home: null });
      assert.deepEqual(
        await Promise.all(["pids.max", "memory.max", "memory.swap.max", "cpu.max"].map(read)),
        ["max", "max", "max", "max 100000"],
      );
      await mkdir(join(dir, "unused"));
      const none = new ModuleCgroup("mesh-abcdef-app", [join(dir, "unused")]);
      assert.deepEqual(none.limit({ pids: 10, memory: null, cpu: 2, home: null }), ["pids 10", "cpu 2"]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

void describe("a v2 cgroup delegated to the agent", () => {
  // A stand-in for the unit's cgroup: its files as a systemd host shows them.
  const delegated = async (procs: string): Promise<string> => {
    const base = await mkdtemp(join(tmpdir(), "mesh-cgroups-delegated-"));
    await writeFile(join(base, "cgroup.controllers"), "cpuset cpu io memory pids\n");
    await writeFile(join(base, "cgroup.subtree_control"), "\n");
    await writeFile(join(base, "cgroup.procs"), procs);
    return base;
  };
  const layoutAt = (base: string): CgroupLayout => ({
    version: "v2",
    hierarchies: [{ version: "v2", mount: "/sys/fs/cgroup", base, controllers: [] }],
  });

  void it("moves the mesh's own processes to its leaf, then enables pids, memory and cpu for the modules", async () => {
    const base = await delegated(`${process.pid}\n`);
    try {
      const logger = recordingLogger();
      ModuleCgroups.open({
        meshId: "dlgate",
        stateDir: base,
        logger,
        layout: layoutAt(base),
        privileged: true,
      });
      assert.equal(
        (await readFile(join(base, "mesh-agent", "cgroup.procs"), "utf8")).trim(),
        String(process.pid),
      );
      // Each controller is enabled by a write of its own (here a plain file keeps the last one).
      assert.equal((await readFile(join(base, "cgroup.subtree_control"), "utf8")).trim(), "+cpu");
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });

  void it("leaves a cgroup that holds processes not the mesh's as it is, and says so", async () => {
    const base = await delegated("1\n");
    try {
      const logger = recordingLogger();
      const cgroups = ModuleCgroups.open({
        meshId: "dlgate",
        stateDir: base,
        logger,
        layout: layoutAt(base),
        privileged: true,
      });
      assert.equal(cgroups.available, true, "its modules are still held and killed");
      assert.ok(!existsSync(join(base, "mesh-agent")));
      assert.equal((await readFile(join(base, "cgroup.subtree_control"), "utf8")).trim(), "");
      assert.ok(
        logger.said.some((l) =>
          /holds 1 process\(es\) not the mesh's \(pid 1\).*Delegate=yes/.test(l.message),
        ),
        JSON.stringify(logger.lines),
      );
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});

/** The session id of `pid` (field 6 of /proc/PID/stat), or undefined once it is gone. */
function sessionOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[3]);
  } catch {
    return undefined;
  }
}

/** The command name of `pid`, or undefined once it is gone. */
function commOf(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return undefined;
  }
}
