// A provider that lies on its control socket: what the agent reads of it (its standing for the
// node's report, the password gate, a tool call relayed to it) survives every malformed, huge, slow
// or cut-off answer, counts the provider as misbehaving, and throws nothing past the boundary.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import type { PlanEntry } from "@mesh/manifest";
import { metricsUrlPath, passwordTag } from "@mesh/sdk/provider";
import { okLine, serveScriptedControl, type ScriptedControl, until } from "@mesh/testkit";
import { MisbehavingModules, moduleControlPath, providerPasswordGate, runToolCall } from "../src/index.ts";
import { type ToolLedgerEntry } from "../src/tool-runner.ts";
import { withMetricsUrls } from "../src/module-metrics.ts";
import { ProviderStandings } from "../src/provider-standings.ts";
import { recordingLogger } from "./test-mesh.ts";

const SINCE = "2026-12-01T10:00:00.000Z";
const STATUS_HEAD = {
  interface: "postgres-database",
  instance: "bad",
  receives: "/r.json",
  lastPassAt: SINCE,
  contributionsProblem: null,
};
const consumer = (login: string, state: string, extra: Record<string, unknown> = {}) => ({
  login,
  state,
  class: state === "failing" ? "refused" : null,
  since: SINCE,
  why: "",
  ...extra,
});
const statusOf = (consumers: unknown[]) => ({ ...STATUS_HEAD, consumers });

/** How a scripted provider answers one tool: a line, raw bytes, or its own handling of the socket. */
type Script = Record<string, unknown> | ((tool: string, socket: Socket) => void);

