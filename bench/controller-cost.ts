// What the controller costs with a fleet of N consumers across M nodes (10,000 across 20 by
// default), against a real nats-server under the mesh's authentication, with M enrolled nodes
// reading their deliveries with their own credentials:
//   - a full derivation and delivery: the fleet file goes from nodes only to every module, and
//     `reload()` reads it, derives the plan, mints one password per consumer, seals each to the
//     nodes that need it and writes each node's delivery;
//   - a reload with nothing changed, a restart (every kept password read back; none opened, since
//     nothing is republished), one rotation;
//   - memory: the process's heap and RSS before and after the full delivery (after a GC each).
// Baselines in the same run: the derivation alone (read, check, plan; no bus), and the same
// delivery documents put plainly into one bucket (no minting, no sealing). Goals: the full delivery
// ≤ 2× the derivation alone, a restart ≤ 2 s, an unchanged reload ≤ 200 ms, each said met or not.
//
//   node --import tsx bench/controller-cost.ts   (MESH_BENCH_CONSUMERS=10000, MESH_BENCH_NODES=20)

import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  enrollSubject,
  inboxPrefix,
  newNodeKeys,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  unseal,
  type NodeKeys,
  decodeJoinToken,
} from "@mesh/bus";
import { loadFleetPlan, startController, type Controller, type EnrollReply } from "@mesh/controller";
import { DELIVERY_KEY, readDelivery, type Delivery } from "@mesh/manifest";
import { startNats } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { POSTGRES, REDIS, writeManifest } from "../packages/controller/test/fleet-dir.ts";
import {
  envInt,
  fmtMs,
  median,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
  verdict,
} from "./lib.ts";

const CONSUMERS = envInt("MESH_BENCH_CONSUMERS", 10_000);
const NODES = envInt("MESH_BENCH_NODES", 20);
const REPEAT = 5;

// A full GC before each memory reading, so the figures are what is kept, not what is not collected yet.
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const memory = (): { heap: number; rss: number } => {
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
};
const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
const kb = (bytes: number): string => `${(bytes / 1024).toFixed(0)} KB`;

const nodeName = (i: number): string => `node-${i}`;
const consumerName = (i: number): string => `c${String(i).padStart(5, "0")}`;

/**
 * Writes a fleet: a Postgres-like provider on every node, a Redis-like one on node-0; consumer i on
 * node i mod M, needing the Postgres of its own node, and every fourth also Redis (from node-0, so
 * a quarter of the secrets go to two nodes). One manifest file per consumer, as a real fleet has.
 */
async function writeFleet(dir: string): Promise<{ nodesOnly: string; full: string; secrets: number }> {
  await writeManifest(dir, "postgres", POSTGRES);
  await writeManifest(dir, "redis", REDIS);
  const nodes = Array.from({ length: NODES }, (_, i) => `  ${nodeName(i)}: {}`).join("\n");
  const modules: string[] = [`  redis: { manifest: ./redis/module.json, node: ${nodeName(0)} }`];
  for (let n = 0; n < NODES; n++)
    modules.push(`  pg-${n}: { manifest: ./postgres/module.json, node: ${nodeName(n)} }`);
  let secrets = 0;
  for (let i = 0; i < CONSUMERS; i++) {
    const name = consumerName(i);
    const needs: Record<string, object> = { "postgres-database": { values: {} } };
    if (i % 4 === 0) needs["redis-namespace"] = { values: {} };
    await writeManifest(dir, name, { name, needs });
    modules.push(`  ${name}: { manifest: ./${name}/module.json, node: ${nodeName(i % NODES)} }`);
    // Postgres is on the consumer's own node: one box. Redis is on node-0: two boxes unless it is node-0.
    secrets += 1 + (i % 4 === 0 ? (i % NODES === 0 ? 1 : 2) : 0);
  }
  const nodesOnly = join(dir, "nodes-only.yaml");
  const full = join(dir, "full.yaml");
  await writeFile(nodesOnly, `nodes:\n${nodes}\nmodules: {}\n`);
  await writeFile(full, `nodes:\n${nodes}\nmodules:\n${modules.join("\n")}\n`);
  return { nodesOnly, full, secrets };
}

interface BenchNode {
  readonly node: string;
  readonly nc: NatsConnection;
  readonly seal: NodeKeys;
}

async function enroll(token: string): Promise<BenchNode> {
  const t = decodeJoinToken(token);
  const natsKeys = newUserKeys();
  const seal = await newNodeKeys();
  const enrollConn = await connectBus({
    servers: t.servers,
    creds: new TextEncoder().encode(t.creds),
    name: t.node,
    inboxPrefix: inboxPrefix(t.node),
  });
  let reply: EnrollReply;
  try {
    const msg = await enrollConn.request(
      enrollSubject(),
      JSON.stringify({
        node: t.node,
        secret: t.secret,
        natsPublicKey: natsKeys.publicKey,
        sealPublicKey: seal.publicKey,
      }),
      { timeout: 60_000 },
    );
    reply = msg.json<EnrollReply>();
  } finally {
    await closeBus(enrollConn);
  }
  if (!reply.ok) throw new Error(`${t.node} was not enrolled: ${reply.error}`);
  const nc = await connectBus({
    servers: t.servers,
    creds: credsFor(reply.jwt, natsKeys.seed),
    name: t.node,
    inboxPrefix: inboxPrefix(t.node),
  });
  onCleanup(() => closeBus(nc));
  return { node: t.node, nc, seal };
}

