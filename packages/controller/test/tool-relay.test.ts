// The controller's tool relay against a real nats-server and a real controller: an operator's call
// reaches the module's node (whose agent is stood in for on the node's own enrolled connection),
// the answer comes back, and every refusal names what is wrong. Only the operator's credential may
// ask; a node or a module cannot, and another node cannot take a node's calls (the server refuses).
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  closeBus,
  connectBus,
  credsFor,
  ensureLedger,
  inboxPrefix,
  ledgerInboxPrefix,
  ledgerPermissions,
  newUserKeys,
  readLedger,
  sendRequest,
  toolSubject,
  type BusPermissions,
} from "@mesh/bus";
import {
  OPERATOR_IDENTITY,
  operatorPermissions,
  relayToolCall,
  TOOL_REQUEST_SUBJECT,
  type Controller,
} from "@mesh/controller";
import { type ToolReply } from "../src/tool-relay.ts";
import { compilePermissions, loadManifest } from "@mesh/manifest";
import type { NatsConnection } from "@nats-io/transport-node";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { enrollNode, startTestMesh, type TestMesh, type TestNode } from "./test-mesh.ts";

// A denied request is refused by the server; how fast it says so depends on the machine.
const REFUSED_WITHIN = { timeout: 20_000 };

/** What a stand-in agent does with the calls relayed to its node (`slow`: answers after 2 s). */
type AgentMode = "answer" | "silent" | "slow" | "malformed";

/** A provider's status as the fake agent relays it. */
const statusOf = (module: string) => ({
  interface: "postgres-database",
  instance: module,
  receives: "/r.json",
  lastPassAt: null,
  contributionsProblem: null,
  consumers: [],
});

