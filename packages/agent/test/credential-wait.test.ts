// A module starts once: held back until its bus credential has come, then started with it. A
// controller that never issues one must not keep it down for ever: after a bounded wait it starts
// without (its events off), and that is said.
import assert from "node:assert/strict";
import { recordingLogger, until } from "@mesh/testkit";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type Agent } from "../src/index.ts";
import { type ModuleStatus } from "../src/module-process.ts";
import { FAST_AGENT, startOneAgent, type OneAgent } from "./one-agent.ts";
import { planFor, type TestFleet } from "./test-fleet.ts";
import { type TestMesh } from "./test-mesh.ts";

void describe("a module waits for its bus credential before its first start", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let agent: Agent | undefined;
  const logger = recordingLogger();
  const module = (name: string): ModuleStatus | undefined =>
    agent?.status().modules.find((m) => m.name === name);

  let one: OneAgent | undefined;

  before(async () => {
    one = await startOneAgent({
      logger,
      timings: { ...FAST_AGENT, stopGraceMs: 1_500, credentialWaitMs: 2_000 },
    });
    ({ mesh, fleet, stateDir, agent } = one);
  });
  after(async () => {
    await one?.stop();
  });

  void it("is reported as waiting for its bus credential, then starts once without it after the bounded wait", async () => {
    const began = Date.now();
    await mesh.publish("n1", {
      generation: 1,
      modules: [fleet.module("store")],
      plan: planFor(fleet.plan, "n1", []),
      secrets: {},
      credentials: {},
    });
    await until("store to wait", () => module("store")?.waiting === "its bus credential");
    assert.equal(module("store")?.state, "starting");
    assert.equal(module("store")?.pid, undefined, "not started while it waits");
    await until("store to start after the wait", () => module("store")?.state === "running", 30);
    assert.ok(Date.now() - began >= 2_000, "it waited the bounded time first");
    assert.ok(
      logger.lines.some((l) => /store has waited 2 s for its bus credential: it starts without one/.test(l)),
    );
    const log = await readFile(join(stateDir, "modules", "store", "log"), "utf8");
    assert.equal(log.match(/mesh agent starts store/g)?.length, 1, "started once");
  });
});
