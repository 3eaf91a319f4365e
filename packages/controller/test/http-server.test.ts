// The controller's HTTP server over real HTTP: its route table, the credential every request but an
// open route's carries (loopback included, also from another Unix user), the refusals said at a
// bounded rate, and the controller's metrics read as Prometheus reads them with the scrape token,
// first from a made-up status under a fixed clock, then from a real controller on a real nats-server.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rm } from "node:fs/promises";
import type { ServerResponse } from "node:http";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import {
  ControllerMetrics,
  HttpAuth,
  metricsRoute,
  startControllerHttp,
  startController,
  type ControllerHttpServer,
} from "@mesh/controller";
import { type ControllerStatus } from "../src/controller-status.ts";
import { type HttpRoute } from "../src/http-server.ts";
import { ListenAddressError, ListenError } from "@mesh/sdk/provider";
import { scrapeProm, until } from "@mesh/testkit";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { enrollNode, recordingLogger, startTestMesh, type TestMesh } from "./test-mesh.ts";

const TOKEN = "an-operator-token-for-the-http-tests";
const SCRAPE = "a-scrape-token-for-the-http-tests";
const AS_OPERATOR = { authorization: `Bearer ${TOKEN}` };

const ok = (text: string) => ({
  method: "GET" as const,
  handle: (_req: unknown, res: ServerResponse) => {
    res.writeHead(200, { "content-type": "text/plain" }).end(text);
  },
});

/** An HTTP server for the tests: `TOKEN` is the operator's, `SCRAPE` the scrape token. */
const authFor = (logger = recordingLogger()) =>
  new HttpAuth({ operatorToken: TOKEN, scrapeToken: SCRAPE, logger });

describe("the controller's HTTP server", () => {
  let server: ControllerHttpServer;
  const log = recordingLogger();
  const get = (path: string, init: RequestInit = {}) =>
    fetch(`${server.url}${path}`, { ...init, headers: { ...AS_OPERATOR, ...init.headers } });
  before(async () => {
    server = await startControllerHttp({
      auth: authFor(log),
      routes: [
        { path: "/hello", ...ok("hello") },
        { path: "/ledger/*", ...ok("a ledger") },
        {
          method: "GET",
          path: "/broken",
          handle: () => {
            throw new Error("the handler broke");
          },
        },
      ],
      logger: log,
    });
  });
  after(() => server.close());

  it("binds loopback on a free port by default", () => {
    assert.equal(server.host, "127.0.0.1");
    assert.ok(server.port > 0);
    assert.equal(server.url, `http://127.0.0.1:${server.port}`);
  });

  it("answers a route, a prefix route, and 404 for any other path", async () => {
    assert.equal(await (await get("/hello")).text(), "hello");
    assert.equal(await (await get("/ledger/postgres")).text(), "a ledger");
    for (const path of ["/", "/hello/", "/helloo", "/ledger", "/metrics"]) {
      assert.equal((await get(path)).status, 404, path);
    }
  });

  it("answers only GET and HEAD on a GET route: 405 with Allow for the rest", async () => {
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      const res = await get("/hello", { method });
      assert.equal(res.status, 405, method);
      assert.equal(res.headers.get("allow"), "GET, HEAD");
    }
    const head = await get("/hello", { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), "");
  });

  it("takes routes added later, the latest for a path winning", async () => {
    server.route({ path: "/later", ...ok("added later") });
    server.route({ path: "/hello", ...ok("hello again") });
    assert.equal(await (await get("/later")).text(), "added later");
    assert.equal(await (await get("/hello")).text(), "hello again");
  });

  it("answers 500 when a handler throws, and says it on the log", async () => {
    const res = await get("/broken");
    assert.equal(res.status, 500);
    assert.doesNotMatch(await res.text(), /the handler broke/, "the error stays in the log");
    assert.ok(log.lines.some((l) => l.includes("GET /broken") && l.includes("the handler broke")));
  });

  it("refuses an address that is not HOST:PORT, and a taken port, naming it", async () => {
    await assert.rejects(startControllerHttp({ listen: "nowhere:80", auth: authFor() }), ListenAddressError);
    await assert.rejects(
      startControllerHttp({ listen: `127.0.0.1:${server.port}`, auth: authFor() }),
      (err: unknown) => err instanceof ListenError && err.message.includes(`127.0.0.1:${server.port}`),
    );
  });
});

