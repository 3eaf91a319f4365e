// One hostile entry stalls nothing: values nested too deep or too large fail their own consumer with
// a clear reason while every other is served, and a file of 50,000 entries (MESH_TEST_ENTRIES=100000
// for the scale the harness is built for) is read while the read-only tools still answer on the
// control socket in the middle of the pass.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { FakeClock, runProvisioner, type StatusReport } from "@mesh/sdk";
import { callControl, serveControl } from "@mesh/sdk/provider";
import { MAX_VALUE_BYTES, MAX_VALUE_DEPTH } from "../src/contributions-file.ts";
import { MemoryAdapter } from "@mesh/testkit";
import { makeFixture, IFACE, type Fixture } from "./harness-fixture.ts";

const ENTRIES = Number(process.env["MESH_TEST_ENTRIES"] ?? 50_000);

async function withFixture(initial: readonly string[], fn: (f: Fixture) => Promise<void>): Promise<void> {
  const f = await makeFixture({}, initial);
  try {
    await fn(f);
  } finally {
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
  }
}

/** `{"n":{"n":…{"leaf":true}}}` with `levels` objects in all, the outermost included. */
function nested(levels: number): Record<string, unknown> {
  let value: Record<string, unknown> = { leaf: true };
  for (let i = 1; i < levels; i++) value = { n: value };
  return value;
}

/** The same deep value as text, built without recursion (JSON.stringify of 5,000 levels is itself at risk). */
function nestedText(levels: number): string {
  return `${'{"n":'.repeat(levels - 1)}{"leaf":true}${"}".repeat(levels - 1)}`;
}

async function askRaw(f: Fixture, entries: Record<string, string>): Promise<void> {
  for (const login of Object.keys(entries)) {
    if (f.passwordOf(login) === "") await f.writeSecret(login, `pw-${login}`);
  }
  const given = Object.entries(entries).map(
    ([as, values]) =>
      `{"as":${JSON.stringify(as)},"secret":${JSON.stringify(join(f.dir, `${as}.secret`))},"node":"n1","values":${values}}`,
  );
  await f.writeRaw(`{"requirement":${JSON.stringify(IFACE)},"given":[${given.join(",")}]}`);
}

function whyOf(f: Fixture, login: string): string {
  return f.handle.status().consumers.find((c) => c.login === login)?.why ?? "";
}

