// Which failures of a start mean "the bus is not ready yet" (a controller started with
// `waitForBus` tries again) and which would not mend by waiting (it ends at once).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BusCredentialsRefusedError, BusUnreachableError, StateOpenError } from "@mesh/bus";
import { busNotReady } from "../src/start-controller.ts";
import { ControllerKeysError } from "../src/controller-keys.ts";
import { FleetRefusedError } from "../src/fleet-plan.ts";

describe("busNotReady", () => {
  it("takes an unreachable bus, a JetStream timeout and JetStream without a quorum for not ready", () => {
    assert.equal(busNotReady(new BusUnreachableError("controller", "nats://10.0.0.1:4222")), true);
    assert.equal(busNotReady(new Error("timeout")), true);
    assert.equal(busNotReady(new Error("JetStream system temporarily unavailable")), true);
    assert.equal(
      busNotReady(new StateOpenError("mesh-desired", { cause: new Error("jetstream is not enabled") })),
      true,
      "a cause is looked at too",
    );
  });

  it("ends at once on refused credentials, a refused fleet, a damaged key file or anything else", () => {
    assert.equal(busNotReady(new BusCredentialsRefusedError("controller", "nats://10.0.0.1:4222")), false);
    assert.equal(busNotReady(new FleetRefusedError("/etc/mesh.yaml", [], "nothing is served")), false);
    assert.equal(
      busNotReady(new ControllerKeysError("/var/lib/mesh/controller/controller-keys.json")),
      false,
    );
    assert.equal(
      busNotReady(new StateOpenError("mesh-desired", { cause: new Error("Permissions Violation") })),
      false,
    );
    assert.equal(busNotReady(new TypeError("x is not a function")), false);
  });
});
