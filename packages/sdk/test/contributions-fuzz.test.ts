// Over ten thousand hostile contributions files, made by corrupting a valid one, with five consumers
// held: no unreadable or invalid file retires anything, and nothing beyond the bound is retired
// without a person.
import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import { needsApproval } from "../src/retirement.ts";
import { parseContributions } from "../src/contributions-file.ts";
import { makeFixture, IFACE } from "./harness-fixture.ts";

const HELD = ["alpha", "bravo", "charlie", "delta", "echo"];
const BOUND = { stablePasses: 5, retireAtOnce: 3, retireFraction: 0.5, every: 5_000 };
// 2,000 hostile files in `npm test`; MESH_FUZZ_RUNS=10000 (or more) for a deeper run.
const RUNS = Number(process.env.MESH_FUZZ_RUNS ?? 2_000);

type Corruption =
  | { kind: "truncate"; at: number }
  | { kind: "flip"; at: number; bit: number }
  | { kind: "byte"; at: number; byte: number }
  | { kind: "retype"; entry: number; field: string; value: unknown }
  | { kind: "drop-entries"; keep: number[] }
  | { kind: "foreign"; requirement: string }
  | { kind: "top"; value: unknown };

const junk = fc.oneof(
  fc.constant(null),
  fc.integer(),
  fc.boolean(),
  fc.string({ maxLength: 8 }),
  fc.constant([]),
  fc.constant({}),
  fc.array(fc.string({ maxLength: 3 }), { maxLength: 2 }),
);

const corruption: fc.Arbitrary<Corruption> = fc.oneof(
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("flip" as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ kind: fc.constant("byte" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({
    kind: fc.constant("retype" as const),
    entry: fc.integer({ min: -1, max: 4 }),
    field: fc.constantFrom("as", "secret", "values", "derived", "node", "given", "requirement"),
    value: junk,
  }),
  fc.record({
    kind: fc.constant("drop-entries" as const),
    keep: fc.subarray([0, 1, 2, 3, 4]),
  }),
  fc.record({
    kind: fc.constant("foreign" as const),
    requirement: fc.constantFrom("redis-namespace", "", "POSTGRES"),
  }),
  fc.record({ kind: fc.constant("top" as const), value: junk }),
);

function corrupt(valid: Record<string, unknown>, c: Corruption): string {
  const text = JSON.stringify(valid);
  const bytes = Buffer.from(text);
  switch (c.kind) {
    case "truncate":
      return text.slice(0, c.at % text.length);
    case "flip": {
      const at = c.at % bytes.length;
      bytes[at] = (bytes[at] ?? 0) ^ (1 << c.bit);
      return bytes.toString("latin1");
    }
    case "byte": {
      const at = c.at % bytes.length;
      bytes[at] = c.byte;
      return bytes.toString("latin1");
    }
    case "retype": {
      const doc = structuredClone(valid) as { given: Record<string, unknown>[]; [k: string]: unknown };
      if (c.entry < 0 || c.field === "given" || c.field === "requirement") doc[c.field] = c.value;
      else (doc.given[c.entry] as Record<string, unknown>)[c.field] = c.value;
      return JSON.stringify(doc);
    }
    case "drop-entries": {
      const doc = structuredClone(valid) as { given: unknown[] };
      doc.given = c.keep.map((i) => doc.given[i]);
      return JSON.stringify(doc);
    }
    case "foreign":
      return JSON.stringify({ ...valid, requirement: c.requirement });
    case "top":
      return JSON.stringify(c.value);
  }
}

describe("contributions files corrupted in every way", () => {
  it(`${RUNS} hostile files: none invalid retires anything, none valid retires beyond the bound`, async () => {
    const f = await makeFixture({}, HELD);
    try {
      const valid = JSON.parse(await readFile(f.receives, "utf8")) as Record<string, unknown>;
      let invalid = 0;
      let retiredWithinBound = 0;
      await fc.assert(
        fc.asyncProperty(corruption, async (c) => {
          const text = corrupt(valid, c);
          await writeFile(f.receives, text);
          const read = parseContributions(text, f.receives, IFACE);
          const active = [...f.adapter.backend].filter(([, v]) => v.state === "active").map(([k]) => k);
          const callsBefore = f.adapter.calls.length;
          // Six periodic passes: more than enough for a stable set to be retired.
          await f.periodic(6);
          const retired = f.adapter.calls
            .slice(callsBefore)
            .filter((call) => call.method === "retire")
            .map((call) => call.login ?? "");
          if (!read.ok) {
            invalid++;
            assert.deepEqual(retired, [], `an invalid file retired ${retired.join(",")}: ${read.problem}`);
          } else {
            const asked = new Set(read.given.map((g) => g.as));
            const unasked = active.filter((l) => !asked.has(l));
            for (const login of retired)
              assert.ok(unasked.includes(login), `${login} was asked for, yet retired`);
            if (needsApproval(unasked.length, active.length, BOUND)) {
              assert.deepEqual(retired, [], `${unasked.length} of ${active.length} retired without approval`);
            } else if (retired.length > 0) {
              retiredWithinBound++;
            }
          }
          // Every consumer held again before the next file: retired ones come back as they were.
          await writeFile(f.receives, JSON.stringify(valid));
          await f.watchPass();
          assert.deepEqual(
            HELD.filter((l) => f.adapter.backend.get(l)?.state !== "active"),
            [],
            "all five are back",
          );
        }),
        { numRuns: RUNS, seed: 20261130 },
      );
      assert.ok(invalid > RUNS / 4, `most corruptions make an invalid file (${invalid})`);
      assert.ok(
        retiredWithinBound > 0,
        "some valid corruptions drop a consumer and retire it within the bound",
      );
      assert.equal(f.adapter.count("delete"), 0, "nothing is ever deleted");
    } finally {
      await f.handle.stop();
      await rm(f.dir, { recursive: true, force: true });
    }
  });

  it("a consumer listed with a secret path it cannot read is still asked for", () => {
    const read = parseContributions(
      JSON.stringify({ requirement: IFACE, given: [{ as: "alpha", secret: join("/nonexistent", "x") }] }),
      "/x",
      IFACE,
    );
    assert.ok(read.ok);
    assert.deepEqual(
      read.given.map((g) => g.as),
      ["alpha"],
    );
  });
});
