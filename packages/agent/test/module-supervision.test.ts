import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { until } from "@mesh/testkit";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { credentialPath, receivesPath } from "@mesh/manifest";
import { startAgent, type Agent } from "../src/index.ts";
import { type AgentTimings } from "../src/node-agent.ts";
import { type ModuleStatus } from "../src/module-process.ts";
import { planFor, writeTestFleet, type TestFleet } from "./test-fleet.ts";
import { recordingLogger, startTestMesh, type TestMesh } from "./test-mesh.ts";

// Short delays so a crash loop shows within seconds; the window stays wide so a slow machine
// cannot spread five exits beyond it.
const FAST: Partial<AgentTimings> = {
  reportEveryMs: 500,
  retryMs: 200,
  restartFirstMs: 50,
  restartMaxMs: 400,
  stopGraceMs: 1_500,
  crashWindowMs: 120_000,
  crashExits: 5,
};

interface Recorded {
  pid: number;
  cwd: string;
  env: Record<string, string>;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

void describe("an agent supervises its node's modules", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let agent: Agent | undefined;
  const logger = recordingLogger();
  const module = (name: string): ModuleStatus | undefined =>
    agent?.status().modules.find((m) => m.name === name);
  // What a module's script recorded once it was up (it may not have yet when the agent says running).
  const recorded = async (name: string): Promise<Recorded> => {
    const path = join(stateDir, "modules", name, "home", "env.json");
    let text = "";
    await until(`${name} to record its environment`, async () => {
      text = await readFile(path, "utf8").catch(() => "");
      return text.endsWith("}");
    });
    return JSON.parse(text) as Recorded;
  };
  const secrets = {
    "app/kv-store": "pw-app",
    "worker/kv-store": "pw-worker",
    "remote/kv-store": "pw-remote",
  };

  before(async () => {
    mesh = await startTestMesh();
    fleet = await writeTestFleet(await mkdtemp(join(tmpdir(), "mesh-agent-fleet-")));
    stateDir = await mkdtemp(join(tmpdir(), "mesh-agent-state-"));
    agent = await startAgent({
      node: "n1",
      stateDir,
      joinToken: await mesh.joinToken("n1"),
      logger,
      // MESH_METRICS inherited by every module would have them fight for one port: each gets its own.
      env: {
        ...process.env,
        AGENT_TEST: "inherited",
        MESH_RECEIVES: "/not/for/modules.json",
        MESH_METRICS: "127.0.0.1:9464",
      },
      timings: FAST,
    });
  });
  after(async () => {
    await agent?.stop();
    if (process.env["AGENT_TEST_LOG"]) console.log(logger.lines.join("\n"));
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
    await rm(stateDir, { recursive: true, force: true });
  });

  void it("starts each module with the contract's environment and none of the agent's, from its manifest's directory", async () => {
    await mesh.publish("n1", {
      generation: 1,
      modules: ["store", "app", "worker", "flaky", "stubborn"].map((m) => fleet.module(m)),
      plan: planFor(fleet.plan, "n1"),
      secrets,
    });
    await until("running", () => module("store")?.state === "running" && module("app")?.state === "running");
    const store = await recorded("store");
    assert.equal(store.cwd, join(fleet.dir, "store"));
    assert.deepEqual(store.env, {
      HOME: join(stateDir, "modules", "store", "home"),
      MESH_NODE: "n1",
      MESH_MODULE: "store",
      MESH_STATE_DIR: stateDir,
      MESH_INSTANCE: "store",
      MESH_CONTROL: join(stateDir, "modules", "store", "home", "control.sock"),
      MESH_RECEIVES: receivesPath(stateDir, "store", "kv-store"),
      MESH_SECRETS_DIR: join(stateDir, "modules", "store", "secrets"),
      MESH_MANIFEST: join(fleet.dir, "store", "module.json"),
      MESH_SEATS: "",
      MESH_METRICS: "127.0.0.1:0",
    });
    const app = await recorded("app");
    assert.deepEqual(app.env, {
      HOME: join(stateDir, "modules", "app", "home"),
      MESH_NODE: "n1",
      MESH_MODULE: "app",
      MESH_STATE_DIR: stateDir,
      MESH_INSTANCE: "app",
      MESH_CONTROL: join(stateDir, "modules", "app", "home", "control.sock"),
      MESH_CREDENTIALS: dirname(credentialPath(stateDir, "app", "kv-store")),
      MESH_MANIFEST: join(fleet.dir, "app", "module.json"),
      MESH_SEATS: "",
      MESH_METRICS: "127.0.0.1:0",
    });
    assert.equal(module("store")?.pid, store.pid);
    assert.match(await readFile(join(stateDir, "modules", "store", "log"), "utf8"), /up and running/);
  });

  void it("writes for a module without a run command but does not start it, and says so once", async () => {
    assert.equal(module("worker")?.state, "stopped");
    assert.equal(module("worker")?.pid, undefined);
    await readFile(credentialPath(stateDir, "worker", "kv-store"));
    assert.equal(logger.lines.filter((l) => /worker is not started by the agent/.test(l)).length, 1);
  });

  void it("restarts a module that exits, and says it keeps crashing after five exits", async () => {
    await until("flaky to be crashing", () => module("flaky")?.state === "crashing");
    const flaky = module("flaky");
    assert.ok(flaky !== undefined && flaky.restarts >= 4);
    assert.equal(flaky.lastExit?.code, 3);
    const log = join(stateDir, "modules", "flaky", "log");
    assert.ok(
      logger.lines.some(
        (l) =>
          l.startsWith("error: ") &&
          l.includes(`flaky keeps crashing: 5 exits in 2 min, last exit code 3; its log: ${log}`),
      ),
    );
    assert.ok((await readFile(log, "utf8")).split("boom: cannot go on").length > 5);
    await until("a report saying flaky is crashing", () =>
      mesh.reports.some((r) => r.modules.some((m) => m.name === "flaky" && m.state === "crashing")),
    );
  });

  void it("stops a module no longer assigned and leaves the others running", async () => {
    const app = await recorded("app");
    const store = await recorded("store");
    await mesh.publish("n1", {
      generation: 2,
      modules: ["store", "worker", "flaky", "stubborn"].map((m) => fleet.module(m)),
      plan: planFor(fleet.plan, "n1"),
      secrets,
    });
    await until("app to be stopped", () => !alive(app.pid));
    assert.equal(module("app"), undefined);
    assert.ok(alive(store.pid));
    assert.equal(module("store")?.pid, store.pid);
    assert.ok(logger.lines.some((l) => /stopping app: it is no longer assigned to this node/.test(l)));
  });

  void it("stops every module on stop(), killing one that ignores SIGTERM after the grace period", async () => {
    await until("stubborn running", () => module("stubborn")?.state === "running");
    const pids = [(await recorded("store")).pid, (await recorded("stubborn")).pid];
    await agent?.stop();
    for (const pid of pids) assert.equal(alive(pid), false, `pid ${pid} is gone`);
    assert.ok(logger.lines.some((l) => /stubborn did not stop within 1.5 s of SIGTERM: killing it/.test(l)));
    assert.ok(agent?.status().modules.every((m) => m.state === "stopped"));
    // The last report is on the wire when stop() returns; the stand-in controller reads it a moment later.
    await until("a last report with every module stopped", () =>
      mesh.reports.some((r) => r.modules.length > 0 && r.modules.every((m) => m.state === "stopped")),
    );
  });
});
