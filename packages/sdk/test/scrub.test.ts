// Classing errors: the network's own codes are recognised however a driver wraps them.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { errorCodes, isNetworkError } from "@mesh/sdk";
import { classOf } from "../src/scrub.ts";

describe("network errors", () => {
  const refused = Object.assign(new Error("connect failed"), { code: "ECONNREFUSED" });

  it("are found inside an AggregateError and a cause chain", () => {
    const wrapped = new Error("pool could not connect", {
      cause: new AggregateError([new Error("x"), refused]),
    });
    assert.deepEqual(errorCodes(wrapped), ["ECONNREFUSED"]);
    assert.equal(isNetworkError(wrapped), true, "found through cause and errors");
    assert.equal(classOf(wrapped, "pool could not connect"), "unreachable");
  });

  it("a server's refusal is not one", () => {
    const denied = Object.assign(new Error("permission denied"), { code: "42501" });
    assert.equal(isNetworkError(denied), false, "a SQLSTATE is the server answering");
    assert.equal(classOf(denied, denied.message), "refused");
  });
});