describe("a provider whose answers are malformed, huge, slow or cut off", () => {
  let dir: string;
  const servers: ScriptedControl[] = [];
  const standings: ProviderStandings[] = [];
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-hostile-answers-"));
  });
  after(async () => {
    for (const s of standings) s.stop();
    for (const s of servers) await s.close();
    await rm(dir, { recursive: true, force: true });
  });

  const serve = async (module: string, script: Script): Promise<ScriptedControl> => {
    const path = moduleControlPath(dir, module);
    await mkdir(dirname(path), { recursive: true });
    const server = await serveScriptedControl(path, (line, socket) => {
      const tool = (JSON.parse(line) as { tool: string }).tool;
      if (typeof script === "function") script(tool, socket);
      else socket.end(okLine(script[tool]));
    });
    servers.push(server);
    return server;
  };
  const follow = (modules: string[]) => {
    const logger = recordingLogger();
    const book = new MisbehavingModules({ logger });
    const s = new ProviderStandings({
      stateDir: dir,
      logger,
      onChange: () => {},
      everyMs: 50,
      misbehaving: book,
    });
    standings.push(s);
    s.follow(modules);
    return { s, book, logger };
  };

  it("a status whose consumers hold null is not used: the provider misbehaves, said once, and is asked again", async () => {
    const server = await serve("nulls", { status: statusOf([null]) });
    const { s, book, logger } = follow(["nulls"]);
    const got = await until("its standing", () => s.standings()[0], 30);
    assert.equal(got.answered, false);
    assert.match(got.problem ?? "", /its answer to status was not used \(it misbehaves\): consumers\[0\]/);
    const [bad] = book.list();
    assert.deepEqual(
      { module: bad?.module, answer: bad?.answer, fault: bad?.fault },
      { module: "nulls", answer: "status", fault: "malformed" },
    );
    assert.match(bad?.what ?? "", /^consumers\[0\]: .*expected object/i);
    const asked = server.asked;
    await until("three more asks", () => server.asked >= asked + 3, 30);
    const said = logger.lines.filter((l) => l.includes("misbehaves"));
    assert.equal(said.length, 1, `said once: ${JSON.stringify(logger.lines)}`);
  });

  it("a retire list whose logins is not a list leaves the waiting set without its id, and counts against retire list", async () => {
    await serve("logins", {
      status: statusOf([consumer("a_postgres", "awaiting-approval")]),
      "retire list": { id: "w1", logins: "a_postgres", held: 1, reason: "" },
    });
    const { s, book } = follow(["logins"]);
    const got = await until("its standing", () => s.standings()[0], 30);
    assert.equal(got.answered, true, "its status was good");
    assert.deepEqual(got.waiting?.logins, ["a_postgres"]);
    assert.equal(got.waiting?.id, null);
    await until("retire list counted", () => book.list().find((m) => m.answer === "retire list"), 30);
    assert.match(book.list()[0]?.what ?? "", /^logins: /);
  });

  const malformed: [string, string | Buffer][] = [
    [
      "a login whose toString throws",
      okLine(statusOf([{ ...consumer("x", "active"), login: { toString: 1 } }])),
    ],
    ["a state that is not one", okLine(statusOf([consumer("x_postgres", "exploded")]))],
    ["attempts as a NaN-ish string", okLine(statusOf([consumer("x", "failing", { attempts: "NaN" })]))],
    ["a date that is not one", okLine(statusOf([consumer("x", "active", { since: "Infinity" })]))],
    ["consumers that is an object", okLine({ ...STATUS_HEAD, consumers: { 0: consumer("x", "active") } })],
    ["a result of null", okLine(null)],
    ["no result at all", '{"ok":true}\n'],
    ["not JSON", "{ok: yes}\n"],
    ["a JSON list", "[1,2,3]\n"],
    [
      "bytes that are not UTF-8",
      Buffer.concat([Buffer.from('{"ok":true,"result":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}\n')]),
    ],
    ["a refusal without a message", '{"ok":false,"error":{"code":"nope"}}\n'],
    [
      "a refusal whose code is a wall of text",
      `{"ok":false,"error":{"code":"${"x".repeat(500)}","message":"m"}}\n`,
    ],
    ["a login 10,000 characters long", okLine(statusOf([consumer("a".repeat(10_000), "active")]))],
    ["nesting 100,000 deep", `{"ok":true,"result":${"[".repeat(100_000)}${"]".repeat(100_000)}}\n`],
  ];
  for (const [what, line] of malformed) {
    it(`refuses ${what} as malformed`, async () => {
      const module = `m${malformed.findIndex(([w]) => w === what)}`;
      await serve(module, (_tool, socket) => socket.end(line));
      const { s, book } = follow([module]);
      const got = await until("its standing", () => s.standings()[0], 30);
      assert.equal(got.answered, false);
      assert.equal(book.list()[0]?.fault, "malformed", JSON.stringify(book.list()));
    });
  }

  it("keeps a good answer with fields it does not know, and drops them", async () => {
    await serve("extra", {
      status: { ...statusOf([consumer("x_postgres", "failing", { colour: "red" })]), extra: [1, 2] },
    });
    const { s, book } = follow(["extra"]);
    const got = await until("its standing", () => s.standings()[0], 30);
    assert.equal(got.answered, true);
    assert.equal(got.failing[0]?.login, "x_postgres");
    assert.deepEqual(book.list(), []);
  });

  it("refuses an answer larger than 1 MiB unread, and one that never ends", async () => {
    await serve("huge", (_tool, socket) =>
      socket.end(okLine(statusOf([consumer("x", "active", { why: "w".repeat(2 * 1024 * 1024) })]))),
    );
    await serve("endless", (_tool, socket) => {
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = (): void => {
        while (!socket.destroyed && socket.write(chunk));
        if (!socket.destroyed) socket.once("drain", pump);
      };
      socket.write('{"ok":true,"result":');
      pump();
    });
    const { s, book } = follow(["huge", "endless"]);
    await until("both counted", () => book.list().length === 2, 30);
    assert.deepEqual(
      book.list().map((m) => [m.module, m.fault]),
      [
        ["endless", "too-large"],
        ["huge", "too-large"],
      ],
    );
    assert.ok(s.standings().every((p) => !p.answered));
  });

  it("counts a provider that never answers, or hangs up half-way, from the second ask on", async () => {
    await serve("silent", () => undefined);
    await serve("halfway", (_tool, socket) => socket.end('{"ok":true,"result":{"interf'));
    const logger = recordingLogger();
    const book = new MisbehavingModules({ logger });
    const s = new ProviderStandings({
      stateDir: dir,
      logger,
      onChange: () => {},
      everyMs: 50,
      timeoutMs: 300,
      misbehaving: book,
    });
    standings.push(s);
    s.follow(["halfway", "silent"]);
    await until("both counted", () => book.list().length === 2, 30);
    assert.deepEqual(
      book.list().map((m) => [m.module, m.fault, m.what]),
      [
        ["halfway", "hung-up", "it hung up 28 bytes into it"],
        ["silent", "slow", "no whole answer came within 300 ms"],
      ],
    );
  });

  it("the password gate says not yet for a provider that misbehaves, and yes beside it for one that answers well", async () => {
    const password = "pw-of-notes";
    await serve("gate-bad", { status: statusOf([null, { login: { toString: 1 } }]) });
    await serve("gate-good", {
      status: statusOf([consumer("wiki_gate_good", "active", { applied: passwordTag(password) })]),
    });
    const book = new MisbehavingModules({ logger: recordingLogger() });
    const gate = providerPasswordGate(dir, { timeoutMs: 2_000, misbehaving: book });
    const entry = (provider: string, login: string) => ({ provider, login }) as PlanEntry;
    const bad = await gate(entry("gate-bad", "notes_gate_bad"), password);
    assert.equal(bad.applied, false);
    assert.match(bad.applied ? "" : bad.why, /its answer to status was not used: consumers\[0\]/);
    assert.deepEqual(await gate(entry("gate-good", "wiki_gate_good"), password), { applied: true });
    assert.deepEqual(
      book.list().map((m) => m.module),
      ["gate-bad"],
    );
  });

  it("the tool runner answers module-misbehaving for a malformed answer, relays nothing of it, and keeps the call in the ledger", async () => {
    await serve("tools-bad", {
      "cleanup list": [
        {
          login: "x",
          retiredAt: null,
          why: "",
          derived: { deep: JSON.parse(`${"[".repeat(40)}${"]".repeat(40)}`) },
        },
      ],
    });
    const book = new MisbehavingModules({ logger: recordingLogger() });
    const entries: ToolLedgerEntry[] = [];
    const reply = await runToolCall(
      new TextEncoder().encode(
        JSON.stringify({ module: "tools-bad", tool: "cleanup list", args: [], who: "alice" }),
      ),
      {
        nc: undefined as never,
        node: "n1",
        stateDir: dir,
        modules: () => ["tools-bad"],
        ledger: async () => ({
          append: async (_kind, entry) => {
            entries.push(entry);
            return entries.length;
          },
        }),
        logger: recordingLogger(),
        secrets: async () => [],
        misbehaving: book,
      },
    );
    assert.equal(reply.ok, false);
    assert.equal(reply.ok ? "" : reply.code, "module-misbehaving");
    assert.match(
      reply.ok ? "" : reply.error,
      /^tools-bad on node n1 misbehaves: its answer to cleanup list was not passed on \(\[0\]\.derived\.deep: nests deeper than 16\)/,
    );
    assert.equal(entries[0]?.code, "module-misbehaving");
    assert.equal(book.list()[0]?.answer, "cleanup list");
  });
});

