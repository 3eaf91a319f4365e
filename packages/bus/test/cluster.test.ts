// The bus on a real 3-server nats-server cluster configured as `mesh bus-config` configures it:
// every stream and bucket the mesh makes is kept by three servers, existing ones are raised, losing
// one server stops no KV write or ledger append, and a silently cut-off server is given up in seconds.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { meshClusterConfigs, startNatsCluster, until, type NatsCluster } from "@mesh/testkit";
import {
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ledgerSnapshotBucket,
  ledgerStreamName,
  ModuleLedger,
  newUserKeys,
  openState,
  raiseReplicas,
  replicasFor,
  respondInParts,
  sendReceipt,
  type BusAuthority,
} from "@mesh/bus";
import { askThroughServers } from "../src/ask-servers.ts";
import { EVERYTHING, recordingLogger } from "./bus-server.ts";

let authority: BusAuthority;
let cluster: NatsCluster;
const connections: NatsConnection[] = [];

async function connect(
  options: { servers?: readonly string[]; replicas?: number } = {},
): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: "tester",
    publicKey: keys.publicKey,
    permissions: EVERYTHING,
  });
  const nc = await connectBus({
    servers: options.servers ?? cluster.urls,
    creds: credsFor(jwt, keys.seed),
    name: "tester",
    ...(options.replicas !== undefined ? { replicas: options.replicas } : {}),
  });
  connections.push(nc);
  return nc;
}

const replicasOf = async (nc: NatsConnection, stream: string): Promise<number> =>
  (await (await jetstreamManager(nc)).streams.info(stream)).config.num_replicas;

before(async () => {
  authority = await createAuthority();
  cluster = await startNatsCluster({ configure: meshClusterConfigs(authority) });
  const nc = await connect();
  // The JetStream meta cluster takes a few seconds to elect its leader.
  await until("the cluster's JetStream to answer", () => new Kvm(nc).create("ready", { replicas: 3 }), 60);
});

after(async () => {
  for (const nc of connections) await nc.close().catch(() => undefined);
  await cluster?.stop();
});

describe("the bus on a cluster of three", () => {
  it("makes every bucket and ledger stream with three copies, and raises those made with one", async () => {
    const nc = await connect();
    assert.equal(replicasFor(nc), 3, "3 servers: 3 copies by default");
    await openState(nc, "fresh-bucket");
    assert.equal(await replicasOf(nc, "KV_fresh-bucket"), 3);

    // The ledger every module shares, made while only one copy could be placed.
    const single = await connect({ replicas: 1 });
    await openState(single, "old-bucket");
    await ensureLedger(single, "old-module");
    assert.equal(await replicasOf(nc, "KV_old-bucket"), 1);
    assert.equal(await replicasOf(nc, ledgerStreamName("old-module")), 1);
    // A module asked for later makes no stream of its own: it finds the shared one.
    await ensureLedger(nc, "fresh-module");
    assert.equal(ledgerStreamName("fresh-module"), ledgerStreamName("old-module"));

    const log = recordingLogger();
    const raised = await raiseReplicas(nc, log);
    const names = raised.map((r) => r.stream);
    for (const stream of [
      "KV_old-bucket",
      ledgerStreamName("old-module"),
      `KV_${ledgerSnapshotBucket("old-module")}`,
    ])
      assert.ok(names.includes(stream), `${stream} raised (${names.join(", ")})`);
    assert.ok(raised.every((r) => r.from === 1 && r.to === 3));
    assert.equal(await replicasOf(nc, "KV_old-bucket"), 3);
    assert.equal(await replicasOf(nc, ledgerStreamName("old-module")), 3);
    assert.equal(await replicasOf(nc, `KV_${ledgerSnapshotBucket("fresh-module")}`), 3);
    assert.ok(
      log.lines.some((l) => /^info: raised \d+ stream\(s\) to 3 copies/.test(l)),
      log.lines.join("\n"),
    );
    assert.deepEqual(await raiseReplicas(nc), [], "raised once, not again");
  });

  it("keeps KV writes and ledger appends working when one server is killed", async () => {
    const nc = await connect();
    const state = await openState<{ n: number }>(nc, "survivor");
    await ensureLedger(nc, "survivor");
    const ledger = new ModuleLedger(await connect(), "survivor");
    await state.put("k", { n: 1 });
    const before = await ledger.append("action", { action: "created", consumer: "a" });

    await cluster.kill(0);
    try {
      // A new leader is elected for what server 0 led; until then a write may be refused.
      await until("a KV write with server 0 gone", () => state.put("k", { n: 2 }), 30);
      const seq = await until(
        "a ledger append with server 0 gone",
        () => ledger.append("action", { action: "created", consumer: "b" }, { id: "after-kill" }),
        30,
      );
      assert.ok(seq > before);
      assert.deepEqual(await state.get("k"), { n: 2 });
    } finally {
      await cluster.start(0);
    }
  });

  it("gives up a server that stops answering (a silent partition) and moves to another within seconds", async () => {
    const nc = await connect();
    const first = nc.info?.server_name ?? "";
    const index = cluster.members.findIndex((m) => m.name === first);
    assert.ok(index >= 0, `connected to ${first}`);
    const started = Date.now();
    cluster.pause(index);
    try {
      await until(
        "the connection to move to another server",
        () => {
          const now = nc.info?.server_name;
          return now !== undefined && now !== first && !nc.isClosed();
        },
        30,
      );
      const seconds = (Date.now() - started) / 1000;
      console.log(`a paused server was given up in ${seconds.toFixed(1)} s (goal 15 s, limit 30 s)`);
      assert.ok(seconds < 30, `moved within 30 s, not ${seconds} s`);
      await nc.flush();
    } finally {
      cluster.resume(index);
    }
  });

  it("asks through the servers the cluster names when the one given stops answering once connected", async () => {
    const live = await connect({ servers: [cluster.urls[2] ?? ""] });
    live.subscribe("ask.cluster", {
      callback: (_e, msg) => {
        sendReceipt(live, msg);
        respondInParts(live, msg, "answered");
      },
    });
    await live.flush();
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "asker",
      publicKey: keys.publicKey,
      permissions: EVERYTHING,
    });
    const creds = credsFor(jwt, keys.seed);
    const given = cluster.urls[0] ?? "";
    const left: string[] = [];
    try {
      const answer = await askThroughServers({
        servers: [given],
        creds,
        name: "asker",
        subject: "ask.cluster",
        body: "{}",
        timeoutMs: 30_000,
        receiptMs: 1_000,
        // The server given is stopped just after it is connected to: up, then cut off.
        connect: async (server) => {
          const nc = await connectBus({ servers: [server], creds, name: "asker" });
          if (server === given) cluster.pause(0);
          return nc;
        },
        onNext: (server) => left.push(server),
      });
      assert.equal(answer.text, "answered");
      assert.notEqual(answer.server, given, "answered through a server only the cluster named");
      assert.ok(cluster.urls.includes(answer.server), answer.server);
      assert.equal(left[0], given);
    } finally {
      cluster.resume(0);
    }
  });
});
