// The dashboard's routes over real HTTP, without a browser: what /api/state builds from the
// controller's status and the providers' answers, that every action is one relayed tool call (and
// a refused one is none), the operator token, and the refusal of requests from other sites.
import assert from "node:assert/strict";
import { request } from "node:http";
import { rm } from "node:fs/promises";
import { after, before, beforeEach, describe, it } from "node:test";
import {
  controllerStatus,
  dashboardRoutes,
  loadFleetPlan,
  startControllerHttp,
  type ControllerHttpServer,
  type DashboardSources,
  type DashboardState,
  type FleetPlan,
  type NodeReport,
  type ToolCall,
  type ToolReply,
} from "@mesh/controller";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";

const NOW = Date.parse("2026-11-30T12:00:00.000Z");
const SET = "0123456789ab";
const PASSWORD = "s3cret-Pa55word";

type LedgerReadReply = Awaited<ReturnType<DashboardSources["ledger"]>>;

/** What the fake controller answers, and every tool call it was asked. */
class FakeController implements DashboardSources {
  readonly calls: ToolCall[] = [];
  ledgerReads = 0;
  constructor(readonly fleet: FleetPlan) {}

  current(): FleetPlan {
    return this.fleet;
  }

  status() {
    const report: NodeReport = {
      node: "node-a",
      generation: 3,
      receivedAt: new Date(NOW - 5_000).toISOString(),
      modules: [
        {
          name: "postgres",
          state: "running",
          restarts: 0,
          log: "/x",
          metrics: "http://127.0.0.1:41234/metrics",
        },
        { name: "app1", state: "crashing", restarts: 4, log: "/y" },
      ],
    };
    return controllerStatus({
      plan: this.fleet.plan,
      fleetFile: this.fleet.fleetFile,
      readAt: this.fleet.readAt,
      refused: null,
      fleetNodes: this.fleet.nodes,
      enrolled: new Set(["node-a", "node-b"]),
      reports: new Map([["node-a", report]]),
      failing: [
        {
          provider: "redis",
          interface: "redis-namespace",
          login: "app3_redis",
          instance: "redis",
          providerNode: "node-b",
          node: "node-b",
          class: "unreachable",
          since: "2026-11-30T11:50:00.000Z",
          attempts: 7,
          error: `redis://admin:${PASSWORD}@127.0.0.1:1/ refused the connection`,
          at: "2026-11-30T11:59:00.000Z",
        },
      ],
    });
  }

  tool(call: ToolCall): Promise<ToolReply> {
    this.calls.push(call);
    if (call.module === "redis")
      return Promise.resolve({
        ok: false,
        code: "agent-not-answering",
        error: "no agent answers for node node-b, where redis runs",
      });
    if (call.tool === "status") {
      return Promise.resolve({
        ok: true,
        answer: {
          interface: "postgres-database",
          instance: "postgres",
          receives: "/run/mesh/postgres-database.json",
          lastPassAt: "2026-11-30T11:59:58.000Z",
          contributionsProblem: null,
          consumers: [
            {
              login: "app1_postgres",
              state: "active",
              class: null,
              since: "2026-11-30T10:00:00.000Z",
              why: "held as asked",
            },
            {
              login: "app2_postgres",
              state: "failing",
              class: "credentials-rejected",
              since: "2026-11-30T11:00:00.000Z",
              why: `password authentication failed for postgresql://app2:${PASSWORD}@db/app2`,
              attempts: 3,
            },
            {
              login: "old_postgres",
              state: "awaiting-approval",
              class: null,
              since: "2026-11-30T10:00:00.000Z",
              why: "waits",
            },
            {
              login: "older_postgres",
              state: "retired",
              class: null,
              since: "2026-11-29T10:00:00.000Z",
              why: "no longer asked for",
            },
          ],
        },
      });
    }
    if (call.tool === "retire list")
      return Promise.resolve({
        ok: true,
        answer: {
          id: SET,
          logins: ["old_postgres"],
          held: 2,
          reason: "1 of 2 held is more than 50% of them",
        },
      });
    if (call.tool === "cleanup delete")
      return Promise.resolve({ ok: true, answer: { login: call.args[0], freedBytes: 8192 } });
    if (call.tool === "retire approve")
      return Promise.resolve({ ok: true, answer: { id: call.args[0], retired: ["old_postgres"] } });
    return Promise.resolve({ ok: false, code: "bad-request", error: "not in this fake" });
  }