describe("one hostile entry stalls nothing", () => {
  it("values nested 5,000 levels deep fail that consumer alone, on every pass, while the others are created", async () => {
    await withFixture([], async (f) => {
      await askRaw(f, { deep_one: nestedText(5_000), plain_one: "{}", plain_two: '{"database":"x"}' });
      await f.watchPass();
      await f.periodic(3);
      assert.equal(f.stateOf("plain_one"), "active");
      assert.equal(f.stateOf("plain_two"), "active");
      assert.equal(f.adapter.backend.get("plain_two")?.password, "pw-plain_two");
      assert.equal(f.stateOf("deep_one"), "failing");
      const deep = f.handle.status().consumers.find((c) => c.login === "deep_one");
      assert.equal(deep?.class, "refused");
      assert.match(
        deep?.why ?? "",
        /contributions entry for deep_one: its values nest deeper than 32 levels/,
      );
      assert.equal(f.adapter.count("create", "deep_one"), 0, "nothing is made of it");
      assert.ok(!f.lines.some((l) => l.includes("pass failed unexpectedly")), f.lines.join("\n"));
    });
  });

  it(`values ${MAX_VALUE_DEPTH} levels deep are served and ${MAX_VALUE_DEPTH + 1} are refused`, async () => {
    await withFixture([], async (f) => {
      await askRaw(f, {
        at_bound: JSON.stringify(nested(MAX_VALUE_DEPTH)),
        past_bound: JSON.stringify(nested(MAX_VALUE_DEPTH + 1)),
      });
      await f.watchPass();
      assert.equal(f.stateOf("at_bound"), "active");
      assert.equal(f.stateOf("past_bound"), "failing");
    });
  });

  it("values larger than 64 KiB fail that consumer alone with the bound in the reason", async () => {
    await withFixture([], async (f) => {
      const big = JSON.stringify({ comment: "z".repeat(MAX_VALUE_BYTES) });
      const wide = JSON.stringify({ list: Array.from({ length: 20_000 }, (_, i) => i) });
      await askRaw(f, { big_one: big, wide_one: wide, plain_one: "{}" });
      await f.watchPass();
      assert.equal(f.stateOf("plain_one"), "active");
      for (const login of ["big_one", "wide_one"]) {
        assert.equal(f.stateOf(login), "failing", login);
        assert.match(whyOf(f, login), /its values are .*larger than 65536/, login);
      }
    });
  });

  it("a held consumer whose entry turns hostile stays as it was and is never retired for it", async () => {
    await withFixture(["alpha", "bravo"], async (f) => {
      assert.equal(f.stateOf("alpha"), "active");
      await askRaw(f, { alpha: nestedText(5_000), bravo: "{}" });
      await f.periodic(12);
      assert.equal(f.adapter.count("retire"), 0);
      assert.equal(f.adapter.backend.get("alpha")?.state, "active", "its access is kept");
      assert.equal(f.stateOf("alpha"), "failing");
      assert.equal(f.stateOf("bravo"), "active");
    });
  });

  it(`a file of ${ENTRIES.toLocaleString("en")} entries is read, and status, retire list and cleanup list answer on the socket before the pass ends`, async () => {
    const N = ENTRIES;
    const dir = await mkdtemp(join(tmpdir(), "mesh-many-"));
    const receives = join(dir, "contributions.json");
    // One secret file for all: the pass still opens it once per consumer, as it would N files.
    await writeFile(join(dir, "s"), "one-password-for-all\n", { mode: 0o600 });
    const entries = (suffix: string): string =>
      JSON.stringify({
        requirement: IFACE,
        given: Array.from({ length: N }, (_, i) => ({
          as: `c${String(i).padStart(6, "0")}`,
          secret: join(dir, "s"),
          node: "n1",
          values: { database: `db_${i}`, suffix },
        })),
      });
    await writeFile(receives, entries("first"));
    const adapter = new MemoryAdapter();
    adapter.recordCalls = false;
    const handle = runProvisioner(IFACE, adapter, {
      receives,
      clock: new FakeClock(),
      watch: false,
      every: 1e12,
      logger: { info: () => {}, warn: () => {}, error: (m) => process.stderr.write(`${m}\n`) },
    });
    const control = await serveControl(handle, join(dir, "control.sock"));
    try {
      await handle.ready;
      assert.equal(adapter.backend.size, N, "every entry was created");
      // So many consumers: many megabytes, more than callControl reads unless told.
      const big = { timeoutMs: 60_000, maxBytes: 256 * 1024 * 1024 };
      const first = await callControl(control.path, { tool: "status" }, big);
      assert.equal(first.consumers.length, N);
      // The JSON the harness wrote out ahead is exactly the snapshot's.
      assert.deepEqual(first, JSON.parse(JSON.stringify(handle.status())));

      // Every value changed: the next pass applies all N again, which takes a while.
      await writeFile(receives, entries("second"));
      let passEnded: number | undefined;
      const started = performance.now();
      const pass = handle.pass("watch").then(() => (passEnded = performance.now()));
      const answers: { tool: string; at: number; ms: number }[] = [];
      for (const tool of ["status", "retire list", "cleanup list", "status"] as const) {
        const asked = performance.now();
        const answer = await callControl(control.path, { tool }, big);
        const at = performance.now();
        answers.push({ tool, at, ms: at - asked });
        if (tool === "status") assert.equal((answer as StatusReport).consumers.length, N);
      }
      await pass;
      const ended = passEnded ?? performance.now();
      process.stderr.write(
        `${N}-entry pass: ${Math.round(ended - started)} ms; tool answers: ` +
          `${answers.map((a) => `${a.tool} ${Math.round(a.ms)} ms`).join(", ")}\n`,
      );
      for (const a of answers) {
        assert.ok(a.at < ended, `${a.tool} answered ${Math.round(a.at - ended)} ms after the pass ended`);
      }
      assert.equal(
        adapter.backend.get(`c${String(N - 1).padStart(6, "0")}`)?.values["suffix"],
        "second",
        "the pass applied the change",
      );
    } finally {
      await control.close();
      await handle.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