describe("the controller's HTTP server without a credential", () => {
  let server: ControllerHttpServer;
  const log = recordingLogger();
  let acted = 0;
  const act: HttpRoute = {
    method: "POST",
    path: "/api/act",
    handle: (_req, res) => {
      acted++;
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    },
  };
  before(async () => {
    const metrics = new ControllerMetrics({ processMetrics: false });
    server = await startControllerHttp({
      auth: authFor(log),
      routes: [
        act,
        { path: "/api/read", ...ok("every login of the mesh") },
        { path: "/page", access: "open", ...ok("the page") },
        metricsRoute(metrics.registry),
      ],
      logger: log,
    });
  });
  after(() => server.close());

  it("answers 401 on loopback, does nothing, and does not say whether a path exists", async () => {
    const post = (headers: Record<string, string> = {}) =>
      fetch(`${server.url}/api/act`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
      });
    const none = await post();
    assert.equal(none.status, 401);
    assert.match(none.headers.get("www-authenticate") ?? "", /^Bearer/);
    assert.equal(((await none.json()) as { code: string }).code, "unauthorized");
    assert.equal((await post({ authorization: "Bearer wrong" })).status, 401);
    assert.equal((await post({ authorization: `Bearer ${TOKEN}x` })).status, 401);
    assert.equal((await fetch(`${server.url}/api/read`)).status, 401);
    assert.equal((await fetch(`${server.url}/metrics`)).status, 401);
    assert.equal((await fetch(`${server.url}/api/nothing`)).status, 401, "not even whether a path exists");
    assert.equal((await fetch(`${server.url}/nothing`)).status, 401);
    assert.equal(acted, 0, "nothing was done");
    assert.equal(await (await fetch(`${server.url}/page`)).text(), "the page", "an open route holds no data");
    assert.equal((await post(AS_OPERATOR)).status, 200);
    assert.equal(acted, 1);
  });

  it("the scrape token opens /metrics and nothing else; the operator token opens both", async () => {
    const scrape = { authorization: `Bearer ${SCRAPE}` };
    const metrics = await scrapeProm(`${server.url}/metrics`, { token: SCRAPE });
    assert.equal(metrics.value("mesh_controller_consumers"), 0);
    assert.ok(await scrapeProm(`${server.url}/metrics`, { token: TOKEN }), "the operator may scrape too");
    const read = await fetch(`${server.url}/api/read`, { headers: scrape });
    assert.equal(read.status, 403);
    assert.match(await read.text(), /\/metrics alone/);
    const acting = await fetch(`${server.url}/api/act`, {
      method: "POST",
      headers: { ...scrape, "content-type": "application/json" },
    });
    assert.equal(acting.status, 403);
    assert.equal(acted, 1, "the scrape token did nothing");
  });

  it("refuses a request from another Unix user of the machine, and names that user on the log", async () => {
    // What a module's own user tried: curl to the port found in /proc/net/tcp.
    const run = promisify(execFile);
    const asNobody = (args: string[]) =>
      run("runuser", ["-u", "nobody", "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", ...args]);
    const own = recordingLogger();
    const fresh = await startControllerHttp({ auth: authFor(own), routes: [act] });
    try {
      const deleted = await asNobody([
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        '{"module":"postgres","login":"notes_postgres","typed":"notes_postgres"}',
        `${fresh.url}/api/act`,
      ]);
      assert.equal(deleted.stdout, "401");
      assert.equal((await asNobody([`${server.url}/api/read`])).stdout, "401");
      assert.equal((await asNobody([`${server.url}/metrics`])).stdout, "401");
      assert.equal(acted, 1, "nothing was done");
      const said = await until("the refusal to be said", () =>
        Promise.resolve(own.lines.find((l) => l.includes("refused"))),
      );
      assert.match(said, /refused POST \/api\/act from 127\.0\.0\.1 \(uid 65534, nobody\): no credential/);
    } finally {
      await fresh.close();
    }
  });

  it("says refusals on the log at most once a minute, naming the Unix user on loopback", async () => {
    const before = log.lines.filter((l) => l.includes("refused")).length;
    assert.ok(before >= 1, "the refusals above were said");
    assert.match(
      log.lines.find((l) => l.includes("refused")) ?? "",
      /^warn: the controller's HTTP server refused POST \/api\/act from 127\.0\.0\.1 \(uid 0, root\): /,
    );
    for (let i = 0; i < 50; i++) assert.equal((await fetch(`${server.url}/api/read`)).status, 401);
    assert.equal(log.lines.filter((l) => l.includes("refused")).length, before, "fifty more: no line yet");
    assert.ok(!log.lines.join("\n").includes(TOKEN) && !log.lines.join("\n").includes(SCRAPE));
    await server.close();
    const said = log.lines.filter((l) => l.includes("refused"));
    assert.equal(said.length, before + 1, "one line counts them, said when the server stops");
    assert.match(
      said.at(-1) ?? "",
      /refused \d+ more request\(s\) in the last \d+ s \(the last: GET \/api\/read/,
    );
    const nobody = said.find((l) => l.includes("nobody"));
    assert.ok(nobody === undefined || /uid 65534, nobody/.test(nobody), "another user is named by its uid");
  });

  it("may listen where other machines reach it, and asks them for the credential too", async () => {
    const open = await startControllerHttp({ listen: "0.0.0.0:0", auth: authFor() });
    try {
      assert.equal(open.host, "0.0.0.0");
      assert.equal((await fetch(`http://127.0.0.1:${open.port}/`)).status, 401);
      assert.equal((await fetch(`http://127.0.0.1:${open.port}/`, { headers: AS_OPERATOR })).status, 404);
    } finally {
      await open.close();
    }
  });
});