  ledger(module: string, limit: number): Promise<LedgerReadReply> {
    this.ledgerReads++;
    const at = "2026-11-28T09:00:00.000Z";
    const action = (seq: number, act: string, login: string) => ({
      seq,
      subject: `mesh.ledger.${module}.action`,
      at,
      entry: {
        kind: "action",
        action: act,
        login,
        interface: "postgres-database",
        who: "alice",
        at,
        why: act,
      },
    });
    const entries =
      module === "postgres"
        ? [
            action(1, "created", "gone_postgres"),
            action(2, "deleted", "gone_postgres"),
            action(3, "deleted", "back_postgres"),
            action(4, "created", "back_postgres"),
          ]
        : [];
    return Promise.resolve({ ok: true, module, limit, entries });
  }
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One HTTP request with exactly these headers (a browser's, or a forged Host). */
function ask(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const post = (
  server: ControllerHttpServer,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
) =>
  ask(
    server.url,
    "POST",
    path,
    {
      "content-type": "application/json",
      origin: server.url,
      "sec-fetch-site": "same-origin",
      ...headers,
    },
    JSON.stringify(body),
  );

describe("the dashboard's routes", () => {
  let fleetDir: FleetDir;
  let fleet: FleetPlan;
  let fake: FakeController;
  let server: ControllerHttpServer;

  before(async () => {
    fleetDir = await makeFleetDir();
    fleet = await loadFleetPlan(fleetDir.fleetFile);
  });
  after(async () => {
    await server?.close();
    await rm(fleetDir.dir, { recursive: true, force: true });
  });
  beforeEach(async () => {
    await server?.close();
    fake = new FakeController(fleet);
    server = await startControllerHttp({
      routes: dashboardRoutes({ sources: fake, tokenRequired: false, now: () => NOW }),
    });
  });

  it("serves the page, its style and its script, which may load nothing from elsewhere", async () => {
    const page = await ask(server.url, "GET", "/");
    assert.equal(page.status, 200);
    assert.match(String(page.headers["content-type"]), /^text\/html/);
    assert.match(page.body, /<script src="\/dashboard.js" defer><\/script>/);
    assert.match(String(page.headers["content-security-policy"]), /default-src 'none'; script-src 'self'/);
    assert.match(String(page.headers["content-security-policy"]), /frame-ancestors 'none'/);
    const script = await ask(server.url, "GET", "/dashboard.js");
    assert.equal(script.status, 200);
    assert.doesNotMatch(
      script.body,
      /innerHTML|outerHTML|insertAdjacentHTML|document\.write/,
      "data is never put in as HTML",
    );
    assert.equal((await ask(server.url, "GET", "/dashboard.css")).status, 200);
  });

  it("builds the state from the controller's status and each provider's answer, asking each once in a while", async () => {
    const res = await ask(server.url, "GET", "/api/state");
    assert.equal(res.status, 200);
    assert.equal(res.headers["cache-control"], "no-store");
    const state = JSON.parse(res.body) as DashboardState;
    assert.deepEqual(
      state.nodes.map((n) => [n.name, n.enrolled, n.connected]),
      [
        ["node-a", true, true],
        ["node-b", true, false],
      ],
    );
    const modules = Object.fromEntries(state.modules.map((m) => [m.name, m.state]));
    assert.deepEqual(modules, {
      app1: "crashing",
      app2: "unknown",
      app3: "unknown",
      postgres: "running",
      redis: "unknown",
    });

    assert.equal(state.modules.find((m) => m.name === "postgres")?.metrics, "http://127.0.0.1:41234/metrics");
    assert.equal(state.modules.find((m) => m.name === "app1")?.metrics, null);

    const pg = state.providers.find((p) => p.module === "postgres");
    assert.ok(pg?.answered);
    assert.equal(
      pg.metrics,
      "http://127.0.0.1:41234/metrics",
      "where it serves its metrics, as its node said",
    );
    assert.deepEqual(pg.waiting, {
      id: SET,
      logins: ["old_postgres"],
      held: 2,
      reason: "1 of 2 held is more than 50% of them",
    });
    const pgStates = Object.fromEntries(pg.consumers.map((c) => [c.login, [c.state, c.consumer]]));
    assert.deepEqual(pgStates, {
      app1_postgres: ["active", "app1"],
      app2_postgres: ["failing", "app2"],
      old_postgres: ["awaiting-approval", null],
      older_postgres: ["retired", null],
      gone_postgres: ["deleted", null],
    });
    const failing = pg.consumers.find((c) => c.login === "app2_postgres");
    assert.equal(failing?.class, "credentials-rejected");
    assert.equal(failing?.since, "2026-11-30T11:00:00.000Z");
    assert.equal(failing?.attempts, 3);

    const redis = state.providers.find((p) => p.module === "redis");
    assert.equal(redis?.answered, false, "a provider that does not answer is shown as such");
    assert.equal(redis?.metrics, null, "its node has not said where it serves metrics");
    assert.match(redis?.problem ?? "", /no agent answers for node node-b/);
    const app3 = redis?.consumers.find((c) => c.login === "app3_redis");
    assert.deepEqual(
      [app3?.state, app3?.class, app3?.attempts],
      ["failing", "unreachable", 7],
      "from the standings",
    );
    assert.equal(redis?.consumers.find((c) => c.login === "app2_redis")?.state, "unknown");
    assert.equal(state.waiting, 1);
    assert.equal(state.failing, 2);
    assert.ok(!res.body.includes(PASSWORD), "no password reaches the page");

    const asked = fake.calls.length;
    assert.deepEqual(fake.calls.map((c) => `${c.module} ${c.tool} ${c.who}`).sort(), [
      "postgres retire list dashboard",
      "postgres status dashboard",
      "redis status dashboard",
    ]);
    await ask(server.url, "GET", "/api/state");
    assert.equal(fake.calls.length, asked, "a second look soon after asks no provider again");
  });

  it("approves the waiting set with one retire approve through the relay, and refuses a bad request with none", async () => {
    const res = await post(server, "/api/approve", { module: "postgres", id: SET });
    assert.equal(res.status, 200);
    assert.deepEqual(JSON.parse(res.body), { ok: true, answer: { id: SET, retired: ["old_postgres"] } });
    assert.deepEqual(fake.calls, [
      { module: "postgres", tool: "retire approve", args: [SET], who: "dashboard" },
    ]);

    for (const body of [
      { module: "postgres", id: "not-a-set" },
      { module: "nonesuch", id: SET },
      { module: "app1", id: SET },
    ]) {
      const refused = await post(server, "/api/approve", body);
      assert.equal(refused.status, 400, JSON.stringify(body));
      assert.equal((JSON.parse(refused.body) as { ok: boolean }).ok, false);
    }
    assert.equal((await post(server, "/api/approve", "[1,2]")).status, 400);
    assert.equal(fake.calls.length, 1, "nothing else was relayed");
  });

  it("refuses a delete whose typed login is not the login, and relays one cleanup delete when it is", async () => {
    const wrong = await post(server, "/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "old_postgres",
    });
    assert.equal(wrong.status, 400);
    const said = JSON.parse(wrong.body) as { ok: boolean; code: string; error: string };
    assert.equal(said.code, "login-mismatch");
    assert.match(said.error, /nothing was deleted/);
    const missing = await post(server, "/api/delete", { module: "postgres", login: "older_postgres" });
    assert.equal(missing.status, 400);
    assert.equal(fake.calls.length, 0, "no tool was asked");

    const right = await post(server, "/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "older_postgres",
    });
    assert.equal(right.status, 200);
    assert.deepEqual(fake.calls, [
      { module: "postgres", tool: "cleanup delete", args: ["older_postgres"], who: "dashboard" },
    ]);
  });

  it("answers a provider's refusal as a conflict and nobody answering as unavailable", async () => {
    fake.tool = (call) => {
      fake.calls.push(call);
      return Promise.resolve({ ok: false, code: "not-retired", error: "older_postgres is not retired" });
    };
    const conflict = await post(server, "/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "older_postgres",
    });
    assert.equal(conflict.status, 409);
    const refusedApproval = await post(server, "/api/approve", { module: "redis", id: SET });
    assert.equal(refusedApproval.status, 409);
    fake.tool = () => Promise.resolve({ ok: false, code: "agent-timeout", error: "too slow" });
    assert.equal((await post(server, "/api/approve", { module: "redis", id: SET })).status, 503);
  });

  it("reads a module's ledger, and refuses a bad module or limit", async () => {
    const res = await ask(server.url, "GET", "/api/ledger?module=postgres&limit=10");
    assert.equal(res.status, 200);
    const read = JSON.parse(res.body) as { entries: unknown[]; readOnlyTools: string[] };
    assert.equal(read.entries.length, 4);
    // The page hides these calls unless asked: the read-only tools, not the ones that change.
    assert.deepEqual(read.readOnlyTools, ["status", "retire list", "cleanup list"]);
    assert.equal((await ask(server.url, "GET", "/api/ledger?module=Bad.Name")).status, 400);
    assert.equal((await ask(server.url, "GET", "/api/ledger?module=postgres&limit=0")).status, 400);
    assert.equal((await ask(server.url, "GET", "/api/ledger?module=postgres&limit=ten")).status, 400);
  });

  it("refuses cross-site actions: another Origin, a cross-site fetch, a form's body, a GET", async () => {
    const body = { module: "postgres", login: "older_postgres", typed: "older_postgres" };
    const evil = await post(server, "/api/delete", body, { origin: "http://evil.example" });
    assert.equal(evil.status, 403);
    assert.equal((JSON.parse(evil.body) as { code: string }).code, "cross-site");
    const crossSite = await post(server, "/api/delete", body, { "sec-fetch-site": "cross-site" });
    assert.equal(crossSite.status, 403);
    const form = await ask(
      server.url,
      "POST",
      "/api/delete",
      { "content-type": "application/x-www-form-urlencoded", origin: server.url },
      "module=postgres&login=older_postgres&typed=older_postgres",
    );
    assert.equal(form.status, 415);
    assert.equal((await ask(server.url, "GET", "/api/delete")).status, 405, "actions are POSTs only");
    assert.equal(fake.calls.length, 0, "nothing was relayed");
  });

  it("without a token, answers only a loopback Host, so a DNS-rebound name reads and does nothing", async () => {
    const rebound = { host: `evil.example:${server.port}` };
    const read = await ask(server.url, "GET", "/api/state", rebound);
    assert.equal(read.status, 421);
    assert.equal(fake.calls.length, 0);
    const act = await post(
      server,
      "/api/approve",
      { module: "postgres", id: SET },
      { ...rebound, origin: `http://evil.example:${server.port}` },
    );
    assert.equal(act.status, 421);
    assert.equal(fake.calls.length, 0, "nothing was relayed");
    assert.equal(
      (await ask(server.url, "GET", "/api/state", { host: `localhost:${server.port}` })).status,
      200,
    );
  });

  it("does not wait on a provider slow to answer: it says so, and asks it nothing more until it answers", async () => {
    let answer: ((reply: ToolReply) => void) | undefined;
    const slow = new FakeController(fleet);
    slow.tool = (call) => {
      slow.calls.push(call);
      if (call.module !== "postgres")
        return Promise.resolve({ ok: false, code: "agent-timeout", error: "slow" });
      return new Promise((resolve) => (answer = resolve));
    };
    const routes = dashboardRoutes({ sources: slow, tokenRequired: false, cacheMs: 0, waitMs: 50 });
    const impatient = await startControllerHttp({ routes });
    try {
      const first = JSON.parse((await ask(impatient.url, "GET", "/api/state")).body) as DashboardState;
      const pg = first.providers.find((p) => p.module === "postgres");
      assert.equal(pg?.answered, false);
      assert.match(pg?.problem ?? "", /has not answered yet/);
      assert.deepEqual(
        pg?.consumers.map((c) => [c.login, c.state]),
        [
          ["app1_postgres", "unknown"],
          ["app2_postgres", "unknown"],
        ],
        "its consumers as the fleet names them",
      );
      await ask(impatient.url, "GET", "/api/state");
      assert.equal(slow.calls.filter((c) => c.module === "postgres").length, 1, "one call in flight at most");
      answer?.({ ok: false, code: "not-made-here", error: "an answer at last" });
      const later = JSON.parse((await ask(impatient.url, "GET", "/api/state")).body) as DashboardState;
      const said = later.providers.find((p) => p.module === "postgres");
      assert.equal(said?.problem, "an answer at last", "its last answer, while the next is awaited");
      assert.equal(
        slow.calls.filter((c) => c.module === "postgres").length,
        2,
        "asked again once it answered",
      );
    } finally {
      await impatient.close();
    }
  });

  it("serves the page only as a loopback name without a token", async () => {
    const rebound = await ask(server.url, "GET", "/", { host: `evil.example:${server.port}` });
    assert.equal(rebound.status, 421);
    assert.doesNotMatch(rebound.body, /<script/);
  });

  it("with an operator token, the API asks for it and the page does not", async () => {
    const token = "an-operator-token-for-tests";
    const guarded = await startControllerHttp({
      routes: dashboardRoutes({ sources: fake, tokenRequired: true, now: () => NOW }),
      operatorToken: token,
    });
    try {
      assert.equal((await ask(guarded.url, "GET", "/")).status, 200, "the page holds no data");
      assert.equal((await ask(guarded.url, "GET", "/dashboard.js")).status, 200);
      assert.equal((await ask(guarded.url, "GET", "/api/state")).status, 401);
      assert.equal(
        (await ask(guarded.url, "GET", "/api/state", { authorization: "Bearer wrong" })).status,
        401,
      );
      const headers = {
        "content-type": "application/json",
        origin: guarded.url,
        authorization: "Bearer wrong",
      };
      const refused = await ask(
        guarded.url,
        "POST",
        "/api/approve",
        headers,
        JSON.stringify({ module: "postgres", id: SET }),
      );
      assert.equal(refused.status, 401);
      assert.equal(fake.calls.length, 0);
      const read = await ask(guarded.url, "GET", "/api/state", {
        authorization: `Bearer ${token}`,
        host: "mesh.example:9470",
      });
      assert.equal(read.status, 200, "with the token, any name this machine is reached by will do");
      const approved = await ask(
        guarded.url,
        "POST",
        "/api/approve",
        { ...headers, authorization: `Bearer ${token}` },
        JSON.stringify({ module: "postgres", id: SET }),
      );
      assert.equal(approved.status, 200);
    } finally {
      await guarded.close();
    }
  });
});
