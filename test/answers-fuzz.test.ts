// Generated answers, valid and hostile, at every boundary where the mesh reads what a module (or an
// agent) said: the agent's provider standings, its password gate and its tool runner, each asking
// a real Unix socket that answers what fast-check made; the controller's report intake and its tool
// relay, in process. Every valid answer is taken, every invalid one is refused (at the agent, the
// module is counted as misbehaving), and nothing throws past a boundary. A few answers go end to end
// through the sockets: 10 MB, one that never ends, one that never comes.
//
// Each of the five boundaries gets MESH_FUZZ_ANSWERS generated answers (default 2,100: 10,500 in
// all); set it higher for a deeper run.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import {
  MisbehavingModules,
  moduleControlPath,
  providerPasswordGate,
  ProviderStandings,
  runToolCall,
  type ToolRunnerOptions,
} from "@mesh/agent";
import { parseReport, relayToolCall, type FleetPlan, type NodeReport, type ToolCall } from "@mesh/controller";
import { isModuleName, reportedMisbehaviourSchema, type PlanEntry } from "@mesh/manifest";
import { passwordTag } from "@mesh/sdk/provider";
import { quietLogger, serveScriptedControl, type ScriptedControl } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";

const PER_BOUNDARY = Number(process.env.MESH_FUZZ_ANSWERS ?? 2_100);
const SEED = process.env.MESH_FUZZ_SEED === undefined ? undefined : Number(process.env.MESH_FUZZ_SEED);
const settings = (numRuns: number) => ({ numRuns, ...(SEED === undefined ? {} : { seed: SEED }) });

type Tool = "status" | "retire list" | "retire approve" | "cleanup list" | "cleanup delete";
const TOOLS: readonly Tool[] = ["status", "retire list", "retire approve", "cleanup list", "cleanup delete"];
const STATES = ["active", "failing", "unasked", "awaiting-approval", "retired"] as const;
const PASSWORD = "fuzzed-password-Qx7";
const TAG = passwordTag(PASSWORD);

// ---- What a valid answer is made of ----

const iso = fc
  .integer({ min: Date.parse("2000-01-01T00:00:00Z"), max: Date.parse("2100-01-01T00:00:00Z") })
  .map((ms) => new Date(ms).toISOString());
const login = fc.stringMatching(/^[a-z][a-z0-9_]{0,31}$/);
const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);
const text = fc.string({ maxLength: 40, unit: "binary" });
const id = fc.stringMatching(/^[a-f0-9]{12}$/);
const extras = fc.dictionary(fc.stringMatching(/^x[a-z]{0,5}$/), fc.jsonValue({ maxDepth: 2 }), {
  maxKeys: 2,
});

const consumer = fc
  .tuple(
    fc.record(
      {
        login,
        state: fc.constantFrom(...STATES),
        class: fc.option(name, { nil: null }),
        since: iso,
        why: text,
        node: name,
        attempts: fc.nat(1_000),
        applied: fc.oneof(fc.constant(TAG), fc.string({ maxLength: 22 })),
      },
      { requiredKeys: ["login", "state", "class", "since", "why"] },
    ),
    extras,
  )
  .map(([c, x]) => ({ ...x, ...c }));

const cleanupEntry = fc.record({
  login,
  retiredAt: fc.option(iso, { nil: null }),
  why: text,
  derived: fc.dictionary(fc.stringMatching(/^[a-z]{1,8}$/), fc.jsonValue({ maxDepth: 4 }), { maxKeys: 3 }),
});

/** A valid entry of each tool's list, for a hostile answer that needs one to spoil. */
const ENTRY: { readonly [T in Tool]?: fc.Arbitrary<Record<string, unknown>> } = {
  status: consumer,
  "cleanup list": cleanupEntry,
};

const VALID: { readonly [T in Tool]: fc.Arbitrary<unknown> } = {
  status: fc
    .tuple(
      fc.record({
        interface: name,
        instance: name,
        receives: text,
        lastPassAt: fc.option(iso, { nil: null }),
        contributionsProblem: fc.option(text, { nil: null }),
        consumers: fc.array(consumer, { maxLength: 6 }),
      }),
      extras,
    )
    .map(([s, x]) => ({ ...x, ...s })),
  "retire list": fc.record({
    id: fc.option(id, { nil: null }),
    logins: fc.array(login, { maxLength: 5 }),
    held: fc.nat(100),
    reason: text,
  }),
  "retire approve": fc.record({ id, retired: fc.array(login, { maxLength: 5 }) }),
  "cleanup list": fc.array(cleanupEntry, { maxLength: 4 }),
  "cleanup delete": fc.record({ login, freedBytes: fc.nat() }),
};

