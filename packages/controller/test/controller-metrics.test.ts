// The controller's per-thing series, which the alert rules (deploy/prometheus/mesh.rules.yml) fire
// on: one per node, module, consumer and provider, read from the status at each scrape; and the
// bus's, read through a real nats-server's JetStream and a probe of each server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { ControllerMetrics } from "@mesh/controller";
import { readBusHealth } from "../src/bus-health.ts";
import { type ControllerStatus, type ProviderStatus } from "../src/controller-status.ts";
import { freePort, parsePromText, startNats, type NatsServer, until } from "@mesh/testkit";

const now = Date.parse("2030-01-01T00:00:00Z");
const ago = (s: number): string => new Date(now - s * 1000).toISOString();

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

function provider(name: string, node: string, answered: boolean, waiting = 0): ProviderStatus {
  return {
    provider: name,
    node,
    interfaces: ["postgres-database"],
    answered,
    problem: answered ? null : "it did not answer",
    askedAt: answered ? ago(3) : null,
    lastPassAt: null,
    contributionsProblem: null,
    counts: null,
    waiting: waiting > 0 ? { id: "w1", logins: [], count: waiting, held: 6, reason: "more than 3" } : null,
  };
}

describe("the controller's series per node, module, consumer and provider", () => {
  it("name each one, from the status at each scrape, and drop what the status no longer has", async () => {
    const metrics = new ControllerMetrics({ processMetrics: false, now: () => now, silentAfterMs: 30_000 });
    const running = { state: "running" as const, restarts: 0, log: "/l" };
    let status = statusOf({
      nodes: [
        {
          name: "a",
          enrolled: true,
          lastReportAt: ago(5),
          generation: 1,
          modules: [
            { name: "postgres", ...running },
            { name: "app1", state: "crashing", restarts: 7, log: "/l" },
          ],
        },
        {
          name: "b",
          enrolled: true,
          lastReportAt: ago(31),
          generation: 1,
          modules: [{ name: "app2", ...running }],
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
        {
          provider: "postgres",
          interface: "postgres-database",
          consumer: "old_postgres",
          login: "old_postgres",
          node: null,
          class: "refused",
          since: ago(60),
          attempts: 1,
          error: "no",
          at: ago(1),
        },
      ],
      providers: [
        provider("postgres", "a", true, 4),
        provider("redis", "b", true),
        provider("mariadb", "c", false),
      ],
    });
    metrics.follow(() => status);
    let s = parsePromText(await metrics.text());
    assert.equal(s.value("mesh_node_reporting", { node: "a" }), 1);
    assert.equal(s.value("mesh_node_reporting", { node: "b" }), 0, "31 s since its last report");
    assert.equal(s.value("mesh_node_reporting", { node: "c" }), 0, "never reported");
    assert.equal(s.value("mesh_node_enrolled", { node: "c" }), 0);
    assert.equal(s.value("mesh_node_last_report_timestamp_seconds", { node: "a" }), (now - 5000) / 1000);
    assert.equal(s.value("mesh_node_last_report_timestamp_seconds", { node: "c" }), undefined);
    assert.equal(s.value("mesh_module_state", { node: "a", module: "app1", state: "crashing" }), 1);
    assert.equal(s.value("mesh_module_state", { node: "a", module: "app1", state: "running" }), 0);
    assert.equal(
      s.value("mesh_module_state", { node: "b", module: "app2", state: "unknown" }),
      1,
      "its node is silent",
    );
    assert.equal(s.types.get("mesh_module_restarts_total"), "counter");
    assert.equal(s.value("mesh_module_restarts_total", { node: "a", module: "app1" }), 7);
    assert.equal(s.value("mesh_consumer_failing", { consumer: "app1" }), 0);
    assert.equal(
      s.value("mesh_consumer_failing", {
        consumer: "app2",
        provider: "postgres",
        login: "app2_postgres",
        node: "b",
      }),
      1,
    );
    assert.equal(
      s.value("mesh_consumer_failing", { login: "old_postgres", node: "" }),
      1,
      "a login the fleet no longer has",
    );
    assert.equal(s.value("mesh_provider_heard", { provider: "postgres", node: "a" }), 1);
    assert.equal(
      s.value("mesh_provider_heard", { provider: "redis" }),
      0,
      "it answered, but its node is silent",
    );
    assert.equal(s.value("mesh_provider_heard", { provider: "mariadb" }), 0);
    assert.equal(s.value("mesh_provider_last_heard_timestamp_seconds", { provider: "mariadb" }), undefined);
    assert.equal(s.value("mesh_retirement_waiting", { provider: "postgres" }), 4);
    assert.equal(s.value("mesh_retirement_waiting", { provider: "redis" }), 0);
    assert.equal(s.value("mesh_bus_server_up"), undefined, "no bus followed, no bus series");

    status = statusOf({
      nodes: [{ name: "a", enrolled: true, lastReportAt: ago(1), generation: 2, modules: [] }],
    });
    s = parsePromText(await metrics.text());
    assert.equal(
      s.value("mesh_module_state", { module: "app1" }),
      undefined,
      "gone from the status, gone from the scrape",
    );
    assert.equal(s.value("mesh_module_restarts_total", { module: "app1" }), undefined);
    assert.equal(s.value("mesh_consumer_failing"), undefined);
    assert.equal(s.value("mesh_node_reporting", { node: "b" }), undefined);
  });
});

describe("the controller's bus series, through a real nats-server", { timeout: 120_000 }, () => {
  let server: NatsServer;
  let nc: NatsConnection;
  before(async () => {
    server = await startNats({ config: "" });
    nc = await connect({ servers: server.url, reconnectTimeWait: 200, maxReconnectAttempts: -1 });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: "ALERTS_TEST", subjects: ["alerts.test.>"] });
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  it("say each server answering or not, JetStream answering, and each stream's copies; then the server down", async () => {
    const gone = await freePort();
    const metrics = new ControllerMetrics({ processMetrics: false });
    metrics.follow(() => statusOf({}), {
      health: () => readBusHealth(nc, 1_000),
      servers: [server.url, `nats://127.0.0.1:${gone}`],
      probeTimeoutMs: 1_000,
    });
    let s = parsePromText(await metrics.text());
    assert.equal(s.value("mesh_bus_server_up", { server: `127.0.0.1:${server.port}` }), 1);
    assert.equal(s.value("mesh_bus_server_up", { server: `127.0.0.1:${gone}` }), 0, "nothing listens there");
    assert.equal(s.value("mesh_bus_jetstream_up"), 1);
    assert.equal(s.value("mesh_bus_replicas_target"), 1, "one server");
    assert.equal(s.value("mesh_bus_stream_replicas", { stream: "ALERTS_TEST" }), 1);
    assert.equal(s.value("mesh_bus_stream_replicas_current", { stream: "ALERTS_TEST" }), 1);

    await server.stop();
    s = await until(
      "the server and JetStream said down",
      async () => {
        const x = parsePromText(await metrics.text());
        return x.value("mesh_bus_server_up", { server: `127.0.0.1:${server.port}` }) === 0 &&
          x.value("mesh_bus_jetstream_up") === 0
          ? x
          : undefined;
      },
      60,
    );
    assert.equal(
      s.value("mesh_bus_stream_replicas", { stream: "ALERTS_TEST" }),
      undefined,
      "no listing, no streams",
    );
  });
});
