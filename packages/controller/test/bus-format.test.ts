// The bus's format, on a real nats-server: a bus with nothing in it is given this mesh's format, a
// bus 0.1.0 used (no format, other keys) is migrated and said, and a bus of a newer format is
// refused naming both versions, with nothing written.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { closeBus, createAuthority, openState, type BusState } from "@mesh/bus";
import { BUS_FORMAT_KEY, BusFormatError, settleBusFormat } from "../src/bus-format.ts";
import { busNotReady } from "../src/start-controller.ts";
import { MESH_RELEASE, STATE_FORMAT } from "@mesh/manifest";
import { recordingLogger, startNats, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { connectAsController } from "./test-mesh.ts";

void describe("the format of the bus's buckets", () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let n = 0;
  const bucket = (): Promise<BusState<unknown>> => openState<unknown>(nc, `mesh-format-test-${++n}`);

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    nc = await connectAsController(authority, nats.url);
  });
  after(async () => {
    await closeBus(nc);
    await nats.stop();
  });

  void it("gives an empty bus this mesh's format", async () => {
    const desired = await bucket();
    const log = recordingLogger();
    assert.deepEqual(await settleBusFormat(desired, log), { kind: "new" });
    const stored = (await desired.get(BUS_FORMAT_KEY)) as { format: number; release: string };
    assert.equal(stored.format, STATE_FORMAT);
    assert.equal(stored.release, MESH_RELEASE);
    assert.deepEqual(await settleBusFormat(desired, log), { kind: "current" });
    assert.equal(log.lines.length, 0, "nothing to say");
  });

  void it("migrates a bus 0.1.0 used (no format, its keys there) and says so", async () => {
    const desired = await bucket();
    await desired.put("delivered.node-1", { v: 1, generation: 3, fingerprint: "x" });
    const log = recordingLogger();
    assert.deepEqual(await settleBusFormat(desired, log), { kind: "migrated", from: 1 });
    assert.equal(((await desired.get(BUS_FORMAT_KEY)) as { format: number }).format, STATE_FORMAT);
    assert.ok(
      log.said.some((l) =>
        l.message.includes(`buckets were state format 1 (mesh 0.1.0): migrated to format ${STATE_FORMAT}`),
      ),
      log.said.map((l) => l.message).join("\n"),
    );
    assert.deepEqual(
      await desired.get("delivered.node-1"),
      { v: 1, generation: 3, fingerprint: "x" },
      "kept",
    );
  });

  void it("refuses a bus of a newer format, naming both versions, and writes nothing", async () => {
    const desired = await bucket();
    const newer = { format: STATE_FORMAT + 1, release: "9.1.0", at: new Date().toISOString() };
    await desired.put(BUS_FORMAT_KEY, newer);
    const refused = await settleBusFormat(desired, recordingLogger()).then(
      () => undefined,
      (err: unknown) => err,
    );
    assert.ok(refused instanceof BusFormatError);
    assert.match(
      refused.message,
      new RegExp(`state format ${STATE_FORMAT + 1} \\(written by mesh 9\\.1\\.0\\)`),
    );
    assert.match(
      refused.message,
      new RegExp(`mesh ${MESH_RELEASE.replace(/\./g, "\\.")} reads state formats up to ${STATE_FORMAT}`),
    );
    assert.equal(busNotReady(refused), false, "a controller does not wait for it to mend");
    assert.deepEqual(await desired.get(BUS_FORMAT_KEY), newer);
  });
});
