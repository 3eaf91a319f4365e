// The kit's pieces every provider reads its marks and checks its values with.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  AdminSettingError,
  checkHttpAdminSettings,
  markEntry,
  parseJsonOrUndefined,
  readMark,
  refuseUnlisted,
  retiredMark,
  ValueRefusedError,
  type AdminUrlRules,
} from "@mesh/sdk";

const RULES: AdminUrlRules = {
  backend: "Widget",
  ports: { "http:": 80, "https:": 443 },
  env: "MESH_WIDGET_URL",
  example: "http://<admin>:<password>@<host>/api",
  needsPassword: true,
};

void describe("a consumer's mark", () => {
  void it("reads back what a provider wrote, and nothing from what is not a mark", () => {
    const at = new Date("2026-01-02T03:04:05.000Z");
    const written = retiredMark({ bucket: "b" }, undefined, "no longer asked for", at);
    const read = readMark(parseJsonOrUndefined(JSON.stringify({ v: 1, ...written })));
    assert.deepEqual(read, written);
    assert.deepEqual(markEntry("alice", read!), {
      as: "alice",
      state: "retired",
      derived: { bucket: "b" },
      retiredAt: at,
      why: "no longer asked for",
    });
    for (const text of ["", "{", "null", "[]", '{"state":"gone"}', '"active"']) {
      assert.equal(readMark(parseJsonOrUndefined(text)), undefined, text);
    }
    assert.deepEqual(readMark({ state: "active", derived: "x", retiredAt: 5, why: {} }), {
      state: "active",
      derived: {},
      retiredAt: undefined,
      why: undefined,
    });
  });

  void it("keeps what the mark recorded when retire is handed nothing derived", () => {
    const recorded = readMark({ state: "active", derived: { database: "shop" } });
    const at = new Date(0);
    assert.deepEqual(retiredMark({}, recorded, "why", at).derived, { database: "shop" });
    assert.deepEqual(retiredMark({ database: "new" }, recorded, "why", at).derived, { database: "new" });
    assert.deepEqual(retiredMark({}, undefined, "why", at).derived, {});
  });
});

void describe("refusing a value not on a list", () => {
  void it("names the field and the first value not allowed, with what may be asked for", () => {
    assert.doesNotThrow(() => refuseUnlisted("alice", "scopes", ["a"], ["a", "b"], () => "no"));
    for (const allowed of [
      ["a", "b"],
      new Set(["a", "b"]),
      new Map([
        ["a", 1],
        ["b", 2],
      ]),
    ]) {
      assert.throws(
        () => refuseUnlisted("alice", "scopes", ["a", "c", "d"], allowed, (names) => `ask for ${names}`),
        (err: unknown) =>
          err instanceof ValueRefusedError &&
          err.field === "scopes" &&
          err.value === "c" &&
          err.message.includes("ask for a, b"),
      );
    }
  });
});

void describe("the settings of a backend with an HTTP admin API", () => {
  void it("gives the URL without the password and the request timeout", () => {
    const checked = checkHttpAdminSettings(
      { adminUrl: "https://root:s3cret@widget.example:8443/api/?x=1#f", instance: "main" },
      RULES,
    );
    assert.equal(checked.baseUrl, "https://widget.example:8443/api");
    assert.equal(checked.requestTimeoutMs, 15_000);
    assert.equal(checked.admin.password, "s3cret");
    assert.equal(
      checkHttpAdminSettings({ adminUrl: "http://a:b@h", instance: "main", requestTimeoutMs: 5 }, RULES)
        .requestTimeoutMs,
      5,
    );
    assert.throws(
      () =>
        checkHttpAdminSettings({ adminUrl: "http://a:b@h", instance: "main", requestTimeoutMs: 0 }, RULES),
      (err: unknown) => err instanceof AdminSettingError && err.setting === "requestTimeoutMs",
    );
  });
});