// ---- How an answer is made invalid: each way is invalid by construction ----

type Kind =
  | "text"
  | "name"
  | "login"
  | "date"
  | "nullable-date"
  | "nullable-text"
  | "nullable-name"
  | "count"
  | "state"
  | "logins"
  | "derived";

const notText = fc.constantFrom<unknown>(0, 1.5, true, [], {}, { toString: 1 }, ["x"]);
const long = (min: number) => fc.string({ minLength: min, maxLength: min + 300 });
const badDate = fc.constantFrom<unknown>(
  "NaN",
  "Infinity",
  "not a date",
  "",
  "2026-13-45T99:99:99Z",
  "x".repeat(80),
);
const deep = fc
  .integer({ min: 17, max: 60 })
  .map((n) => JSON.parse(`${"[".repeat(n)}${"]".repeat(n)}`) as unknown);

const WRONG: { readonly [K in Kind]: fc.Arbitrary<unknown> } = {
  text: fc.oneof(notText, fc.constant(null)),
  name: fc.oneof(notText, fc.constant(null), long(257)),
  login: fc.oneof(notText, fc.constant(null), fc.constant(""), long(257)),
  date: fc.oneof(notText, fc.constant(null), badDate),
  "nullable-date": fc.oneof(notText, badDate),
  "nullable-text": notText,
  "nullable-name": fc.oneof(notText, long(257)),
  count: fc.constantFrom<unknown>(-1, 1.5, "3", "NaN", "Infinity", null, true, [], {}),
  state: fc.constantFrom<unknown>("NaN", "", "ACTIVE", "deleted", null, 0, { toString: 1 }),
  logins: fc.constantFrom<unknown>("a_postgres", null, 1, {}, [null], [1], [""], [{ toString: 1 }]),
  derived: fc.oneof(
    fc.constantFrom<unknown>(null, [], "x", 1),
    deep.map((d) => ({ k: d })),
  ),
};

/** Each tool's fields: where in its answer (an object, or each entry of a list) and of what kind. */
const FIELDS: {
  readonly [T in Tool]: {
    readonly list?: string;
    readonly top: Record<string, Kind>;
    readonly entry?: Record<string, Kind>;
    readonly optional?: readonly string[];
  };
} = {
  status: {
    top: {
      interface: "name",
      instance: "name",
      receives: "text",
      lastPassAt: "nullable-date",
      contributionsProblem: "nullable-text",
    },
    list: "consumers",
    entry: {
      login: "login",
      state: "state",
      class: "nullable-name",
      since: "date",
      why: "text",
      node: "name",
      attempts: "count",
      applied: "name",
    },
    optional: ["node", "attempts", "applied"],
  },
  "retire list": { top: { id: "nullable-name", logins: "logins", held: "count", reason: "text" } },
  "retire approve": { top: { id: "name", retired: "logins" } },
  "cleanup list": {
    top: {},
    list: "",
    entry: { login: "login", retiredAt: "nullable-date", why: "text", derived: "derived" },
  },
  "cleanup delete": { top: { login: "login", freedBytes: "count" } },
};

type Hostile =
  | {
      readonly way: "field";
      readonly pick: number;
      readonly values: Readonly<Record<Kind, unknown>>;
      readonly entry: number;
      readonly spare: Record<string, unknown> | undefined;
    }
  | {
      readonly way: "missing";
      readonly pick: number;
      readonly entry: number;
      readonly spare: Record<string, unknown> | undefined;
    }
  | { readonly way: "entry"; readonly value: unknown; readonly entry: number }
  | { readonly way: "whole"; readonly value: unknown }
  | { readonly way: "truncated"; readonly at: number }
  | { readonly way: "not-utf8"; readonly at: number }
  | { readonly way: "envelope"; readonly line: string };

