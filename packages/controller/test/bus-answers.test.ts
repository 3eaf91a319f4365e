// The controller's answers on a real nats-server: a requester that asks for a receipt gets it as
// its message arrives, before the answer and before the messages ahead of it are answered, so it
// waits for a slow answer rather than asking another server; the answers keep their order.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/transport-node";
import { closeBus, sendRequest } from "@mesh/bus";
import { until } from "@mesh/testkit";
import { BusAnswers } from "../src/bus-answers.ts";
import {
  connectAsAdmin,
  connectAsController,
  recordingLogger,
  startTestMesh,
  type TestMesh,
} from "./test-mesh.ts";

describe("the controller's answers", () => {
  let mesh: TestMesh;
  let controller: NatsConnection;
  let asker: NatsConnection;

  before(async () => {
    mesh = await startTestMesh();
    controller = await connectAsController(mesh.authority, mesh.nats.url);
    asker = await connectAsAdmin(mesh.authority, mesh.nats.url, "asker");
  });
  after(async () => {
    await closeBus(asker);
    await closeBus(controller);
    await mesh.stop();
  });

  it("sends each receipt as its message arrives, and answers one message at a time, in order", async () => {
    const answers = new BusAnswers(controller, recordingLogger());
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];
    answers.answer("test.slow", true, async (data) => {
      const body = new TextDecoder().decode(data);
      if (body === "first") await held;
      handled.push(body);
      return { body };
    });
    await controller.flush();
    try {
      const first = sendRequest(asker, "test.slow", "first", { receipt: true });
      const second = sendRequest(asker, "test.slow", "second", { receipt: true });
      await until("both receipts", () => Promise.all([first.taken, second.taken]).then(() => true), 10);
      assert.deepEqual(handled, [], "taken, and nothing answered yet: the first is still being worked on");
      release();
      assert.equal(await first.answer(10_000), '{"body":"first"}');
      assert.equal(await second.answer(10_000), '{"body":"second"}');
      assert.deepEqual(handled, ["first", "second"]);
      first.close();
      second.close();
    } finally {
      release();
      await answers.stop();
    }
  });
});
