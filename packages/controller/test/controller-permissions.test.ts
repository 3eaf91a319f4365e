// The controller's own bus permissions. It reads whole buckets (every kept password at a start):
// a user allowed to answer requests has the server note the reply subject of every message it
// receives, and scan those notes on each message once past a few thousand, which made a restart
// over 12,500 passwords cost the server more than a second of CPU and a second read ten.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { RESPONSE_WINDOW_MS } from "@mesh/bus";
import { controllerPermissions, nodePermissions } from "../src/node-permissions.ts";
import { DEFAULT_RELAY_TIMEOUT_MS } from "../src/tool-relay.ts";

void describe("the controller's bus permissions", () => {
  void it("publish anywhere, which covers its answers, and do not ask to answer on top", () => {
    const p = controllerPermissions();
    assert.deepEqual(p.pub.allow, [">"]);
    assert.notEqual(p.allowResponses, true);
  });

  void it("a node answers the tool calls relayed to it, so it does ask to answer", () => {
    assert.equal(nodePermissions("n1").allowResponses, true);
    // The server forgets a reply subject after the window: an answer later than that is refused,
    // so the window outlasts the longest the controller waits for a relayed tool.
    assert.ok(DEFAULT_RELAY_TIMEOUT_MS < RESPONSE_WINDOW_MS);
  });
});