/** A status as the controller builds it, with only what the metrics read. */
function statusOf(partial: Partial<ControllerStatus>): ControllerStatus {
  return {
    nodes: [],
    consumers: [],
    failing: [],
    providers: [],
    fleet: { file: "/f/mesh.yaml", readAt: new Date(0).toISOString(), refused: null },
    ...partial,
  };
}

describe("the controller's metrics", () => {
  it("count nodes, modules, consumers and failing consumers from the status, at each scrape", async () => {
    const now = Date.parse("2030-01-01T00:00:00Z");
    const ago = (s: number) => new Date(now - s * 1000).toISOString();
    const metrics = new ControllerMetrics({ processMetrics: false, now: () => now, silentAfterMs: 30_000 });
    const module = (name: string, state: "running" | "crashing" | "starting" | "stopped") => ({
      name,
      state,
      restarts: 0,
      log: "/l",
    });
    let status = statusOf({
      nodes: [
        {
          name: "a",
          enrolled: true,
          lastReportAt: ago(5),
          generation: 1,
          modules: [module("postgres", "running"), module("app1", "crashing")],
        },
        {
          name: "b",
          enrolled: true,
          lastReportAt: ago(31),
          generation: 1,
          modules: [module("redis", "running")],
        },
        { name: "c", enrolled: false, lastReportAt: null, generation: null, modules: [] },
      ],
      consumers: [
        {
          consumer: "app1",
          interface: "postgres-database",
          login: "app1_postgres",
          provider: "postgres",
          node: "a",
        },
        {
          consumer: "app2",
          interface: "postgres-database",
          login: "app2_postgres",
          provider: "postgres",
          node: "b",
        },
      ],
      failing: [
        {
          provider: "postgres",
          interface: "postgres-database",
          consumer: "app2",
          login: "app2_postgres",
          node: "b",
          class: "unreachable",
          since: ago(60),
          attempts: 3,
          error: "connect ECONNREFUSED",
          at: ago(1),
        },
      ],
    });
    metrics.follow(() => status);
    const http = await startControllerHttp({ routes: [metricsRoute(metrics.registry)], auth: authFor() });
    try {
      let s = await scrapeProm(`${http.url}/metrics`, { token: SCRAPE });
      assert.equal(s.types.get("mesh_controller_nodes"), "gauge");
      assert.equal(s.value("mesh_controller_nodes", { state: "enrolled" }), 2);
      assert.equal(s.value("mesh_controller_nodes", { state: "not-enrolled" }), 1);
      assert.equal(s.value("mesh_controller_nodes", { state: "reporting" }), 1);
      assert.equal(s.value("mesh_controller_nodes", { state: "silent" }), 1, "b's last report is 31 s old");
      assert.equal(s.value("mesh_controller_modules", { state: "running" }), 1);
      assert.equal(s.value("mesh_controller_modules", { state: "crashing" }), 1);
      assert.equal(s.value("mesh_controller_modules", { state: "unknown" }), 1, "a silent node's module");
      assert.equal(s.value("mesh_controller_modules", { state: "stopped" }), 0);
      assert.equal(s.value("mesh_controller_consumers"), 2);
      assert.equal(s.value("mesh_controller_failing_consumers"), 1);
      assert.equal(s.value("mesh_controller_fleet_refused"), 0);
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 0);
      assert.equal(s.value("process_cpu_user_seconds_total"), undefined);

      status = statusOf({ fleet: { file: "/f/mesh.yaml", readAt: ago(1), refused: ["line 3: bad"] } });
      metrics.observer.reloaded("refused");
      metrics.observer.reloaded("applied");
      metrics.observer.minted(3);
      metrics.observer.minted(0);
      metrics.observer.published();
      metrics.observer.rotated();
      s = await scrapeProm(`${http.url}/metrics`, { token: SCRAPE });
      assert.equal(s.value("mesh_controller_nodes", { state: "enrolled" }), 0);
      assert.equal(s.value("mesh_controller_consumers"), 0);
      assert.equal(s.value("mesh_controller_failing_consumers"), 0);
      assert.equal(s.value("mesh_controller_fleet_refused"), 1);
      assert.equal(s.value("mesh_controller_reloads_total", { result: "refused" }), 1);
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 1);
      assert.equal(s.value("mesh_controller_passwords_minted_total"), 4, "three new, one rotation");
      assert.equal(s.value("mesh_controller_deliveries_published_total"), 1);
      assert.equal(s.value("mesh_controller_rotations_total"), 1);
    } finally {
      await http.close();
    }
  });

  it("answer zeros before there is a controller to follow", async () => {
    const metrics = new ControllerMetrics({ processMetrics: false });
    const text = await metrics.text();
    assert.match(text, /^mesh_controller_nodes\{state="enrolled"\} 0$/m);
    assert.match(text, /^mesh_controller_consumers 0$/m);
  });
});

