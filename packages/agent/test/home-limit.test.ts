// A module's home is measured now and then, its size reported; one whose home passes `limits.home`
// is stopped, says why in its status and its log, and stays stopped until the home is under the
// limit again (or the limit is raised), then starts again by itself.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { removeStaleModuleUsers, until } from "@mesh/testkit";
import type { DeliveredModule } from "@mesh/manifest";
import { startAgent, type Agent } from "../src/index.ts";
import { type AgentTimings } from "../src/node-agent.ts";
import { type ModuleStatus } from "../src/module-process.ts";
import { recordingLogger, startTestMesh, type TestMesh } from "./test-mesh.ts";

const FAST: Partial<AgentTimings> = {
  reportEveryMs: 300,
  retryMs: 200,
  restartFirstMs: 50,
  restartMaxMs: 400,
  stopGraceMs: 1_500,
  homeMeasureEveryMs: 200,
};

// Writes 3 MiB into its home on its first run only, then stays up.
const FILLER = `#!/bin/sh
if [ ! -e "$HOME/once" ]; then
  head -c 3145728 /dev/urandom > "$HOME/blob" && touch "$HOME/once"
fi
trap 'exit 0' TERM
while :; do sleep 1; done
`;

void describe("a module's home and its limit", { timeout: 120_000 }, () => {
  let mesh: TestMesh;
  let dir: string;
  let agent: Agent | undefined;
  const logger = recordingLogger();
  const stateDir = (): string => join(dir, "state");
  const homeOf = (): string => join(stateDir(), "modules", "filler", "home");
  const filler = (): ModuleStatus | undefined => agent?.status().modules.find((m) => m.name === "filler");
  const module = (limits: DeliveredModule["limits"]): DeliveredModule => ({
    name: "filler",
    manifest: join(dir, "filler", "module.json"),
    limits,
  });

  before(async () => {
    mesh = await startTestMesh();
    dir = await mkdtemp(join(tmpdir(), "mesh-home-limit-"));
    await mkdir(join(dir, "filler"));
    await writeFile(join(dir, "filler", "filler.sh"), FILLER, { mode: 0o755 });
    await writeFile(
      join(dir, "filler", "module.json"),
      JSON.stringify({ name: "filler", run: { command: "/bin/sh", args: ["./filler.sh"] } }),
    );
    agent = await startAgent({
      node: "n1",
      stateDir: stateDir(),
      joinToken: await mesh.joinToken("n1"),
      logger,
      timings: FAST,
    });
  });
  after(async () => {
    await agent?.stop();
    if (process.env["AGENT_TEST_LOG"]) console.log(logger.lines.join("\n"));
    await mesh.stop();
    await rm(dir, { recursive: true, force: true });
    removeStaleModuleUsers();
  });

  void it("reports how large a module's home is", async () => {
    await mesh.publish("n1", {
      generation: 1,
      modules: [module({ home: null })],
      plan: { instances: [] },
      secrets: {},
    });
    const status = await until("filler's home to be measured past 3 MiB", () => {
      const m = filler();
      return m?.home !== undefined && m.home.bytes >= 3 * 1024 * 1024 ? m : undefined;
    });
    assert.equal(status.state, "running");
    assert.ok(!Number.isNaN(Date.parse(status.home?.at ?? "")));
  });

  void it("stops a module whose home passes limits.home, says why in its status and its log, and keeps it stopped", async () => {
    await mesh.publish("n1", {
      generation: 2,
      modules: [module({ home: 1024 * 1024 })],
      plan: { instances: [] },
      secrets: {},
    });
    const held = await until("filler to be stopped for its home", () => {
      const m = filler();
      return m?.state === "stopped" && m.limitEvent?.kind === "home" ? m : undefined;
    });
    assert.match(
      held.reason ?? "",
      /^home 3(\.\d)?M passed its limit 1M: stopped until the home is under it again or the fleet file raises limits\.home$/,
    );
    assert.equal(held.pid, undefined);
    const log = await readFile(join(stateDir(), "modules", "filler", "log"), "utf8");
    assert.match(log, /mesh *\| mesh agent stops filler: home 3(\.\d)?M passed its limit 1M/);
    // Measured again and again, it is said once, and not started.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.equal(filler()?.state, "stopped");
    assert.equal(logger.lines.filter((l) => /filler home .* passed its limit/.test(l)).length, 1);
  });

  void it("starts it again once its home is under the limit", async () => {
    await rm(join(homeOf(), "blob"));
    const back = await until("filler to run again", () =>
      filler()?.state === "running" ? filler() : undefined,
    );
    assert.ok((back?.home?.bytes ?? Infinity) < 1024 * 1024);
    assert.ok(logger.lines.some((l) => /filler no longer passes its limit/.test(l)));
  });
});