const hostile = (tool: Tool): fc.Arbitrary<Hostile> => {
  const spare = ENTRY[tool] ?? fc.constant(undefined);
  return fc.oneof(
    {
      weight: 6,
      arbitrary: fc.record({
        way: fc.constant("field" as const),
        pick: fc.nat(),
        values: fc.record(WRONG),
        entry: fc.nat(5),
        spare,
      }),
    },
    {
      weight: 2,
      arbitrary: fc.record({ way: fc.constant("missing" as const), pick: fc.nat(), entry: fc.nat(5), spare }),
    },
    {
      weight: 2,
      arbitrary: fc.record({
        way: fc.constant("entry" as const),
        value: fc.constantFrom<unknown>(null, 1, "x", [], true, { toString: 1 }),
        entry: fc.nat(5),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        way: fc.constant("whole" as const),
        value: fc.constantFrom<unknown>(null, 0, "status", true, { toString: 1 }),
      }),
    },
    { weight: 1, arbitrary: fc.record({ way: fc.constant("truncated" as const), at: fc.nat() }) },
    { weight: 1, arbitrary: fc.record({ way: fc.constant("not-utf8" as const), at: fc.nat() }) },
    {
      weight: 1,
      arbitrary: fc.record({
        way: fc.constant("envelope" as const),
        line: fc.constantFrom(
          '{"ok":"true","result":{}}',
          '{"ok":1,"result":{}}',
          '{"ok":true}',
          '{"result":{}}',
          '{"ok":false,"error":"no"}',
          '{"ok":false,"error":{"code":"NOT A CODE","message":"m"}}',
          '{"ok":false,"error":{"code":"still-asked","message":7}}',
          "[]",
          "null",
          "{ok: true}",
          "HTTP/1.1 400 Bad Request",
        ),
      }),
    },
  );
};

/** One answer line (without its newline) and whether it is one a reader must take. */
interface Answer {
  readonly tool: Tool;
  readonly valid: boolean;
  /** The result, for a valid answer that is not a refusal. */
  readonly result?: unknown;
  /** The provider's refusal code, for a valid refusal. */
  readonly refused?: string;
  readonly line: Buffer;
}

function corrupt(tool: Tool, result: unknown, h: Hostile): Buffer {
  const f = FIELDS[tool];
  const doc = structuredClone(result) as Record<string, unknown> | Record<string, unknown>[];
  const list = (spare?: Record<string, unknown>): Record<string, unknown>[] => {
    const entries = (f.list === "" ? doc : (doc as Record<string, unknown>)[f.list ?? ""]) as Record<
      string,
      unknown
    >[];
    if (entries.length === 0 && spare !== undefined) entries.push(structuredClone(spare));
    return entries;
  };
  switch (h.way) {
    case "field":
    case "missing": {
      const fields = [
        ...Object.keys(f.top).map((k) => ({ k, inEntry: false })),
        ...Object.keys(f.entry ?? {}).map((k) => ({ k, inEntry: true })),
      ].filter(({ k }) => h.way === "field" || !(f.optional ?? []).includes(k));
      const { k, inEntry } = fields[h.pick % fields.length]!;
      const kind = inEntry ? f.entry![k]! : f.top[k]!;
      const entries = inEntry ? list(h.spare) : [];
      const target = inEntry ? entries[h.entry % entries.length]! : (doc as Record<string, unknown>);
      if (h.way === "missing") delete target[k];
      else target[k] = h.values[kind];
      break;
    }
    case "entry": {
      if (f.list === undefined) return line({ ok: true, result: h.value });
      const entries = list({});
      entries[h.entry % entries.length] = h.value as never;
      break;
    }
    case "whole":
      return line({ ok: true, result: Array.isArray(doc) ? { entries: doc } : h.value });
    case "truncated": {
      const whole = line({ ok: true, result: doc });
      return whole.subarray(0, h.at % (whole.length - 1));
    }
    case "not-utf8": {
      const whole = line({ ok: true, result: doc });
      const at = h.at % whole.length;
      return Buffer.concat([whole.subarray(0, at), Buffer.from([0xc3, 0x28, 0xff]), whole.subarray(at)]);
    }
    case "envelope":
      return Buffer.from(h.line);
  }
  return line({ ok: true, result: doc });
}

const line = (value: unknown): Buffer => Buffer.from(JSON.stringify(value));