describe("a real controller's metrics", { timeout: 120_000 }, () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
  });
  after(async () => {
    await mesh?.stop();
    if (fleet) await rm(fleet.dir, { recursive: true, force: true });
  });

  it("count what it published and minted, reloads, rotations and enrolled nodes", async () => {
    const metrics = new ControllerMetrics({ processMetrics: false });
    const controller = await startController({
      stateDir: `${mesh.stateDir}/observed`,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: mesh.authority,
      logger: recordingLogger(),
      watch: false,
      observer: metrics.observer,
    });
    metrics.follow(() => controller.status());
    const http = await startControllerHttp({ routes: [metricsRoute(metrics.registry)], auth: authFor() });
    const scrape = () => scrapeProm(`${http.url}/metrics`, { token: SCRAPE });
    try {
      let s = await scrape();
      const consumers = controller.status().consumers.length;
      assert.ok(consumers > 0);
      assert.equal(s.value("mesh_controller_consumers"), consumers);
      assert.equal(s.value("mesh_controller_passwords_minted_total"), consumers, "one per consumer at start");
      assert.equal(s.value("mesh_controller_deliveries_published_total"), 0, "no node enrolled yet");
      assert.equal(s.value("mesh_controller_nodes", { state: "not-enrolled" }), 2);

      await enrollNode(await controller.joinToken("node-a"));
      s = await scrape();
      assert.equal(s.value("mesh_controller_nodes", { state: "enrolled" }), 1);
      assert.equal(s.value("mesh_controller_nodes", { state: "silent" }), 1, "enrolled, never reported");
      assert.equal(s.value("mesh_controller_deliveries_published_total"), 1, "its first delivery");

      await controller.rotate("app1", "postgres-database");
      s = await scrape();
      assert.equal(s.value("mesh_controller_rotations_total"), 1);
      assert.equal(s.value("mesh_controller_passwords_minted_total"), consumers + 1);
      assert.equal(s.value("mesh_controller_deliveries_published_total"), 2, "node-a's new password");

      await controller.reload();
      s = await scrape();
      assert.equal(s.value("mesh_controller_reloads_total", { result: "applied" }), 1);
      assert.equal(
        s.value("mesh_controller_deliveries_published_total"),
        2,
        "nothing changed, nothing published",
      );

      await fleet.writeFleet("nodes: [this is not a fleet");
      await assert.rejects(controller.reload());
      s = await scrape();
      assert.equal(s.value("mesh_controller_reloads_total", { result: "refused" }), 1);
      assert.equal(s.value("mesh_controller_fleet_refused"), 1);
    } finally {
      await http.close();
      await controller.stop();
    }
  });
});