void describe("the controller relays tool calls to the module's node", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let controller: Controller;
  let a: TestNode;
  let operator: NatsConnection;
  let admin: NatsConnection;
  const seen: unknown[] = [];
  let mode: AgentMode = "answer";
  let answered = 0;

  const connectAs = async (
    name: string,
    permissions: BusPermissions,
    inbox?: string,
  ): Promise<NatsConnection> => {
    const keys = newUserKeys();
    const jwt = await mesh.authority.issueUser({ name, publicKey: keys.publicKey, permissions });
    return connectBus({
      servers: mesh.nats.url,
      creds: credsFor(jwt, keys.seed),
      name,
      ...(inbox === undefined ? {} : { inboxPrefix: inbox }),
    });
  };

  const ask = async (body: unknown): Promise<ToolReply> => {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    const msg = await operator.request(TOOL_REQUEST_SUBJECT, text, { timeout: 30_000 });
    return msg.json<ToolReply>();
  };

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    controller = await mesh.startController(fleet.fleetFile);
    a = await enrollNode(await controller.joinToken("node-a"));
    // node-a's agent, stood in for on the node's own enrolled connection.
    const sub = a.nc.subscribe(toolSubject("node-a"));
    void (async () => {
      for await (const msg of sub) {
        const call = msg.json<{ module: string; tool: string; who: string }>();
        seen.push(call);
        if (mode === "silent") continue;
        if (mode === "malformed") {
          msg.respond(JSON.stringify({ ok: true, answer: { ...statusOf(call.module), consumers: [null] } }));
          continue;
        }
        if (mode === "slow") await new Promise((resolve) => setTimeout(resolve, 2_000));
        answered++;
        msg.respond(
          JSON.stringify(
            call.tool === "cleanup delete"
              ? { ok: false, error: "app9 is still asked for", code: "still-asked" }
              : call.who === "kept"
                ? {
                    ok: true,
                    answer: statusOf(call.module),
                    ledger: "the ledger entry for this call is not written yet: testing",
                    ledgerWaits: true,
                  }
                : {
                    ok: true,
                    answer: statusOf(call.module),
                    ledger: "the ledger entry for this call was not written: testing",
                  },
          ),
        );
      }
    })();
    await a.nc.flush();
    operator = await connectAs(OPERATOR_IDENTITY, operatorPermissions(), inboxPrefix(OPERATOR_IDENTITY));
    // What the controller makes for each module as its node enrolls, made here for the modules used.
    admin = await connectAs("admin", { pub: { allow: [">"] }, sub: { allow: [">"] } });
    for (const module of ["postgres", "redis"]) await ensureLedger(admin, module);
  });
  after(async () => {
    if (operator) await closeBus(operator);
    if (admin) await closeBus(admin);
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
  });

  /** The tool entries of `module`'s ledger, newest last. */
  const toolEntries = async (module: string): Promise<Record<string, unknown>[]> =>
    (await readLedger(admin, module, { limit: 100, kind: "tool" })).map((r) => ({ ...r.entry }));

  void it("relays an operator's call to the module's node as it was asked, through mesh tool whatever it says", async () => {
    const before = seen.length;
    const reply = await ask({ module: "postgres", tool: "status", args: [], who: "alice", via: "dashboard" });
    assert.deepEqual(reply, { ok: true, answer: statusOf("postgres") });
    assert.deepEqual(seen.slice(before), [
      { module: "postgres", tool: "status", args: [], who: "alice", via: "mesh tool" },
    ]);
  });

  void it("records a call whose agent could not write its entry itself: who, through what, what came of it", async () => {
    await ask({ module: "postgres", tool: "status", args: [], who: "alice" });
    const last = (await toolEntries("postgres")).at(-1);
    assert.ok(last);
    const { at, ...rest } = last;
    assert.ok(Number.isFinite(Date.parse(String(at))));
    assert.deepEqual(rest, {
      kind: "tool",
      tool: "status",
      args: [],
      who: "alice",
      via: "mesh tool",
      ok: true,
      answer: statusOf("postgres"),
      recordedBy: "controller",
    });
  });

  void it("records nothing of a call whose agent keeps its entry to append later, and says it waits", async () => {
    const entries = (await toolEntries("postgres")).length;
    const reply = await ask({ module: "postgres", tool: "status", args: [], who: "kept" });
    assert.ok(reply.ok, JSON.stringify(reply));
    assert.equal(reply.ledgerWaits, true);
    assert.match(reply.ledger ?? "", /not written yet/);
    assert.equal((await toolEntries("postgres")).length, entries, "the agent's to write, not twice");
  });

  void it("passes a page's unrecorded read on as such, and records nothing of it", async () => {
    const before = seen.length;
    const entries = (await toolEntries("postgres")).length;
    const reply = await ask({ module: "postgres", tool: "status", args: [], who: "page", record: false });
    assert.ok(reply.ok, JSON.stringify(reply));
    assert.deepEqual(seen.slice(before), [
      { module: "postgres", tool: "status", args: [], who: "page", via: "mesh tool", record: false },
    ]);
    assert.equal((await toolEntries("postgres")).length, entries);
  });

  void it("relays the dashboard's call as the dashboard's", async () => {
    const before = seen.length;
    const reply = await controller.tool({ module: "postgres", tool: "status", args: [], who: "carol" });
    assert.ok(reply.ok, JSON.stringify(reply));
    assert.deepEqual(seen.slice(before), [
      { module: "postgres", tool: "status", args: [], who: "carol", via: "dashboard" },
    ]);
  });

  void it("answers an agent's reply whose answer is not the tool's as a refusal naming the node, and passes none of it on", async () => {
    mode = "malformed";
    try {
      const reply = await ask({ module: "postgres", tool: "status", args: [], who: "alice" });
      assert.equal(reply.ok, false);
      assert.equal(reply.ok ? "" : reply.code, "agent-not-answering");
      assert.match(
        reply.ok ? "" : reply.error,
        /node node-a's agent relayed an answer to status that is not one \(consumers\[0\]: /,
      );
    } finally {
      mode = "answer";
    }
  });

  void it("brings a provider's refusal back with its code", async () => {
    const reply = await ask({ module: "postgres", tool: "cleanup delete", args: ["app9"], who: "alice" });
    assert.deepEqual(reply, { ok: false, error: "app9 is still asked for", code: "still-asked" });
  });

  void it("names the modules of the fleet when asked for one it does not have", async () => {
    const reply = await ask({ module: "mysql", tool: "status", args: [], who: "alice" });
    assert.ok(!reply.ok);
    assert.equal(reply.code, "unknown-module");
    assert.match(reply.error, /mysql is not a module of the fleet being served/);
    assert.match(reply.error, /app1, app2, app3, postgres, redis/);
  });

  void it("says which node has not enrolled, and how to start its agent, and records the refusal", async () => {
    const reply = await ask({ module: "redis", tool: "cleanup delete", args: ["app_redis"], who: "alice" });
    assert.ok(!reply.ok);
    assert.equal(reply.code, "node-not-enrolled");
    assert.match(reply.error, /redis runs on node node-b, which has not enrolled/);
    assert.match(reply.error, /mesh agent --node node-b/);
    assert.equal(reply.ledger, undefined, "the refusal is in redis's ledger");
    const last = (await toolEntries("redis")).at(-1);
    assert.deepEqual(
      [last?.["tool"], last?.["args"], last?.["who"], last?.["via"], last?.["ok"], last?.["code"]],
      ["cleanup delete", ["app_redis"], "alice", "mesh tool", false, "node-not-enrolled"],
    );
  });

  void it("says which node's agent does not answer, and what to check", async () => {
    const b = await enrollNode(await controller.joinToken("node-b"));
    try {
      const reply = await ask({ module: "redis", tool: "status", args: [], who: "alice" });
      assert.ok(!reply.ok);
      assert.equal(reply.code, "agent-not-answering");
      assert.match(reply.error, /no agent answers for node node-b, where redis runs/);
      assert.match(reply.error, /mesh status/);
      const last = (await toolEntries("redis")).at(-1);
      assert.deepEqual([last?.["tool"], last?.["code"]], ["status", "agent-not-answering"]);
    } finally {
      await closeBus(b.nc);
    }
  });

  void it("says when a node's agent takes too long, and where the result will be", async () => {
    mode = "silent";
    try {
      const sources = { fleet: () => controller.current(), isEnrolled: () => true };
      const call = { module: "app1", tool: "status", args: [], who: "alice" } as const;
      // The controller's own permissions, on a connection of the test's.
      const relay = await connectAs("relay", { pub: { allow: [">"] }, sub: { allow: [">"] } });
      const reply = await relayToolCall(relay, call, sources, 200).finally(() => closeBus(relay));
      assert.ok(!reply.ok);
      assert.equal(reply.code, "agent-timeout");
      assert.match(reply.error, /node node-a's agent did not answer status for app1/);
      assert.match(reply.error, /mesh ledger app1/);
    } finally {
      mode = "answer";
    }
  });

  void it("sends the receipt of a call it takes before the node's agent answers, so the asker waits rather than asks again", async () => {
    mode = "slow";
    const sent = sendRequest(
      operator,
      TOOL_REQUEST_SUBJECT,
      JSON.stringify({ module: "app1", tool: "status", args: [], who: "alice" }),
      { receipt: true, inboxPrefix: inboxPrefix(OPERATOR_IDENTITY) },
    );
    try {
      const before = answered;
      await sent.taken;
      assert.equal(answered, before, "taken before the agent answered");
      const reply = JSON.parse(await sent.answer(30_000)) as ToolReply;
      assert.ok(reply.ok);
      assert.equal(answered, before + 1);
    } finally {
      sent.close();
      mode = "answer";
    }
  });

  void it("refuses a bad request before it travels, saying what a request looks like", async () => {
    const before = seen.length;
    const bad: [unknown, RegExp][] = [
      ["not json", /not JSON/],
      [[1, 2], /not a JSON object/],
      [{ tool: "status", args: [], who: "alice" }, /names no module/],
      [{ module: "Postgres!", tool: "status", args: [], who: "alice" }, /cannot be one/],
      [{ module: "postgres", tool: "status", args: [] }, /does not say who asks/],
      [{ module: "postgres", tool: "drop everything", args: [], who: "alice" }, /unknown tool/],
      [{ module: "postgres", tool: "status", args: [7], who: "alice" }, /list of strings/],
      [{ module: "postgres", tool: "status", args: ["x"], who: "alice" }, /takes 0 argument/],
      [
        { module: "postgres", tool: "cleanup delete", args: ["Robert'); DROP ROLE x;--"], who: "alice" },
        /not a login/,
      ],
      [
        { module: "postgres", tool: "retire approve", args: ["x".repeat(300)], who: "alice" },
        /longer than 256/,
      ],
      [
        { module: "postgres", tool: "status", args: [], who: "alice", pad: "x".repeat(9000) },
        /bytes, more than/,
      ],
      [
        { module: "postgres", tool: "cleanup delete", args: ["app9"], who: "alice", record: false },
        /only for the read-only tools/,
      ],
      [{ module: "postgres", tool: "status", args: [], who: "alice", record: true }, /leave "record" out/],
    ];
    for (const [body, why] of bad) {
      const reply = await ask(body);
      assert.ok(!reply.ok, JSON.stringify(body).slice(0, 80));
      assert.equal(reply.code, "bad-request");
      assert.match(reply.error, why);
    }
    assert.equal(seen.length, before, "no bad request reached a node");
  });

  void it("lets only the operator's credential ask: a node's and a module's are refused by the server", async () => {
    const before = seen.length;
    const body = JSON.stringify({ module: "postgres", tool: "status", args: [], who: "mallory" });
    await assert.rejects(a.nc.request(TOOL_REQUEST_SUBJECT, body, REFUSED_WITHIN), /Permissions Violation/);

    const manifest = await loadManifest(join(fleet.dir, "postgres", "module.json"));
    const bus = await connectAs("postgres", compilePermissions(manifest, "postgres", []));
    const ledger = await connectAs(
      "postgres-ledger",
      ledgerPermissions("postgres"),
      ledgerInboxPrefix("postgres"),
    );
    try {
      await assert.rejects(bus.request(TOOL_REQUEST_SUBJECT, body, REFUSED_WITHIN), /Permissions Violation/);
      await assert.rejects(
        ledger.request(TOOL_REQUEST_SUBJECT, body, REFUSED_WITHIN),
        /Permissions Violation/,
      );
      // Nor may a module ask a node's agent directly.
      await assert.rejects(bus.request(toolSubject("node-a"), body, REFUSED_WITHIN), /Permissions Violation/);
    } finally {
      await closeBus(bus);
      await closeBus(ledger);
    }
    assert.equal(seen.length, before, "no refused call reached node-a");
  });

  void it("does not let another node take a node's tool calls (the server refuses its subscription)", async () => {
    const b = await enrollNode(await controller.renewJoinToken("node-b"));
    try {
      const taken: unknown[] = [];
      const sub = b.nc.subscribe(toolSubject("node-a"));
      const listening = (async () => {
        for await (const msg of sub) taken.push(msg.json());
      })();
      await assert.rejects(listening, /Permissions Violation for Subscription to "mesh\.node\.node-a\.tool"/);
      const reply = await ask({ module: "app1", tool: "status", args: [], who: "alice" });
      assert.ok(reply.ok, "node-a's own agent answered");
      assert.deepEqual(taken, []);
    } finally {
      await closeBus(b.nc);
    }
  });
});