const answers = (tool: Tool): fc.Arbitrary<Answer> =>
  fc.oneof(
    {
      weight: 5,
      arbitrary: VALID[tool].map((result): Answer => ({
        tool,
        valid: true,
        result,
        line: line({ ok: true, result }),
      })),
    },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom("still-asked", "nothing-waiting", "a-newer-code"), text)
        .map(([code, message]): Answer => ({
          tool,
          valid: true,
          refused: code,
          line: line({ ok: false, error: { code, message } }),
        })),
    },
    {
      weight: 6,
      arbitrary: fc
        .tuple(VALID[tool], hostile(tool))
        .map(([result, h]): Answer => ({ tool, valid: false, line: corrupt(tool, result, h) })),
    },
  );

/** Each tool's answers, made once. */
const ANSWERS = Object.fromEntries(TOOLS.map((t) => [t, answers(t)])) as Record<Tool, fc.Arbitrary<Answer>>;
const ANY_ANSWER = fc.constantFrom(...TOOLS).chain((tool) => ANSWERS[tool]);

// ---- The agent's boundaries, each against a real socket ----

describe("generated answers at the agent's boundaries", { timeout: 600_000 }, () => {
  let dir: string;
  let server: ScriptedControl;
  /** What the socket answers next, by tool (a line without its newline, or a function of the socket). */
  const next = new Map<string, Buffer | ((socket: Socket) => void)>();
  const book = new MisbehavingModules({ logger: quietLogger });
  const MODULE = "fuzz";

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-answers-fuzz-"));
    const path = moduleControlPath(dir, MODULE);
    await mkdir(dirname(path), { recursive: true });
    server = await serveScriptedControl(path, (request, socket) => {
      const tool = (JSON.parse(request) as { tool: string }).tool;
      const answer =
        next.get(tool) ?? line({ ok: true, result: { id: null, logins: [], held: 0, reason: "" } });
      if (typeof answer === "function") answer(socket);
      else socket.end(Buffer.concat([answer, Buffer.from("\n")]));
    });
  });
  after(async () => {
    await server?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const listed = (answer: string): boolean =>
    book.list().some((m) => m.module === MODULE && m.answer === answer);

  it(`the provider standings take every valid status and count every invalid one (${PER_BOUNDARY} answers)`, async () => {
    const standings = new ProviderStandings({
      stateDir: dir,
      logger: quietLogger,
      onChange: () => {},
      everyMs: 1e9,
      timeoutMs: 2_000,
      misbehaving: book,
    });
    try {
      standings.follow([MODULE]);
      await standings.refresh();
      await fc.assert(
        fc.asyncProperty(ANSWERS.status, async (a) => {
          next.set("status", a.line);
          await standings.refresh();
          const got = standings.standings()[0];
          assert.ok(got !== undefined);
          if (a.valid && a.result !== undefined) {
            const consumers = (a.result as { consumers: unknown[] }).consumers;
            assert.equal(got.answered, true, got.problem ?? "");
            assert.equal(
              Object.values(got.counts).reduce((x, y) => x + y, 0),
              consumers.length,
            );
          } else if (a.valid) {
            assert.match(got.problem ?? "", new RegExp(`refused status \\(${a.refused}\\)`));
          } else {
            assert.equal(got.answered, false);
            assert.match(got.problem ?? "", /its answer to status was not used \(it misbehaves\)/);
          }
          assert.equal(listed("status"), !a.valid);
        }),
        settings(PER_BOUNDARY),
      );
    } finally {
      standings.stop();
      next.delete("status");
    }
  });

  it(`the password gate says yes only for what a valid status shows applied, and counts every invalid one (${PER_BOUNDARY} answers)`, async () => {
    const gate = providerPasswordGate(dir, { timeoutMs: 2_000, misbehaving: book });
    await fc.assert(
      fc.asyncProperty(ANSWERS.status, fc.nat(7), async (a, pick) => {
        next.set("status", a.line);
        const consumers =
          (a.result as { consumers?: Record<string, unknown>[] } | undefined)?.consumers ?? [];
        const asked = consumers[pick % Math.max(1, consumers.length)]?.["login"] ?? "nobody_here";
        const answer = await gate({ provider: MODULE, login: asked } as PlanEntry, PASSWORD);
        const shown = consumers.find((c) => c["login"] === asked);
        const applied =
          a.result !== undefined &&
          shown !== undefined &&
          shown["state"] !== "failing" &&
          shown["applied"] === TAG;
        assert.equal(answer.applied, applied, answer.applied ? "" : answer.why);
        assert.equal(listed("status"), !a.valid);
      }),
      settings(PER_BOUNDARY),
    );
    next.delete("status");
  });

  it(`the tool runner relays every valid answer and answers module-misbehaving for every invalid one (${PER_BOUNDARY} answers)`, async () => {
    const options: ToolRunnerOptions = {
      nc: undefined as unknown as NatsConnection,
      node: "n1",
      stateDir: dir,
      modules: () => [MODULE],
      ledger: async () => ({ append: async () => 1 }),
      logger: quietLogger,
      secrets: async () => [],
      misbehaving: book,
    };
    await fc.assert(
      fc.asyncProperty(ANY_ANSWER, async (a) => {
        next.set(a.tool, a.line);
        const args =
          a.tool === "cleanup delete" ? ["old_one"] : a.tool === "retire approve" ? ["0123456789ab"] : [];
        const call = { module: MODULE, tool: a.tool, args, who: "fuzz" };
        const reply = await runToolCall(new TextEncoder().encode(JSON.stringify(call)), options);
        if (a.valid && a.result !== undefined) assert.equal(reply.ok, true, reply.ok ? "" : reply.error);
        else if (a.valid) assert.equal(reply.ok ? "" : reply.code, a.refused);
        else assert.equal(reply.ok ? "" : reply.code, "module-misbehaving");
        assert.equal(listed(a.tool), !a.valid);
        next.delete(a.tool);
      }),
      settings(PER_BOUNDARY),
    );
  });

  it("end to end through the socket, a 10 MB answer, one that never ends and one that never comes are each refused at every boundary", async () => {
    const huge = line({ ok: true, result: { consumers: [], why: "w".repeat(10 * 1024 * 1024) } });
    const endless = (socket: Socket): void => {
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = (): void => {
        while (!socket.destroyed && socket.write(chunk));
        if (!socket.destroyed) socket.once("drain", pump);
      };
      socket.write('{"ok":true,"result":');
      pump();
    };
    const silent = (): void => undefined;
    const standings = new ProviderStandings({
      stateDir: dir,
      logger: quietLogger,
      onChange: () => {},
      everyMs: 1e9,
      timeoutMs: 300,
      misbehaving: book,
    });
    const gate = providerPasswordGate(dir, { timeoutMs: 300, misbehaving: book });
    try {
      standings.follow([MODULE]);
      for (const [what, answer, fault] of [
        ["10 MB", huge, "too-large"],
        ["never-ending", endless, "too-large"],
        ["never-coming", silent, "slow"],
      ] as const) {
        book.good(MODULE, "status");
        next.set("status", answer);
        // A slow answer counts from its second ask: each boundary asks twice.
        for (let i = 0; i < 2; i++) {
          await standings.refresh();
          assert.equal(standings.standings()[0]?.answered, false, what);
          const said = await gate({ provider: MODULE, login: "x_fuzz" } as PlanEntry, PASSWORD);
          assert.equal(said.applied, false, what);
        }
        assert.equal(book.list().find((m) => m.answer === "status")?.fault, fault, what);
        const reply = await runToolCall(
          new TextEncoder().encode(JSON.stringify({ module: MODULE, tool: "status", args: [], who: "fuzz" })),
          {
            nc: undefined as unknown as NatsConnection,
            node: "n1",
            stateDir: dir,
            modules: () => [MODULE],
            ledger: async () => ({ append: async () => 1 }),
            logger: quietLogger,
            secrets: async () => [],
            misbehaving: book,
            timeoutMs: 300,
          },
        );
        assert.equal(reply.ok ? "" : reply.code, "module-misbehaving", what);
      }
    } finally {
      standings.stop();
      next.delete("status");
    }
  });
});

