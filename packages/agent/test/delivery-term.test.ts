import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { recordingLogger, until } from "@mesh/testkit";
import { after, before, describe, it } from "node:test";
import { providerSecretPath } from "@mesh/manifest";
import { startAgent, type Agent } from "../src/index.ts";
import { FAST_AGENT, startOneAgent, type OneAgent } from "./one-agent.ts";
import { planFor, type TestFleet } from "./test-fleet.ts";
import { type DeliveryDraft, type TestMesh } from "./test-mesh.ts";

void describe("an agent and the terms of the controllers that deliver to it", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let draft: DeliveryDraft;
  const logger = recordingLogger();
  let agent: Agent | undefined;
  let one: OneAgent | undefined;

  before(async () => {
    one = await startOneAgent({ logger });
    ({ mesh, fleet, stateDir, agent } = one);
    draft = {
      generation: 1,
      term: 2,
      modules: [fleet.module("store")],
      plan: planFor(fleet.plan, "n1", ["app"]),
      secrets: { "app/kv-store": "pw-new-leader" },
    };
  });
  after(async () => {
    // The agent started again by a test is this file's own to stop.
    if (agent !== one?.agent) await agent?.stop();
    await one?.stop();
  });

  void it("ignores a delivery of a lower term than the newest it applied, and applies the next of that term", async () => {
    const secret = providerSecretPath(stateDir, "store", "app", "kv-store");
    await mesh.publish("n1", draft);
    await until("the term 2 delivery applied", () => agent?.status().generation === 1);
    assert.equal(await readFile(secret, "utf8"), "pw-new-leader");

    // A paused old leader wakes and writes what it had: an older term, whatever its generation.
    await mesh.publish("n1", {
      ...draft,
      generation: 5,
      term: 1,
      secrets: { "app/kv-store": "pw-old-leader" },
    });
    await until("the old leader's delivery ignored", () =>
      logger.lines.some((l) => /ignored delivery 5: it is of controller term 1, older than term 2/.test(l)),
    );
    assert.equal(agent?.status().generation, 1);
    assert.equal(await readFile(secret, "utf8"), "pw-new-leader");

    await mesh.publish("n1", { ...draft, generation: 6, secrets: { "app/kv-store": "pw-new-leader-2" } });
    await until("the next term 2 delivery applied", () => agent?.status().generation === 6);
    assert.equal(await readFile(secret, "utf8"), "pw-new-leader-2");
  });

  void it("applies a delivery stored in parts only once every part its head names is there", async () => {
    const secret = providerSecretPath(stateDir, "store", "app", "kv-store");
    const writeRest = await mesh.publishInParts(
      "n1",
      { ...draft, generation: 7, secrets: { "app/kv-store": "pw-in-parts" } },
      ["e.app.kv-store"],
    );
    await until("the agent to wait for the part not written yet", () =>
      logger.lines.some((l) => /waits for 1 part\(s\) of delivery 7 \(e\.app\.kv-store\)/.test(l)),
    );
    assert.equal(agent?.status().generation, 6, "nothing of delivery 7 applied");
    assert.equal(await readFile(secret, "utf8"), "pw-new-leader-2");
    await writeRest();
    await until("delivery 7 applied once its part is there", () => agent?.status().generation === 7);
    assert.equal(await readFile(secret, "utf8"), "pw-in-parts");
  });

  void it("reads a delivery again when a part of it cannot be read now, instead of refusing it", async () => {
    const secret = providerSecretPath(stateDir, "store", "app", "kv-store");
    const writeRest = await mesh.publishInParts(
      "n1",
      { ...draft, generation: 10, secrets: { "app/kv-store": "pw-read-again" } },
      ["e.app.kv-store"],
    );
    // What the bus answers for that part cannot be read (as a JetStream error would be): the
    // head, unchanged, must still be applied once the part reads.
    await mesh.putRaw("n1", "e.app.kv-store", "{not json");
    await until("the agent to say it reads delivery 10 again", () =>
      logger.lines.some((l) => /could not read delivery 10 from the bus \(.+\); it reads it again/.test(l)),
    );
    assert.equal(agent?.status().generation, 7, "nothing of delivery 10 applied");
    await writeRest();
    await until("delivery 10 applied once its part reads", () => agent?.status().generation === 10);
    assert.equal(await readFile(secret, "utf8"), "pw-read-again");
  });

  void it("keeps the newest term across its restart, so an old leader's late write left in the bucket is not applied", async () => {
    const secret = providerSecretPath(stateDir, "store", "app", "kv-store");
    assert.equal(await readFile(secret, "utf8"), "pw-read-again");
    await agent?.stop();
    agent = undefined;
    // The old leader's write landed last: it is what the bucket holds when the agent starts again.
    await mesh.publish("n1", {
      ...draft,
      generation: 8,
      term: 1,
      secrets: { "app/kv-store": "pw-old-leader" },
    });
    const restarted = recordingLogger();
    agent = await startAgent({
      node: "n1",
      stateDir,
      joinToken: await mesh.joinToken("n1"),
      logger: restarted,
      timings: FAST_AGENT,
    });
    await until("the restarted agent to ignore the old leader's delivery", () =>
      restarted.lines.some((l) =>
        /ignored delivery 8: it is of controller term 1, older than term 2/.test(l),
      ),
    );
    assert.equal(await readFile(secret, "utf8"), "pw-read-again");
    await mesh.publish("n1", { ...draft, generation: 9, term: 3, secrets: { "app/kv-store": "pw-third" } });
    await until("a delivery of a newer term applied", () => agent?.status().generation === 9);
    assert.equal(await readFile(secret, "utf8"), "pw-third");
  });
});
