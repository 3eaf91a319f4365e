// An agent and controllers of other releases: it applies the deliveries of a controller one
// protocol older (0.1.0's, which say no protocol) or one newer, reports its own release and
// protocol, and applies nothing of a controller two protocols apart, saying both versions.
import assert from "node:assert/strict";
import { recordingLogger, until } from "@mesh/testkit";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { MESH_RELEASE, PROTOCOL_VERSION, providerSecretPath } from "@mesh/manifest";
import { type Agent } from "../src/index.ts";
import { startOneAgent, type OneAgent } from "./one-agent.ts";
import { planFor, type TestFleet } from "./test-fleet.ts";
import { type DeliveryDraft, type TestMesh } from "./test-mesh.ts";

void describe("an agent and controllers one protocol apart", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let draft: DeliveryDraft;
  const logger = recordingLogger();
  let agent: Agent | undefined;
  const secret = () => providerSecretPath(stateDir, "store", "app", "kv-store");

  let one: OneAgent | undefined;

  before(async () => {
    one = await startOneAgent({ logger });
    ({ mesh, fleet, stateDir, agent } = one);
    draft = {
      generation: 1,
      modules: [fleet.module("store")],
      plan: planFor(fleet.plan, "n1", ["app"]),
      secrets: { "app/kv-store": "pw-from-0.1.0" },
    };
  });
  after(async () => {
    await one?.stop();
  });

  void it("applies the delivery of a 0.1.0 controller (no protocol said) and reports its own release and protocol", async () => {
    assert.ok(PROTOCOL_VERSION - 1 >= 1, "0.1.0 speaks protocol 1, one older");
    await mesh.publish("n1", draft);
    await until("the 0.1.0 delivery applied", () => agent?.status().generation === 1);
    assert.equal(await readFile(secret(), "utf8"), "pw-from-0.1.0");
    await until("a report after it", () => mesh.reports.some((r) => r.generation === 1));
    const report = mesh.reports.filter((r) => r.node === "n1").at(-1);
    assert.equal(report?.release, MESH_RELEASE);
    assert.equal(report?.protocol, PROTOCOL_VERSION);
  });

  void it("applies the delivery of a controller one protocol newer", async () => {
    await mesh.publish("n1", {
      ...draft,
      generation: 2,
      protocol: PROTOCOL_VERSION + 1,
      release: "9.0.0",
      secrets: { "app/kv-store": "pw-from-newer" },
    });
    await until("the newer controller's delivery applied", () => agent?.status().generation === 2);
    assert.equal(await readFile(secret(), "utf8"), "pw-from-newer");
  });

  void it("applies nothing of a controller two protocols apart, and says both versions and what to upgrade", async () => {
    await mesh.publish("n1", {
      ...draft,
      generation: 3,
      protocol: PROTOCOL_VERSION + 2,
      release: "9.1.0",
      secrets: { "app/kv-store": "pw-from-too-new" },
    });
    await until("the agent to refuse the delivery, naming both versions", () =>
      logger.lines.some(
        (l) =>
          l.includes(`controller speaks protocol ${PROTOCOL_VERSION + 2} (mesh 9.1.0)`) &&
          l.includes(`this agent, mesh ${MESH_RELEASE}, protocol ${PROTOCOL_VERSION}`) &&
          l.includes("Upgrade this node's mesh"),
      ),
    );
    assert.equal(agent?.status().generation, 2, "nothing of it applied");
    assert.equal(await readFile(secret(), "utf8"), "pw-from-newer");
    // The same delivery read again is not said again.
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(logger.lines.filter((l) => l.includes("controller speaks protocol")).length, 1);
  });
});
