// What a module's events cost through the SDK, against raw nats.js on the same server in the same
// run: emit throughput (messages/s, emit() vs nc.publish() of the same JSON payload) and end-to-end
// latency (emit → on() handler vs publish → subscription callback). One private nats-server under
// the mesh's decentralized authentication; every connection holds a credential compiled from the
// bench module's manifest, so the server does the same permission checks for both.
//
//   node --import tsx bench/events.ts   (MESH_BENCH_MESSAGES=20000 per path and round,
//                                        MESH_BENCH_ROUNDS=15, MESH_BENCH_SAMPLES=2000 latency samples each)

import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { closeBus, connectBus, createAuthority, credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { compilePermissions, eventSubject, loadManifest } from "@mesh/manifest";
import { connectModuleBus, type ModuleBus } from "@mesh/sdk";
import { startNats } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
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
  summarize,
  table,
  tempDir,
} from "./lib.ts";

const SOURCE = "ticker";
const LISTENER = "listener";
const EVENT = "tick.sent";
const SUBJECT = eventSubject(SOURCE, EVENT);
// The raw side's latency samples go on a subject of their own, so each listener hears only its own.
const RAW_EVENT = "tick.raw";
const RAW_SUBJECT = eventSubject(SOURCE, RAW_EVENT);

/** A typical small event body: a few fields, about 150 bytes of JSON. */
function bodyOf(i: number): Record<string, unknown> {
  return {
    seq: i,
    consumer: "notes_postgres",
    node: "node-1",
    at: "2026-11-01T12:00:00.000Z",
    why: "a benchmark's event, the size of a real one",
  };
}

interface Credentials {
  readonly authority: BusAuthority;
  readonly url: string;
  readonly manifests: Record<string, string>;
}

async function credsOf(c: Credentials, module: string): Promise<Uint8Array> {
  const manifest = await loadManifest(c.manifests[module] as string);
  const keys = newUserKeys();
  const jwt = await c.authority.issueUser({
    name: module,
    publicKey: keys.publicKey,
    permissions: compilePermissions(manifest, module, []),
  });
  return credsFor(jwt, keys.seed);
}

async function sdkBus(c: Credentials, module: string): Promise<ModuleBus> {
  const bus = await connectModuleBus({
    servers: c.url,
    creds: await credsOf(c, module),
    module,
    manifest: c.manifests[module] as string,
    seats: [],
    logger: quietLogger(),
  });
  onCleanup(() => bus.close());
  return bus;
}

async function rawConnection(c: Credentials, module: string): Promise<NatsConnection> {
  const nc = await connectBus({ servers: c.url, creds: await credsOf(c, module), name: `${module}-raw` });
  onCleanup(() => closeBus(nc));
  return nc;
}

/** How fast `n` sends went: by the clock, and by the CPU this process spent (user + system). */
interface Rate {
  /** Messages per second of wall-clock time, until the server answered a flush after them. */
  readonly wall: number;
  /** Messages per CPU-second of this process: what a publish costs, whatever else the machine runs. */
  readonly cpu: number;
}

async function throughput(n: number, send: (i: number) => void, flush: () => Promise<void>): Promise<Rate> {
  const started = now();
  const cpuBefore = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    send(i);
    // Let the socket drain now and then, as a real module's event loop would.
    if ((i & 0x3fff) === 0x3fff) await new Promise((resolve) => setImmediate(resolve));
  }
  await flush();
  const cpu = process.cpuUsage(cpuBefore);
  return { wall: n / ((now() - started) / 1000), cpu: n / ((cpu.user + cpu.system) / 1e6) };
}

/** One-at-a-time round trips: each send waits until its message is heard; answers the times in ms. */
async function latencies(
  samples: number,
  listen: (heard: () => void) => void,
  send: (i: number) => void,
): Promise<number[]> {
  const times: number[] = [];
  let resolveHeard: (() => void) | undefined;
  listen(() => resolveHeard?.());
  for (let i = 0; i < samples; i++) {
    const heard = new Promise<void>((resolve) => (resolveHeard = resolve));
    const started = now();
    send(i);
    await heard;
    times.push(now() - started);
  }
  return times;
}

