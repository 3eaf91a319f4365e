// The dashboard's routes over real HTTP, without a browser: what /api/state builds from the
// controller's status and the providers' answers, that every action is one relayed tool call asked
// as the session's operator (and a refused one is none), the login (a one-time code for a session
// cookie and a CSRF token), and the refusal of requests without them or from other sites.
import assert from "node:assert/strict";
import { request } from "node:http";
import { rm } from "node:fs/promises";
import { after, before, beforeEach, describe, it } from "node:test";
import { FakeClock } from "@mesh/sdk";
import {
  dashboardRoutes,
  HttpAuth,
  LOGIN_CODE_TTL_MS,
  loadFleetPlan,
  startControllerHttp,
  type ControllerHttpServer,
  type DashboardSources,
  type FleetPlan,
  type NodeReport,
  type ToolCall,
} from "@mesh/controller";
import { controllerStatus } from "../src/controller-status.ts";
import { CSRF_HEADER } from "../src/http-auth.ts";
import { type DashboardState } from "../src/dashboard/dashboard-state.ts";
import { type ToolReply } from "../src/tool-relay.ts";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { recordingLogger } from "./test-mesh.ts";

const NOW = Date.parse("2026-11-30T12:00:00.000Z");
const SET = "0123456789ab";
const PASSWORD = "s3cret-Pa55word";
const TOKEN = "an-operator-token-for-the-dashboard-tests";
const SCRAPE = "a-scrape-token-for-the-dashboard-tests";

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

/** A browser's session: its cookie (as the browser sends it back) and the CSRF token the page keeps. */
interface Session {
  readonly cookie: string;
  readonly csrf: string;
  readonly who: string;
  readonly setCookie: string;
}

/** The headers a logged-in page sends. */
const sent = (session: Session | undefined): Record<string, string> =>
  session === undefined ? {} : { cookie: session.cookie, [CSRF_HEADER]: session.csrf };

/** A POST as the page makes it (same origin, JSON), with `session`'s headers unless `headers` say otherwise. */
const post = (
  server: ControllerHttpServer,
  path: string,
  body: unknown,
  headers: Record<string, string> = {},
  session?: Session,
) =>
  ask(
    server.url,
    "POST",
    path,
    {
      "content-type": "application/json",
      origin: server.url,
      "sec-fetch-site": "same-origin",
      ...sent(session),
      ...headers,
    },
    JSON.stringify(body),
  );