// ---- The controller's boundaries, in process ----

describe("generated reports and tool replies at the controller's boundaries", { timeout: 600_000 }, () => {
  const moduleName = fc.stringMatching(/^[a-z][a-z0-9-]{0,12}$/);
  const loginOf = fc.stringMatching(/^[a-z][a-z0-9_]{0,31}$/);
  const plain = fc.stringMatching(/^[a-z ]{0,60}$/);
  const className = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);
  // Made once: an arbitrary made inside a chain is made again for every value drawn, which is slow.
  const PROVIDER = fc.record({
    answered: fc.boolean(),
    problem: fc.option(plain, { nil: null }),
    askedAt: iso,
    lastPassAt: fc.option(iso, { nil: null }),
    contributionsProblem: fc.option(plain, { nil: null }),
    counts: fc.record({
      active: fc.nat(9),
      failing: fc.nat(9),
      unasked: fc.nat(9),
      "awaiting-approval": fc.nat(9),
      retired: fc.nat(9),
    }),
    failing: fc.array(
      fc.record({
        login: loginOf,
        node: fc.option(moduleName, { nil: null }),
        class: className,
        since: iso,
        attempts: fc.integer({ min: 1, max: 99 }),
        error: plain,
      }),
      { maxLength: 3 },
    ),
    waiting: fc.option(
      fc
        .record({
          id: fc.option(id, { nil: null }),
          logins: fc.array(loginOf, { maxLength: 4 }),
          more: fc.nat(9),
          held: fc.nat(9),
          reason: plain,
        })
        .map(({ more, ...w }) => ({ ...w, count: w.logins.length + more })),
      { nil: null },
    ),
  });
  const MISBEHAVIOUR = fc.record({
    answer: fc.constantFrom(...TOOLS, "metrics.url"),
    fault: fc.constantFrom("malformed", "too-large", "slow", "hung-up"),
    what: plain,
    since: iso,
  });
  const validReport = fc
    .uniqueArray(
      fc.record({
        name: moduleName,
        state: fc.constantFrom("starting", "running", "crashing", "stopped"),
        restarts: fc.nat(50),
        log: fc.string({ maxLength: 40 }),
      }),
      { selector: (m) => m.name, maxLength: 5 },
    )
    .chain((modules) => {
      const names = modules.map((m) => m.name);
      const some = names.length === 0 ? fc.constant([]) : fc.subarray(names);
      const provider = (module: string) => PROVIDER.map((p) => ({ module, ...p }));
      const misbehaviour = (module: string) => MISBEHAVIOUR.map((m) => ({ module, ...m }));
      return fc.record({
        node: fc.constant("node-a"),
        generation: fc.nat(),
        at: iso,
        modules: fc.constant(modules),
        files: fc.record({ written: fc.nat(), unchanged: fc.nat() }),
        moduleKeys: fc.constant({}),
        providers: some.chain((ms) => each(ms, provider)),
        misbehaving: some.chain((ms) => each(ms, misbehaviour)),
      });
    });

  /** One value of `f(m)` for each of `ms`, in order. */
  const each = <T>(ms: readonly string[], f: (m: string) => fc.Arbitrary<T>): fc.Arbitrary<T[]> =>
    fc.tuple(...ms.map(f)) as unknown as fc.Arbitrary<T[]>;

  /** A JSON value with one place, chosen by `path`, replaced by `junk`. */
  const mutated = (value: unknown, path: readonly number[], junk: unknown): unknown => {
    if (path.length === 0 || typeof value !== "object" || value === null) return junk;
    const keys = Object.keys(value);
    if (keys.length === 0) return junk;
    const key = keys[path[0]! % keys.length]!;
    const copy: Record<string, unknown> | unknown[] = Array.isArray(value) ? [...value] : { ...value };
    (copy as Record<string, unknown>)[key] = mutated(
      (value as Record<string, unknown>)[key],
      path.slice(1),
      junk,
    );
    return copy;
  };
  const junk = fc.oneof(
    fc.constantFrom<unknown>(
      null,
      0,
      -1,
      1.5,
      "",
      "NaN",
      true,
      [],
      {},
      { toString: 1 },
      [null],
      "x\ny".repeat(600),
    ),
    deep,
    fc.jsonValue({ maxDepth: 3 }),
  );

  /** What every report the controller keeps must be, however hostile what it was made from. */
  const assertBounded = (r: NodeReport): void => {
    assert.doesNotThrow(() => JSON.stringify(r));
    for (const m of r.modules) assert.ok(isModuleName(m.name), m.name);
    for (const b of r.misbehaving ?? []) {
      assert.ok(reportedMisbehaviourSchema.safeParse(b).success, JSON.stringify(b));
      assert.ok(r.modules.some((m) => m.name === b.module));
    }
    for (const p of r.providers ?? []) {
      assert.ok(isModuleName(p.module));
      for (const f of p.failing) assert.match(f.login, /^[a-z][a-z0-9_]{0,31}$/);
      for (const t of [p.problem, p.contributionsProblem, ...p.failing.map((f) => f.error)])
        assert.ok(t === null || (t.length <= 1_100 && !t.includes("\n")));
    }
  };

  it(`the report intake keeps every valid report whole and only well-formed, bounded parts of any other (${PER_BOUNDARY} reports)`, () => {
    const heard = new Date("2026-12-01T12:00:00.000Z");
    fc.assert(
      fc.property(
        validReport,
        fc.oneof(
          fc.constant(undefined),
          fc.record({ path: fc.array(fc.nat(), { minLength: 1, maxLength: 6 }), junk }),
          fc.record({ cut: fc.nat() }),
        ),
        (report, hostile) => {
          let bytes: Uint8Array;
          if (hostile === undefined) bytes = line(report);
          else if ("cut" in hostile) {
            const whole = line(report);
            bytes = whole.subarray(0, hostile.cut % whole.length);
          } else bytes = line(mutated(report, hostile.path, hostile.junk));
          const parsed = parseReport("node-a", bytes, heard);
          if (hostile === undefined) {
            assert.ok(parsed);
            assert.equal(parsed.modules.length, report.modules.length);
            assert.equal(parsed.providers?.length, report.providers.length);
            // Compared as JSON: fast-check makes some of its objects without a prototype.
            assert.deepEqual(parsed.misbehaving ?? [], JSON.parse(JSON.stringify(report.misbehaving)));
          }
          if (parsed !== undefined) assertBounded(parsed);
        },
      ),
      settings(PER_BOUNDARY),
    );
    // A report larger than the controller reads is dropped whole, unread.
    assert.equal(parseReport("node-a", Buffer.alloc(10 * 1024 * 1024, 0x20), heard), undefined);
  });

  it(`the tool relay passes on every valid reply and refuses every invalid one, naming the agent (${PER_BOUNDARY} replies)`, async () => {
    let reply: Buffer = Buffer.from("");
    const nc = { request: async () => ({ data: reply }) } as unknown as NatsConnection;
    const fleet = {
      fleetFile: "/f/mesh.yaml",
      modules: [{ name: "fuzz", node: "node-a", manifest: "/m/module.json" }],
    } as unknown as FleetPlan;
    const sources = { fleet: () => fleet, isEnrolled: () => true };
    await fc.assert(
      fc.asyncProperty(
        ANY_ANSWER,
        fc.constantFrom(undefined, "the ledger entry was not written"),
        async (a, ledger) => {
          // The agent's reply around the module's answer: its envelope is the agent's, its answer the module's.
          const parsed = (() => {
            try {
              const value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(a.line)) as unknown;
              return typeof value === "object" && value !== null
                ? (value as Record<string, unknown>)
                : undefined;
            } catch {
              return undefined;
            }
          })();
          reply =
            a.valid && a.result !== undefined
              ? line({ ok: true, answer: a.result, ...(ledger ? { ledger } : {}) })
              : a.valid
                ? line({ ok: false, error: "refused", code: a.refused })
                : parsed !== undefined && parsed["ok"] === true && "result" in parsed
                  ? line({ ok: true, answer: parsed["result"] })
                  : a.line;
          const call: ToolCall = { module: "fuzz", tool: a.tool, args: [], who: "fuzz" };
          const got = await relayToolCall(nc, call, sources, 1_000);
          if (a.valid && a.result !== undefined) {
            assert.equal(got.ok, true, got.ok ? "" : got.error);
            assert.equal(got.ledger, ledger);
          } else if (a.valid) assert.equal(got.ok ? "" : got.code, a.refused);
          else if (parsed?.["ok"] === false && typeof parsed["error"] === "string") {
            // Hostile as a provider's answer, but a well-formed refusal as an agent's reply.
            assert.equal(got.ok, false);
          } else assert.equal(got.ok ? "" : got.code, "agent-not-answering");
        },
      ),
      settings(PER_BOUNDARY),
    );
  });
});
