import assert from "node:assert/strict";
import { until } from "@mesh/testkit";
import { after, before, describe, it } from "node:test";
import { connect } from "@nats-io/transport-node";
import {
  connectBus,
  credsFor,
  inboxPrefix,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  reportSubject,
  SEALED_PASSWORDS_BUCKET,
  decodeJoinToken,
  JoinTokenError,
} from "@mesh/bus";
import {
  DELIVERY_KEY,
  OPERATOR_IDENTITY,
  operatorPermissions,
  ROTATE_SUBJECT,
  STATUS_SUBJECT,
  type Controller,
} from "@mesh/controller";
import { UnknownNodeError } from "../src/fleet-controller.ts";
import { type ControllerStatus } from "../src/controller-status.ts";
import { type DeliveryHead } from "@mesh/manifest";
import {
  enrollNode,
  requestEnrollment,
  startFleetMesh,
  type FleetMesh,
  type TestMesh,
  type TestNode,
} from "./test-mesh.ts";

// A denied request is refused by the server; how fast it says so depends on the machine.
const REFUSED_WITHIN = { timeout: 20_000 };

void describe("enrollment and what each credential may do", () => {
  let mesh: TestMesh;
  let controller: Controller;
  let a: TestNode;
  let setup: FleetMesh<["node-a"]>;
  before(async () => {
    setup = await startFleetMesh(["node-a"]);
    ({ mesh, controller } = setup);
    [a] = setup.nodes;
  });
  after(() => setup.stop());

  void it("refuses an enrollment with a wrong secret, and records nothing", async () => {
    const token = await controller.joinToken("node-b");
    const reply = await requestEnrollment(token, { secret: "not-the-secret" });
    assert.equal(reply.ok, false);
    assert.match(!reply.ok ? reply.error : "", /join secret is not right/);
    assert.equal(controller.status().nodes.find((n) => n.name === "node-b")?.enrolled, false);
  });

  void it("refuses one node's secret for another node", async () => {
    const tokenA = await controller.joinToken("node-a");
    const reply = await requestEnrollment(tokenA, { node: "node-b" });
    assert.equal(reply.ok, false);
  });

  void it("refuses a join token for a node the fleet does not have, and a damaged token", async () => {
    await assert.rejects(controller.joinToken("node-z"), UnknownNodeError);
    assert.throws(() => decodeJoinToken("bm90IGEgdG9rZW4"), JoinTokenError);
  });

  void it("refuses a connection that brings no credentials", async () => {
    await assert.rejects(connect({ servers: mesh.nats.url, reconnect: false }), /Authorization Violation/);
  });

  void it("lets a node read its own deliveries bucket and not another node's (the server refuses)", async () => {
    assert.equal((await a.delivery())?.node, "node-a");
    await enrollNode(await controller.joinToken("node-b"));
    await assert.rejects(async () => {
      const other = await openState(a.nc, nodeDeliveriesBucket("node-b"), { create: false });
      await other.get("delivery");
    }, /Permissions Violation/);
    await assert.rejects(
      a.nc.request(
        `$JS.API.STREAM.MSG.GET.KV_${nodeDeliveriesBucket("node-b")}`,
        '{"last_by_subj":"$KV.x.delivery"}',
        REFUSED_WITHIN,
      ),
      /Permissions Violation/,
    );
    await assert.rejects(async () => {
      const sealed = await openState(a.nc, SEALED_PASSWORDS_BUCKET, { create: false });
      await sealed.keys();
    }, /Permissions Violation/);
  });

  void it("lets a node watch its own deliveries bucket with nothing but its own inbox", async () => {
    const bucket = await openState<DeliveryHead>(a.nc, nodeDeliveriesBucket("node-a"), { create: false });
    const watch = await bucket.watch({ key: DELIVERY_KEY });
    const generations: number[] = [];
    const done = (async () => {
      for await (const change of watch)
        if (change.operation === "put") generations.push(change.value.generation);
    })();
    await until("the current delivery", () => generations.length === 1, 30);
    // app2's (a consumer on node-b of node-a's Postgres): node-a's provider is handed its new password.
    // Not app1's: no provider here applies it, and the operator's rotation of app1 below would be
    // refused as one under way.
    await controller.rotate("app2", "postgres-database");
    await until("the new delivery", () => generations.length === 2, 30);
    watch.stop();
    await done;
    assert.equal(generations[1], (generations[0] ?? 0) + 1);
  });

  void it("lets the join token's credentials ask to enroll and nothing more", async () => {
    const t = decodeJoinToken(await controller.joinToken("node-a"));
    const nc = await connectBus({
      servers: t.servers,
      creds: new TextEncoder().encode(t.creds),
      name: "node-a",
      inboxPrefix: inboxPrefix("node-a"),
    });
    try {
      await assert.rejects(async () => {
        const own = await openState(nc, nodeDeliveriesBucket("node-a"), { create: false });
        await own.get("delivery");
      }, /Permissions Violation/);
    } finally {
      await nc.close();
    }
  });

  void it("keeps the last report of each node for status, from the node the subject names", async () => {
    a.nc.publish(
      reportSubject("node-a"),
      JSON.stringify({
        node: "node-b", // the body's claim is not what counts
        generation: 1,
        at: new Date().toISOString(),
        modules: [{ name: "app1", state: "running", pid: 42, restarts: 0, log: "/x/log" }],
        files: { written: 2, unchanged: 0 },
      }),
    );
    await until(
      "node-a's report",
      () => controller.status().nodes.find((n) => n.name === "node-a")?.lastReportAt !== null,
      30,
    );
    const nodeA = controller.status().nodes.find((n) => n.name === "node-a");
    assert.deepEqual(
      nodeA?.modules.map((m) => [m.name, m.state]),
      [["app1", "running"]],
    );
    assert.equal(controller.status().nodes.find((n) => n.name === "node-b")?.lastReportAt, null);
  });

  void it("answers status and rotation on the bus to the operator's credentials, and not to a node's", async () => {
    const keys = newUserKeys();
    const jwt = await mesh.authority.issueUser({
      name: OPERATOR_IDENTITY,
      publicKey: keys.publicKey,
      permissions: operatorPermissions(),
    });
    const op = await connectBus({
      servers: mesh.nats.url,
      creds: credsFor(jwt, keys.seed),
      name: OPERATOR_IDENTITY,
      inboxPrefix: inboxPrefix(OPERATOR_IDENTITY),
    });
    try {
      const status = (await op.request(STATUS_SUBJECT, "", { timeout: 30_000 })).json<ControllerStatus>();
      assert.equal(status.consumers.length, 4);
      const before = (await a.passwords())["app1/postgres-database"];
      const rotated = await op.request(
        ROTATE_SUBJECT,
        JSON.stringify({ consumer: "app1", interface: "postgres-database" }),
        {
          timeout: 30_000,
        },
      );
      // The answer names what was rotated and the new password's tag (never the password).
      const answer = rotated.json() as { ok?: unknown; login?: unknown; tag?: unknown };
      assert.equal(answer.ok, true);
      assert.equal(typeof answer.tag, "string");
      assert.notEqual((await a.passwords())["app1/postgres-database"], before);
      const unknown = await op.request(
        ROTATE_SUBJECT,
        JSON.stringify({ consumer: "nobody", interface: "x" }),
        {
          timeout: 30_000,
        },
      );
      assert.equal(unknown.json<{ ok: boolean }>().ok, false);
    } finally {
      await op.close();
    }
    await assert.rejects(a.nc.request(STATUS_SUBJECT, "", REFUSED_WITHIN), /Permissions Violation/);
  });
});
