// Deliveries that come while the agent applies one are passed over for the newest: a burst of
// rotations must not queue the node one whole application per rotation behind (an app that reads
// its password once would then be restarted only after its provider dropped the old password).
import assert from "node:assert/strict";
import { readFile, unlink } from "node:fs/promises";
import { createServer, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { secretPath } from "@mesh/manifest";
import { recordingLogger, until } from "@mesh/testkit";
import { type Agent } from "../src/index.ts";
import { moduleControlPath } from "../src/module-launch.ts";
import { startOneAgent, type OneAgent } from "./one-agent.ts";
import { planFor, type TestFleet } from "./test-fleet.ts";
import { type DeliveryDraft, type TestMesh } from "./test-mesh.ts";

void describe("an agent given deliveries faster than it applies them", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let draft: DeliveryDraft;
  let slow: Server | undefined;
  const held = new Set<Socket>();
  const logger = recordingLogger();
  let agent: Agent | undefined;
  let one: OneAgent | undefined;

  before(async () => {
    one = await startOneAgent({ logger });
    ({ mesh, fleet, stateDir, agent } = one);
    draft = {
      generation: 1,
      modules: [fleet.module("store"), fleet.module("app")],
      plan: planFor(fleet.plan, "n1", ["app"]),
      secrets: { "app/kv-store": "pw-1" },
    };
  });
  after(async () => {
    for (const socket of held) socket.destroy();
    slow?.close();
    await one?.stop();
  });

  void it("applies the newest of the deliveries that came during an application, not each in turn", async () => {
    await mesh.publish("n1", draft);
    await until("delivery 1 applied", () => agent?.status().generation === 1);
    // The provider's control socket takes the question and never answers: the agent asks it whether
    // the backend took the consumer's new password before writing the consumer's copy, so applying
    // delivery 2 lasts the ask's whole timeout (3 s), and deliveries 3 to 5 come meanwhile.
    const control = moduleControlPath(stateDir, "store");
    await unlink(control).catch(() => undefined);
    slow = createServer((socket) => {
      held.add(socket);
      socket.on("error", () => undefined);
    });
    await new Promise<void>((resolve) => slow?.listen(control, resolve));
    await mesh.publish("n1", { ...draft, generation: 2, secrets: { "app/kv-store": "pw-2" } });
    await until("the agent to ask the provider about delivery 2's password", () => held.size > 0);
    for (const generation of [3, 4, 5]) {
      await mesh.publish("n1", { ...draft, generation, secrets: { "app/kv-store": `pw-${generation}` } });
    }
    await until("delivery 5 applied", () => agent?.status().generation === 5, { seconds: 30 });
    const applied = logger.lines
      .map((l) => /applied delivery (\d+):/.exec(l)?.[1])
      .filter((g) => g !== undefined)
      .map(Number);
    assert.deepEqual(applied, [1, 2, 5], "deliveries 3 and 4 are passed over for 5");
    assert.equal(await readFile(secretPath(stateDir, "app", "kv-store"), "utf8"), "pw-5");
  });
});
