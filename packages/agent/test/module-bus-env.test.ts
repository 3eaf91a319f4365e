import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Delivery } from "@mesh/manifest";
import { moduleEnv } from "../src/module-launch.ts";

const delivery: Delivery = {
  node: "n1",
  generation: 1,
  fleetFile: "/srv/mesh.yaml",
  modules: [{ name: "notes", manifest: "/srv/notes/module.json" }],
  plan: { instances: [] },
  secrets: {},
};
const users = new Map([["notes", "UNOTES"]]);

void describe("the bus variables a module is handed", () => {
  void it("include the bus CA's file when the bus uses TLS, beside the URLs and the credential", () => {
    const env = moduleEnv("notes", delivery, {
      node: "n1",
      stateDir: "/var/lib/mesh",
      baseEnv: {},
      bus: { servers: ["tls://10.0.0.1:4222"], users, caFile: "/var/lib/mesh/bus-ca.pem" },
    });
    assert.equal(env["MESH_BUS_SERVERS"], "tls://10.0.0.1:4222");
    assert.equal(env["MESH_BUS_CA"], "/var/lib/mesh/bus-ca.pem");
  });

  void it("name no CA on a bus without TLS, and nothing of the bus for a module without a credential", () => {
    const plain = { node: "n1", stateDir: "/var/lib/mesh", baseEnv: {} };
    const env = moduleEnv("notes", delivery, { ...plain, bus: { servers: ["nats://10.0.0.1:4222"], users } });
    assert.equal(env["MESH_BUS_CA"], undefined);
    const none = moduleEnv("notes", delivery, {
      ...plain,
      bus: { servers: ["tls://10.0.0.1:4222"], users: new Map(), caFile: "/var/lib/mesh/bus-ca.pem" },
    });
    assert.equal(none["MESH_BUS_CA"], undefined);
    assert.equal(none["MESH_BUS_SERVERS"], undefined);
  });
});