describe("a module's metrics.url", () => {
  it("counts one that is not a URL as malformed and reports no URL; a URL written after clears it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-hostile-metrics-"));
    try {
      const path = metricsUrlPath(dir, "pg");
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, "javascript:alert(1)\n");
      const book = new MisbehavingModules({ logger: recordingLogger() });
      const running = [{ name: "pg", state: "running", restarts: 0, log: "/l" }] as Parameters<
        typeof withMetricsUrls
      >[1];
      assert.equal(withMetricsUrls(dir, running, book)[0]?.metrics, undefined);
      assert.deepEqual(
        book.list().map((m) => [m.module, m.answer, m.fault]),
        [["pg", "metrics.url", "malformed"]],
      );
      await writeFile(path, "http://127.0.0.1:9464/metrics\n");
      assert.equal(withMetricsUrls(dir, running, book)[0]?.metrics, "http://127.0.0.1:9464/metrics");
      assert.deepEqual(book.list(), []);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("the book of misbehaving modules", () => {
  const clock = () => {
    let now = Date.parse(SINCE);
    return { now: () => now, advance: (ms: number) => (now += ms) };
  };

  it("counts a malformed answer at once; a slow or cut-off one only when the next ask meets the same", () => {
    const c = clock();
    const book = new MisbehavingModules({ logger: recordingLogger(), now: c.now });
    book.bad("pg", "status", "slow", "no whole answer came within 5000 ms");
    assert.equal(book.isMisbehaving("pg"), false);
    c.advance(2_000);
    book.bad("pg", "status", "hung-up", "it hung up before answering");
    assert.equal(book.isMisbehaving("pg"), true);
    assert.equal(book.list()[0]?.since, SINCE, "since its first bad answer");
    book.bad("rd", "status", "malformed", "consumers: expected array");
    assert.equal(book.isMisbehaving("rd"), true);
  });

  it("a good answer to one question clears only that question, and the log says start and end once each", () => {
    const logger = recordingLogger();
    const book = new MisbehavingModules({ logger });
    book.bad("pg", "status", "malformed", "consumers[0]: expected object");
    book.bad("pg", "retire list", "malformed", "logins: expected array");
    book.bad("pg", "status", "malformed", "consumers[0]: expected object");
    book.good("pg", "status");
    assert.deepEqual(
      book.list().map((m) => m.answer),
      ["retire list"],
    );
    book.good("pg", "retire list");
    book.good("pg", "retire list");
    assert.equal(book.isMisbehaving("pg"), false);
    assert.deepEqual(
      logger.lines.map((l) =>
        l
          .replace(/^\w+: /, "")
          .replace(/[:(].*/, "")
          .trim(),
      ),
      ["module pg misbehaves", "module pg answers well again"],
    );
  });
});