/** A node's delivery as it reads it, with the sizes of the values it is stored as. */
async function readNodeDelivery(
  node: BenchNode,
): Promise<{ delivery: Delivery; head: number; largestPart: number; parts: number } | undefined> {
  const bucket = await openState<unknown>(node.nc, nodeDeliveriesBucket(node.node), { create: false });
  const head = await bucket.get(DELIVERY_KEY);
  if (head === undefined) return undefined;
  let largestPart = 0;
  let parts = 0;
  const read = await readDelivery(head, async (key) => {
    const part = await bucket.get(key);
    largestPart = Math.max(largestPart, Buffer.byteLength(JSON.stringify(part)));
    parts++;
    return part;
  });
  if (read.delivery === undefined)
    throw new Error(`${node.node}'s delivery waits for ${read.waiting.join(", ")}`);
  return { delivery: read.delivery, head: Buffer.byteLength(JSON.stringify(head)), largestPart, parts };
}

/** Goals: a full delivery ≤ 2× the derivation alone, a restart ≤ 2 s, an unchanged reload ≤ 200 ms. */
const FULL_GOAL = 2;
const RESTART_GOAL_MS = 2_000;
const UNCHANGED_GOAL_MS = 200;

runBench("controller-cost", async () => {
  const dir = await tempDir("controller-cost");
  say(`writing a fleet of ${CONSUMERS} consumers across ${NODES} nodes`);
  const files = await writeFleet(dir);
  const fleetFile = join(dir, "mesh.yaml");
  await writeFile(fleetFile, await readFile(files.nodesOnly, "utf8"));

  say("baseline: the derivation alone (read the fleet file and every manifest, check, plan)");
  const derivation: number[] = [];
  for (let i = 0; i < REPEAT; i++) {
    const t = now();
    // Parsed in full each time: read again unchanged, the controller reuses what it read.
    await loadFleetPlan(files.full, { reuse: false });
    derivation.push(now() - t);
  }

  const authority = await createAuthority();
  const nats = await startNats({ config: authority.serverConfig() });
  onCleanup(() => nats.stop());
  const log = quietLogger();
  const stateDir = join(dir, "controller");
  const start = (): Promise<Controller> =>
    startController({
      stateDir,
      fleetFile,
      servers: [nats.url],
      authority,
      logger: log,
      watch: false,
      // One controller and no standby: on a loaded machine a renewal acknowledged late must not
      // make it step down in the middle of what is measured (6 s by default).
      leaseTimings: { stepDownAfterMs: 120_000, takeOverAfterMs: 240_000 },
    });

  let controller = await start();
  onCleanup(() => controller.stop());
  say(`enrolling ${NODES} nodes`);
  const nodes: BenchNode[] = [];
  for (let n = 0; n < NODES; n++) nodes.push(await enroll(await controller.joinToken(nodeName(n))));

  say("full derivation and delivery: reload() from nodes only to the whole fleet");
  const memBefore = memory();
  await writeFile(fleetFile, await readFile(files.full, "utf8"));
  let t = now();
  const full = await controller.reload();
  const fullMs = now() - t;
  const memAfter = memory();
  if (full.minted !== CONSUMERS + Math.ceil(CONSUMERS / 4)) {
    throw new Error(`expected ${CONSUMERS + Math.ceil(CONSUMERS / 4)} passwords minted, got ${full.minted}`);
  }

  say("checking every node's delivery with its own credentials and keys");
  const deliveries: Delivery[] = [];
  const stored: { head: number; largestPart: number; parts: number }[] = [];
  let boxes = 0;
  for (const node of nodes) {
    const read = await readNodeDelivery(node);
    if (read === undefined) throw new Error(`${node.node} has no delivery`);
    const { delivery, ...sizes } = read;
    stored.push(sizes);
    for (const box of Object.values(delivery.secrets)) await unseal(box, node.seal);
    boxes += Object.keys(delivery.secrets).length;
    deliveries.push(delivery);
  }
  if (boxes !== files.secrets)
    throw new Error(`expected ${files.secrets} sealed secrets across the nodes, found ${boxes}`);
  const sizes = deliveries.map((d) => Buffer.byteLength(JSON.stringify(d)));
  const sizeLine =
    `delivery per node, assembled: min ${kb(Math.min(...sizes))}, max ${kb(Math.max(...sizes))}; ` +
    `stored as a head of min ${kb(Math.min(...stored.map((s) => s.head)))}, max ${kb(Math.max(...stored.map((s) => s.head)))} ` +
    `and up to ${Math.max(...stored.map((s) => s.parts))} parts of at most ${Math.max(...stored.map((s) => s.largestPart))} bytes ` +
    `(NATS's default max payload is 1 MB)`;
  // Said now too: the steps after it can fail on a loaded machine, and these figures stand on their own.
  say(`the full delivery took ${fmtMs(fullMs)}; ${sizeLine}`);

  say("a reload with nothing changed");
  const unchanged: number[] = [];
  for (let i = 0; i < REPEAT; i++) {
    t = now();
    const outcome = await controller.reload();
    unchanged.push(now() - t);
    if (outcome.published.length > 0) throw new Error("an unchanged reload republished");
  }

  say("a restart: every kept password read back, nothing republished");
  await controller.stop();
  t = now();
  controller = await start();
  const restartMs = now() - t;
  for (const [i, node] of nodes.entries()) {
    if ((await readNodeDelivery(node))?.delivery.generation !== deliveries[i]?.generation) {
      throw new Error(`${node.node}'s delivery changed across a restart`);
    }
  }

  // A restarted controller leads once the lease of the one before is its own again (or lapsed).
  for (let waited = 0; !controller.leading() && waited < 30_000; waited += 100)
    await new Promise((r) => setTimeout(r, 100));
  say("one rotation");
  t = now();
  await controller.rotate(consumerName(0), "redis-namespace");
  const rotateMs = now() - t;

  say("baseline: the same delivery documents put plainly into one bucket");
  const benchKeys = newUserKeys();
  const benchJwt = await authority.issueUser({
    name: "bench",
    publicKey: benchKeys.publicKey,
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
  });
  const ncPlain = await connectBus({
    servers: nats.url,
    creds: credsFor(benchJwt, benchKeys.seed),
    name: "bench",
  });
  onCleanup(() => closeBus(ncPlain));
  const scratch = await openState<string>(ncPlain, "bench-plain");
  // A document bigger than the server's largest message (1 MB by default) goes in pieces, as it
  // must for the controller too; the pieces here are as large as a message allows once stored as
  // a JSON string (its quotes escaped), which a piece of many quotes may double.
  const PIECE = 900_000;
  t = now();
  for (const [i, d] of deliveries.entries()) {
    const text = JSON.stringify(d);
    for (let at = 0, k = 0; at < text.length; k++) {
      let piece = text.slice(at, at + PIECE);
      while (Buffer.byteLength(JSON.stringify(piece)) > PIECE) piece = piece.slice(0, piece.length >> 1);
      await scratch.put(`n${i}.${k}`, piece);
      at += piece.length;
    }
  }
  const plainMs = now() - t;

  const rows: (string | number)[][] = [
    ["full derivation and delivery (reload)", fmtMs(fullMs), fmtMs(fullMs / CONSUMERS)],
    [
      "  baseline: derivation alone, median",
      fmtMs(median(derivation)),
      fmtMs(median(derivation) / CONSUMERS),
    ],
    [`  baseline: the ${NODES} documents put plainly`, fmtMs(plainMs), ""],
    ["reload, nothing changed, median", fmtMs(median(unchanged)), fmtMs(median(unchanged) / CONSUMERS)],
    ["restart (read every password back)", fmtMs(restartMs), fmtMs(restartMs / CONSUMERS)],
    ["one rotation (two nodes republished)", fmtMs(rotateMs), ""],
  ];
  printResult(
    "controller-cost",
    [
      `${CONSUMERS} consumers across ${NODES} nodes; ${full.minted} passwords minted (one per consumer and interface); ${boxes} sealed secrets ` +
        `delivered (a quarter of the consumers need a provider on another node)`,
      "",
      table(["what", "wall time", "per consumer"], rows),
      "",
      table(
        ["memory (after a full GC)", "heap", "rss"],
        [
          ["before the full delivery", mb(memBefore.heap), mb(memBefore.rss)],
          ["after", mb(memAfter.heap), mb(memAfter.rss)],
          ["kept for the fleet", mb(memAfter.heap - memBefore.heap), mb(memAfter.rss - memBefore.rss)],
        ],
      ),
      "",
      sizeLine,
      // Nothing changed, nothing is parsed again (the texts are compared) and nothing republished.
      `an unchanged reload: ${verdict(fmtMs(median(unchanged)), `≤ ${fmtMs(UNCHANGED_GOAL_MS)}`, median(unchanged) <= UNCHANGED_GOAL_MS)}` +
        ` (the derivation alone: ${fmtMs(median(derivation))})`,
      `the full delivery: ${verdict(`${(fullMs / median(derivation)).toFixed(2)}× the derivation alone`, `≤ ${FULL_GOAL}×`, fullMs <= FULL_GOAL * median(derivation))}`,
      `a restart: ${verdict(fmtMs(restartMs), `≤ ${fmtMs(RESTART_GOAL_MS)}`, restartMs <= RESTART_GOAL_MS)}`,
      `warnings: ${log.warnings.length}, errors: ${log.errors.length}`,
    ].join("\n"),
  );
});