const fmtRate = (perSecond: number): string => `${Math.round(perSecond).toLocaleString("en-US")}/s`;

runBench("events", async () => {
  const messages = envInt("MESH_BENCH_MESSAGES", 20_000);
  const rounds = envInt("MESH_BENCH_ROUNDS", 15);
  const samples = envInt("MESH_BENCH_SAMPLES", 2_000);

  const dir = await tempDir("events");
  const manifests: Record<string, string> = {};
  for (const [module, manifest] of Object.entries({
    [SOURCE]: { name: SOURCE, emits: [EVENT, RAW_EVENT] },
    [LISTENER]: { name: LISTENER, subscribes: [`${SOURCE}.${EVENT}`, `${SOURCE}.${RAW_EVENT}`] },
  })) {
    await mkdir(join(dir, module));
    manifests[module] = join(dir, module, "module.json");
    await writeFile(manifests[module], JSON.stringify(manifest));
  }
  const authority = await createAuthority();
  const server = await startNats({ config: authority.serverConfig() });
  onCleanup(() => server.stop());
  const c: Credentials = { authority, url: server.url, manifests };
  say(`nats-server on ${server.url}`);

  const emitter = await sdkBus(c, SOURCE);
  const publisher = await rawConnection(c, SOURCE);
  const payloadBytes = JSON.stringify(bodyOf(0)).length;

  // ---- throughput: each round runs every path, in an order that rotates from round to round, so
  // drift and the garbage one path leaves for the next touch all of them alike ----
  const encoded = new TextEncoder().encode(JSON.stringify(bodyOf(0)));
  const paths: { send: (i: number) => void; flush: () => Promise<void>; rates: Rate[] }[] = [
    { send: (i) => emitter.emit(EVENT, bodyOf(i)), flush: () => emitter.flush(), rates: [] },
    {
      send: (i) => publisher.publish(SUBJECT, JSON.stringify(bodyOf(i))),
      flush: () => publisher.flush(),
      rates: [],
    },
    {
      send: (i) => publisher.publish(SUBJECT, Buffer.from(JSON.stringify(bodyOf(i)))),
      flush: () => publisher.flush(),
      rates: [],
    },
    { send: () => publisher.publish(SUBJECT, encoded), flush: () => publisher.flush(), rates: [] },
  ];
  const [sdkPath, rawPath, rawBufferPath, rawBytesPath] = paths as [
    (typeof paths)[0],
    (typeof paths)[0],
    (typeof paths)[0],
    (typeof paths)[0],
  ];
  say(`throughput: ${rounds} rounds of ${messages.toLocaleString("en-US")} messages per path (one warm-up)`);
  for (let round = 0; round <= rounds; round++) {
    for (let k = 0; k < paths.length; k++) {
      const path = paths[(round + k) % paths.length] as (typeof paths)[0];
      const rate = await throughput(messages, path.send, path.flush);
      if (round > 0) path.rates.push(rate);
    }
  }
  const stats = emitter.stats();
  if (stats.emitted !== (rounds + 1) * messages || stats.denied !== 0) {
    throw new Error(
      `the SDK emitted ${stats.emitted} events with ${stats.denied} refused; expected all allowed`,
    );
  }

  // ---- end-to-end latency: emit → on() vs publish → subscription callback ----
  const listener = await sdkBus(c, LISTENER);
  const subscriber = await rawConnection(c, LISTENER);
  const sdkTimes: number[] = [];
  const rawTimes: number[] = [];
  let onSdk: (() => void) | undefined;
  let onRaw: (() => void) | undefined;
  listener.on(`${SOURCE}.${EVENT}`, () => onSdk?.());
  // The raw side parses the body too: hearing an event means reading its JSON.
  subscriber.subscribe(RAW_SUBJECT, {
    callback: (_err, msg) => {
      if (JSON.parse(msg.string()) !== null) onRaw?.();
    },
  });
  await listener.flush();
  await subscriber.flush();
  say(`latency: ${samples} one-at-a-time round trips each way, in rounds of ${Math.ceil(samples / 4)}`);
  const chunk = Math.ceil(samples / 4);
  for (let done = 0; done < samples; done += chunk) {
    sdkTimes.push(
      ...(await latencies(
        chunk,
        (heard) => (onSdk = heard),
        (i) => emitter.emit(EVENT, bodyOf(i)),
      )),
    );
    rawTimes.push(
      ...(await latencies(
        chunk,
        (heard) => (onRaw = heard),
        (i) => publisher.publish(RAW_SUBJECT, JSON.stringify(bodyOf(i))),
      )),
    );
  }
  // Anything refused, or heard twice, would be a fault in the benchmark.
  const heard = listener.stats();
  if (
    heard.delivered !== sdkTimes.length ||
    heard.handlerErrors !== 0 ||
    Object.values(heard.refused).some((n) => n !== 0)
  ) {
    throw new Error(`the SDK listener refused or failed events: ${JSON.stringify(heard)}`);
  }

  const rateOf = (p: (typeof paths)[0], k: keyof Rate): number => median(p.rates.map((r) => r[k]));
  // The SDK against the faster of the two ways to send the same JSON by hand, each a median of its rounds.
  const shareOf = (k: keyof Rate): number =>
    rateOf(sdkPath, k) / Math.max(rateOf(rawPath, k), rateOf(rawBufferPath, k));
  const sdkLat = summarize(sdkTimes);
  const rawLat = summarize(rawTimes);
  const pct = (r: number): string => `${(r * 100).toFixed(0)}%`;
  printResult(
    "events",
    [
      `emit throughput, ${payloadBytes}-byte JSON body, one publisher, median of ${rounds} rounds of ${messages.toLocaleString("en-US")}`,
      table(
        ["path", "messages/s (clock)", "SDK's share", "messages per CPU-second", "SDK's share "],
        (
          [
            ["SDK emit(name, body)", sdkPath],
            ["raw nc.publish(subject, JSON.stringify(body))", rawPath],
            ["raw nc.publish(subject, Buffer.from(JSON.stringify(body)))", rawBufferPath],
            ["raw nc.publish(subject, bytes encoded once: no JSON work)", rawBytesPath],
          ] as const
        ).map(([name, p]) => [
          name,
          fmtRate(rateOf(p, "wall")),
          p === sdkPath ? "—" : pct(rateOf(sdkPath, "wall") / rateOf(p, "wall")),
          fmtRate(rateOf(p, "cpu")),
          p === sdkPath ? "—" : pct(rateOf(sdkPath, "cpu") / rateOf(p, "cpu")),
        ]),
      ),
      `SDK against the faster raw publish of the same JSON body: ${pct(shareOf("cpu"))} by CPU time, ` +
        `${pct(shareOf("wall"))} by the clock`,
      `goal: SDK ≥ 90% of raw (judged by CPU time, which the machine's other load moves least) — ` +
        `${shareOf("cpu") >= 0.9 ? "met" : "NOT met"}`,
      "",
      `end-to-end latency, one event at a time, ${samples} samples each`,
      table(
        ["path", "p50", "p90", "p99", "max"],
        [
          [
            "SDK emit → on() handler",
            fmtMs(sdkLat.p50),
            fmtMs(sdkLat.p90),
            fmtMs(sdkLat.p99),
            fmtMs(sdkLat.max),
          ],
          [
            "raw publish → subscription callback (JSON.parse)",
            fmtMs(rawLat.p50),
            fmtMs(rawLat.p90),
            fmtMs(rawLat.p99),
            fmtMs(rawLat.max),
          ],
        ],
      ),
      `SDK / raw: p50 ${(sdkLat.p50 / rawLat.p50).toFixed(2)}×, p99 ${(sdkLat.p99 / rawLat.p99).toFixed(2)}×`,
    ].join("\n"),
  );
});
