// The look stage's one decision worth testing alone: which create an entry calls for, given what
// its record says was applied, and why.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Provision } from "@mesh/sdk";
import type { Rotation } from "../src/consumer-book.ts";
import type { Contribution } from "../src/contributions-file.ts";
import { jobFor } from "../src/pass/look.ts";
import { digestOf, provisionOf } from "../src/pass/provision.ts";

const NOW = Date.parse("2026-01-01T00:00:00Z");

function entry(as: string, extra: Partial<Contribution> = {}): Contribution {
  return { as, secret: `/s/${as}`, node: "n1", values: {}, derived: {}, ...extra };
}

type Held = Parameters<typeof jobFor>[2];

function held(p: Provision, extra: Partial<NonNullable<Held>> = {}): NonNullable<Held> {
  return { applied: digestOf(p), provision: p, rotation: undefined, made: "active", ...extra };
}

const rotation: Rotation = { phase: "add", since: NOW, until: NOW + 120_000, password: "new" };

void describe("the create an entry calls for", () => {
  void it("a consumer nobody made is created, naming the node that asked", () => {
    const p = provisionOf(entry("a1"), "pw");
    const job = jobFor(entry("a1"), p, undefined, NOW);
    assert.equal(job?.action, "created");
    assert.equal(job?.why, "asked for by node n1");
    assert.equal(job?.reapplying, 0);
    assert.equal(job?.digest, digestOf(p));
  });

  void it("what was applied, asked the same way, calls for nothing", () => {
    const p = provisionOf(entry("a1"), "pw");
    assert.equal(jobFor(entry("a1"), p, held(p), NOW), undefined);
  });

  void it("a changed password is re-applied", () => {
    const before = provisionOf(entry("a1"), "old");
    const job = jobFor(entry("a1"), provisionOf(entry("a1"), "new"), held(before), NOW);
    assert.equal(job?.action, "re-applied");
    assert.equal(job?.why, "password, values or derived changed");
    assert.equal(job?.endSessions, undefined, "not a rotate --now: sessions are left alone");
  });

  void it("a retired consumer asked for again is re-enabled as it was", () => {
    const p = provisionOf(entry("a1"), "pw");
    const job = jobFor(
      entry("a1"),
      p,
      { applied: undefined, provision: undefined, rotation: undefined, made: "retired" },
      NOW,
    );
    assert.equal(job?.action, "created");
    assert.equal(job?.why, "asked for again: re-enabled as it was");
  });

  void it("a consumer made before this process started is applied again with nothing recorded", () => {
    const p = provisionOf(entry("a1"), "pw");
    const job = jobFor(
      entry("a1"),
      p,
      { applied: undefined, provision: undefined, rotation: undefined, made: "active" },
      NOW,
    );
    assert.equal(job?.action, null);
  });

  void it("a rotation with both passwords is its add step, and without the old one its remove step", () => {
    const before = provisionOf(entry("a1"), "old");
    const both = { ...provisionOf(entry("a1"), "new"), retiring: "old" };
    assert.equal(jobFor(entry("a1"), both, held(before, { rotation }), NOW)?.rotation, "add");
    const only = provisionOf(entry("a1"), "new");
    const removing = jobFor(entry("a1"), only, held(both, { rotation }), NOW);
    assert.equal(removing?.rotation, "remove");
    assert.match(removing?.why ?? "", /no longer given/);
    const late = jobFor(entry("a1"), only, held(both, { rotation }), rotation.until);
    assert.match(late?.why ?? "", /grace bound passed/);
  });

  void it("rotate --now ends the sessions only where this process applied another password", () => {
    const cut = entry("a1", { cut: true });
    const before = provisionOf(cut, "old");
    assert.equal(jobFor(cut, provisionOf(cut, "new"), held(before), NOW)?.endSessions, true);
    const restarted = {
      applied: "another digest",
      provision: provisionOf(cut, "new"),
      rotation: undefined,
      made: "active" as const,
    };
    assert.equal(jobFor(cut, provisionOf(cut, "new"), restarted, NOW)?.endSessions, undefined);
  });
});