/** Logs in as `mesh dashboard` and the page do: a code asked with the operator token, traded for a session. */
async function logIn(server: ControllerHttpServer, name = "tester"): Promise<Session> {
  const asked = await ask(
    server.url,
    "POST",
    "/api/login-code",
    { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    JSON.stringify({ name }),
  );
  assert.equal(asked.status, 200, asked.body);
  const { code, path } = JSON.parse(asked.body) as { code: string; path: string };
  assert.equal(path, `/?code=${code}`);
  const login = await post(server, "/api/login", { code });
  assert.equal(login.status, 200, login.body);
  const setCookie = String(login.headers["set-cookie"] ?? "");
  const answer = JSON.parse(login.body) as { csrf: string; who: string };
  return { cookie: setCookie.split(";")[0] ?? "", csrf: answer.csrf, who: answer.who, setCookie };
}

describe("the dashboard's routes", () => {
  let fleetDir: FleetDir;
  let fleet: FleetPlan;
  let fake: FakeController;
  let server: ControllerHttpServer;
  let session: Session;
  let log: ReturnType<typeof recordingLogger>;
  /** A request as the logged-in page makes it. */
  const asOperator = (path: string, headers: Record<string, string> = {}) =>
    ask(server.url, "GET", path, { ...sent(session), ...headers });
  const act = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    post(server, path, body, headers, session);

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
    log = recordingLogger();
    const auth = new HttpAuth({ operatorToken: TOKEN, scrapeToken: SCRAPE, logger: log });
    server = await startControllerHttp({
      routes: dashboardRoutes({ sources: fake, auth, now: () => NOW }),
      auth,
    });
    session = await logIn(server);
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
    const res = await asOperator("/api/state");
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
    await asOperator("/api/state");
    assert.equal(fake.calls.length, asked, "a second look soon after asks no provider again");
  });

  it("approves the waiting set with one retire approve through the relay, as the session's operator, and refuses a bad request with none", async () => {
    const res = await act("/api/approve", { module: "postgres", id: SET });
    assert.equal(res.status, 200);
    assert.deepEqual(JSON.parse(res.body), { ok: true, answer: { id: SET, retired: ["old_postgres"] } });
    assert.match(session.who, /^tester \(dashboard session [0-9a-f]{4}\)$/);
    assert.deepEqual(fake.calls, [
      { module: "postgres", tool: "retire approve", args: [SET], who: session.who },
    ]);

    for (const body of [
      { module: "postgres", id: "not-a-set" },
      { module: "nonesuch", id: SET },
      { module: "app1", id: SET },
    ]) {
      const refused = await act("/api/approve", body);
      assert.equal(refused.status, 400, JSON.stringify(body));
      assert.equal((JSON.parse(refused.body) as { ok: boolean }).ok, false);
    }
    assert.equal((await act("/api/approve", "[1,2]")).status, 400);
    assert.equal(fake.calls.length, 1, "nothing else was relayed");
  });

  it("refuses a delete whose typed login is not the login, and relays one cleanup delete when it is", async () => {
    const wrong = await act("/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "old_postgres",
    });
    assert.equal(wrong.status, 400);
    const said = JSON.parse(wrong.body) as { ok: boolean; code: string; error: string };
    assert.equal(said.code, "login-mismatch");
    assert.match(said.error, /nothing was deleted/);
    const missing = await act("/api/delete", { module: "postgres", login: "older_postgres" });
    assert.equal(missing.status, 400);
    assert.equal(fake.calls.length, 0, "no tool was asked");

    const right = await act("/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "older_postgres",
    });
    assert.equal(right.status, 200);
    assert.deepEqual(fake.calls, [
      { module: "postgres", tool: "cleanup delete", args: ["older_postgres"], who: session.who },
    ]);
  });

  it("answers a provider's refusal as a conflict and nobody answering as unavailable", async () => {
    fake.tool = (call) => {
      fake.calls.push(call);
      return Promise.resolve({ ok: false, code: "not-retired", error: "older_postgres is not retired" });
    };
    const conflict = await act("/api/delete", {
      module: "postgres",
      login: "older_postgres",
      typed: "older_postgres",
    });
    assert.equal(conflict.status, 409);
    const refusedApproval = await act("/api/approve", { module: "redis", id: SET });
    assert.equal(refusedApproval.status, 409);
    fake.tool = () => Promise.resolve({ ok: false, code: "agent-timeout", error: "too slow" });
    assert.equal((await act("/api/approve", { module: "redis", id: SET })).status, 503);
  });

  it("reads a module's ledger, and refuses a bad module or limit", async () => {
    const res = await asOperator("/api/ledger?module=postgres&limit=10");
    assert.equal(res.status, 200);
    const read = JSON.parse(res.body) as { entries: unknown[]; readOnlyTools: string[] };
    assert.equal(read.entries.length, 4);
    // The page hides these calls unless asked: the read-only tools, not the ones that change.
    assert.deepEqual(read.readOnlyTools, ["status", "retire list", "cleanup list"]);
    assert.equal((await asOperator("/api/ledger?module=Bad.Name")).status, 400);
    assert.equal((await asOperator("/api/ledger?module=postgres&limit=0")).status, 400);
    assert.equal((await asOperator("/api/ledger?module=postgres&limit=ten")).status, 400);
  });

  it("refuses cross-site actions: another Origin, a cross-site fetch, a form's body, a GET", async () => {
    const body = { module: "postgres", login: "older_postgres", typed: "older_postgres" };
    const evil = await act("/api/delete", body, { origin: "http://evil.example" });
    assert.equal(evil.status, 403);
    assert.equal((JSON.parse(evil.body) as { code: string }).code, "cross-site");
    const crossSite = await act("/api/delete", body, { "sec-fetch-site": "cross-site" });
    assert.equal(crossSite.status, 403);
    const form = await ask(
      server.url,
      "POST",
      "/api/delete",
      { "content-type": "application/x-www-form-urlencoded", origin: server.url, ...sent(session) },
      "module=postgres&login=older_postgres&typed=older_postgres",
    );
    assert.equal(form.status, 415);
    assert.equal((await asOperator("/api/delete")).status, 405, "actions are POSTs only");
    assert.equal(fake.calls.length, 0, "nothing was relayed");
  });

  it("answers a DNS-rebound name nothing: a page elsewhere holds no session of this one", async () => {
    const rebound = { host: `evil.example:${server.port}` };
    const read = await ask(server.url, "GET", "/api/state", rebound);
    assert.equal(read.status, 401);
    const acted = await post(
      server,
      "/api/approve",
      { module: "postgres", id: SET },
      { ...rebound, origin: `http://evil.example:${server.port}` },
    );
    assert.equal(acted.status, 401);
    assert.equal(fake.calls.length, 0, "nothing was relayed");
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
    const auth = new HttpAuth({ operatorToken: TOKEN });
    const routes = dashboardRoutes({ sources: slow, auth, cacheMs: 0, waitMs: 50 });
    const impatient = await startControllerHttp({ routes, auth });
    const asked = { authorization: `Bearer ${TOKEN}` };
    try {
      const first = JSON.parse((await ask(impatient.url, "GET", "/api/state", asked)).body) as DashboardState;
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
      await ask(impatient.url, "GET", "/api/state", asked);
      assert.equal(slow.calls.filter((c) => c.module === "postgres").length, 1, "one call in flight at most");
      answer?.({ ok: false, code: "not-made-here", error: "an answer at last" });
      const later = JSON.parse((await ask(impatient.url, "GET", "/api/state", asked)).body) as DashboardState;
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

  it("serves the page to any name and anyone: it holds no data", async () => {
    const page = await ask(server.url, "GET", "/", { host: `mesh.example:${server.port}` });
    assert.equal(page.status, 200);
    assert.match(page.body, /<script src="\/dashboard.js"/);
    assert.doesNotMatch(page.body, /postgres|app1|node-a/, "no name of the fleet is in it");
    assert.equal(fake.calls.length, 0);
  });

  it("answers 401 on every API route without a credential, and relays nothing", async () => {
    const reads = ["/api/state", "/api/ledger?module=postgres&limit=10", "/api/session"];
    for (const path of reads) {
      const res = await ask(server.url, "GET", path);
      assert.equal(res.status, 401, path);
      assert.equal((JSON.parse(res.body) as { code: string }).code, "unauthorized", path);
    }
    const actions: [string, unknown][] = [
      ["/api/approve", { module: "postgres", id: SET }],
      ["/api/delete", { module: "postgres", login: "older_postgres", typed: "older_postgres" }],
      ["/api/login-code", { name: "mallory" }],
      ["/api/logout", {}],
    ];
    for (const [path, body] of actions) assert.equal((await post(server, path, body)).status, 401, path);
    assert.equal(fake.calls.length, 0, "no tool was asked");
    assert.equal(fake.ledgerReads, 0, "no ledger was read");
    const scrape = { authorization: `Bearer ${SCRAPE}` };
    assert.equal(
      (await ask(server.url, "GET", "/api/state", scrape)).status,
      403,
      "the scrape token opens no API",
    );
    assert.equal((await post(server, "/api/approve", { module: "postgres", id: SET }, scrape)).status, 403);
    assert.equal(fake.calls.length, 0);
    assert.ok(
      log.lines.some((l) => l.includes("refused")),
      "the refusals are said on the log",
    );
  });

  it("logs in once with a code: the session cookie is HttpOnly and SameSite=Strict, and the code is used up", async () => {
    assert.match(session.setCookie, /^mesh-session-[0-9a-f]{8}=[A-Za-z0-9_-]{43}; /);
    const attributes = session.setCookie.split(";").map((a) => a.trim());
    assert.ok(attributes.includes("HttpOnly"), session.setCookie);
    assert.ok(attributes.includes("SameSite=Strict"), session.setCookie);
    assert.ok(attributes.includes("Path=/"), session.setCookie);
    const asked = await ask(
      server.url,
      "POST",
      "/api/login-code",
      { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      "{}",
    );
    const { code } = JSON.parse(asked.body) as { code: string };
    const first = await post(server, "/api/login", { code });
    assert.equal(first.status, 200);
    const again = await post(server, "/api/login", { code });
    assert.equal(again.status, 401, "a code works once");
    assert.equal(again.headers["set-cookie"], undefined);
    assert.match((JSON.parse(again.body) as { error: string }).error, /mesh dashboard/);
    assert.equal((await post(server, "/api/login", { code: "made-up" })).status, 401);
    const who = JSON.parse((await asOperator("/api/session")).body) as { who: string; expiresAt: string };
    assert.equal(who.who, session.who);
    assert.ok(Date.parse(who.expiresAt) > Date.now());
    assert.match(
      (JSON.parse(first.body) as { who: string }).who,
      /^operator \(dashboard session [0-9a-f]{4}\)$/,
      "a code asked without a name is the operator's",
    );
  });

  it("refuses a session's request without its CSRF token, a POST and a GET alike, and relays nothing", async () => {
    const body = { module: "postgres", login: "older_postgres", typed: "older_postgres" };
    const bare = await post(server, "/api/delete", body, { cookie: session.cookie });
    assert.equal(bare.status, 403);
    assert.equal((JSON.parse(bare.body) as { code: string }).code, "csrf");
    const forged = await post(
      server,
      "/api/approve",
      { module: "postgres", id: SET },
      {
        cookie: session.cookie,
        [CSRF_HEADER]: `${session.csrf.slice(0, -1)}x`,
      },
    );
    assert.equal(forged.status, 403);
    // A page of a module on another port of 127.0.0.1 is sent the cookie, never the header.
    assert.equal((await ask(server.url, "GET", "/api/state", { cookie: session.cookie })).status, 403);
    assert.equal(fake.calls.length, 0, "nothing was relayed");
    assert.equal((await act("/api/delete", body)).status, 200, "with it, the same request is done");
  });

  it("asks a login code of the operator token alone: not of a session, nor of the scrape token", async () => {
    const bySession = await act("/api/login-code", {});
    assert.equal(bySession.status, 403);
    const byScraper = await post(server, "/api/login-code", {}, { authorization: `Bearer ${SCRAPE}` });
    assert.equal(byScraper.status, 403);
  });

  it("ends a session when it logs out", async () => {
    const out = await act("/api/logout", {});
    assert.equal(out.status, 200);
    assert.match(String(out.headers["set-cookie"]), /Max-Age=0/);
    assert.equal((await asOperator("/api/state")).status, 401);
  });

  it("answers a script with the operator token, from any name the machine is reached by", async () => {
    const bearer = { authorization: `Bearer ${TOKEN}`, host: "mesh.example:9470" };
    assert.equal((await ask(server.url, "GET", "/api/state", bearer)).status, 200);
    // A script sends no Origin: only its JSON body, as curl does.
    const approved = await ask(
      server.url,
      "POST",
      "/api/approve",
      { ...bearer, "content-type": "application/json" },
      JSON.stringify({ module: "postgres", id: SET }),
    );
    assert.equal(approved.status, 200);
    assert.deepEqual(
      fake.calls.filter((c) => c.tool === "retire approve").map((c) => c.who),
      ["operator (HTTP API, operator token)"],
    );
  });
});

describe("the dashboard's login codes, in time", () => {
  it("a code not used within two minutes starts no session", async () => {
    const fleetDir = await makeFleetDir();
    const clock = new FakeClock(NOW);
    const auth = new HttpAuth({ operatorToken: TOKEN, clock });
    const sources = new FakeController(await loadFleetPlan(fleetDir.fleetFile));
    const server = await startControllerHttp({ routes: dashboardRoutes({ sources, auth }), auth });
    try {
      const code = (await logInCode(server)).code;
      const late = (await logInCode(server)).code;
      clock.advance(LOGIN_CODE_TTL_MS - 1_000);
      assert.equal((await post(server, "/api/login", { code })).status, 200, "within two minutes");
      clock.advance(1_000);
      assert.equal((await post(server, "/api/login", { code: late })).status, 401, "at two minutes");
    } finally {
      await server.close();
      await rm(fleetDir.dir, { recursive: true, force: true });
    }
  });
});

async function logInCode(server: ControllerHttpServer): Promise<{ code: string; expiresAt: string }> {
  const asked = await ask(
    server.url,
    "POST",
    "/api/login-code",
    { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    "{}",
  );
  assert.equal(asked.status, 200);
  return JSON.parse(asked.body) as { code: string; expiresAt: string };
}
