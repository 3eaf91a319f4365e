// What the Redis provider costs over doing the same by hand, and what verifying costs, both on the
// harness's own path.
//
// 1. N new consumers (mark user + consumer ACL user) through the harness (watching, 8 creates at
//    once) and the adapter, timed from the contributions file's rename until the pass that made
//    them has ended (its one ACL SAVE included), against a plain script sending the same
//    ACL SETUSER commands at the same concurrency (8 consumers in flight on one connection) and one
//    ACL SAVE at the end. Both on the same private Redis with an ACL file, each with its own N
//    logins; the script runs in two halves around the harness, so whatever drifts weighs on both.
//    Goal: harness ≤ 1.5× the script.
// 2. The harness's own verify passes over the N consumers, counted by the server itself
//    (CONFIG RESETSTAT, then INFO commandstats) and by a wrapper round the adapter's client.
//    Goal: ≤ 0.01 round trips per consumer per pass.
//
//   node --import tsx bench/redis-provisioning.ts   (MESH_BENCH_CONSUMERS=1000 changes N)

import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import type { Provision } from "@mesh/sdk";
import {
  CONSUMER_COMMAND_RULES,
  RedisNamespaceAdapter,
  resolveRedisConfig,
  type RedisBatch,
  type RedisClient,
} from "@mesh/provider-redis";
import { startRedis, type RedisServer } from "@mesh/testkit";
import {
  ContributionsFile,
  eachLimited,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  median,
  mintPassword,
  now,
  onCleanup,
  printResult,
  provisionThroughHarness,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
  verdict,
  VerifyingHarness,
  type QuietLogger,
} from "./lib.ts";

const INSTANCE = "bench";

/** Counts round trips (a call, or a whole pipeline or MULTI) and the commands in them, by name. */
class CountingClient implements RedisClient {
  trips = 0;
  commands = 0;
  /** Milliseconds the ACL SAVEs took, summed. */
  saveMs = 0;
  readonly kinds = new Map<string, number>();
  constructor(private readonly inner: Redis) {}
  get status(): string {
    return this.inner.status;
  }
  connect(): Promise<void> {
    return this.inner.connect();
  }
  call(command: string, ...args: (string | number)[]): Promise<unknown> {
    this.trips++;
    this.note(command, args);
    const answer = this.inner.call(command, ...args);
    if (command.toUpperCase() === "ACL" && String(args[0]).toUpperCase() === "SAVE") {
      const started = now();
      void answer.finally(() => (this.saveMs += now() - started)).catch(() => {});
    }
    return answer;
  }
  pipeline(): RedisBatch {
    return this.batch(this.inner.pipeline(), false);
  }
  multi(): RedisBatch {
    return this.batch(this.inner.multi(), true);
  }
  duplicate(): RedisClient {
    return this.inner.duplicate();
  }
  quit(): Promise<unknown> {
    return this.inner.quit();
  }
  disconnect(): void {
    this.inner.disconnect();
  }
  on(event: "error" | "ready" | "end", listener: (err: Error) => void): unknown {
    return this.inner.on(event, listener);
  }
  reset(): void {
    this.trips = 0;
    this.commands = 0;
    this.saveMs = 0;
    this.kinds.clear();
  }
  private note(command: string, args: readonly (string | number)[]): void {
    this.commands++;
    const kind =
      command.toUpperCase() === "ACL" ? `ACL ${String(args[0]).toUpperCase()}` : command.toUpperCase();
    this.kinds.set(kind, (this.kinds.get(kind) ?? 0) + 1);
  }
  private batch(inner: ReturnType<Redis["pipeline"]>, transaction: boolean): RedisBatch {
    const wrapped: RedisBatch = {
      call: (command, ...args) => {
        this.note(command, args);
        inner.call(command, ...args);
        return wrapped;
      },
      exec: () => {
        this.trips++;
        if (transaction) this.commands += 2; // MULTI and EXEC
        return inner.exec();
      },
    };
    return wrapped;
  }
}

function adapterFor(
  server: RedisServer,
  logger: QuietLogger,
): { adapter: RedisNamespaceAdapter; client: CountingClient } {
  const config = resolveRedisConfig({ adminUrl: server.adminUrl, instance: INSTANCE });
  const client = new CountingClient(
    new Redis(config.admin.text, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 }),
  );
  const adapter = new RedisNamespaceAdapter(client, config, logger);
  onCleanup(() => adapter.close());
  return { adapter, client };
}

const IFACE = "redis-namespace";
const CONCURRENCY = 8;
const GOAL = 1.5;
const VERIFY_GOAL = 0.01;
const VERIFY_PASSES = 5;

/**
 * The plain script: for each consumer the two ACL SETUSER commands the adapter writes (mark, then
 * user), `CONCURRENCY` consumers in flight on one connection, then one ACL SAVE. Answers its wall time.
 */
async function rawRun(
  server: RedisServer,
  consumers: readonly Provision[],
): Promise<{ ms: number; saveMs: number }> {
  const client = new Redis(server.adminUrl, { lazyConnect: true });
  client.on("error", () => {});
  await client.connect();
  const mark = Buffer.from(JSON.stringify({ v: 1, state: "active", derived: {} }), "utf8").toString(
    "base64url",
  );
  try {
    const started = now();
    await eachLimited(consumers, CONCURRENCY, async ({ as, password }) => {
      const hash = createHash("sha256").update(password, "utf8").digest("hex");
      await client.call("ACL", "SETUSER", `_mesh:${INSTANCE}:${as}`, "reset", "resetchannels", `~${mark}`);
      await client.call(
        "ACL",
        "SETUSER",
        as,
        "reset",
        "resetchannels",
        "on",
        `#${hash}`,
        `~${as}:*`,
        `&${as}:*`,
        ...CONSUMER_COMMAND_RULES,
      );
    });
    const saveAt = now();
    await client.call("ACL", "SAVE");
    return { ms: now() - started, saveMs: now() - saveAt };
  } finally {
    client.disconnect();
  }
}

/** Commands per consumer in the plain script (its one ACL SAVE aside). */
const RAW_COMMANDS = 2;

/** What the server itself counted since the last CONFIG RESETSTAT (INFO commandstats), by command. */
async function serverCommands(admin: Redis): Promise<Map<string, number>> {
  const info = String(await admin.call("INFO", "commandstats"));
  const counts = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) counts.set(m[1] as string, Number(m[2]));
  // The admin's own INFO and CONFIG RESETSTAT are the bench's, not the harness's.
  counts.delete("info");
  counts.delete("config|resetstat");
  counts.delete("config");
  return counts;
}

const sum = (m: ReadonlyMap<string, number>): number => [...m.values()].reduce((a, b) => a + b, 0);

function perConsumer(kinds: ReadonlyMap<string, number>, n: number): string {
  return [...kinds].map(([k, c]) => `${k} ${(c / n).toFixed(3)}`).join(", ");
}

runBench("redis-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 1000);
  const half = Math.floor(n / 2);
  const provisions = (prefix: string, from: number, count: number): Provision[] =>
    Array.from({ length: count }, (_, i) => ({
      as: loginOf(prefix, from + i, 4),
      password: mintPassword(),
      values: {},
      derived: {},
    }));

  say("redis-provisioning: starting a private Redis with an ACL file");
  const server = await startRedis({ aclFile: true });
  onCleanup(() => server.stop());
  const admin = new Redis(server.adminUrl, { lazyConnect: true });
  admin.on("error", () => {});
  await admin.connect();
  onCleanup(() => admin.disconnect());

  // ---- 1. provisioning ----
  // Warm the server and both paths (not timed).
  await rawRun(server, provisions("w", 0, CONCURRENCY));
  say(`redis-provisioning: plain script at concurrency ${CONCURRENCY}, first ${half} consumers`);
  const rawA = await rawRun(server, provisions("r", 0, half));

  say(`redis-provisioning: harness + adapter (concurrency ${CONCURRENCY}), ${n} consumers written at once`);
  const logger = quietLogger();
  const { adapter, client } = adapterFor(server, logger);
  const logins = Array.from({ length: n }, (_, i) => loginOf("m", i, 4));
  const run = await provisionThroughHarness({
    iface: IFACE,
    adapter,
    instance: INSTANCE,
    logins,
    concurrency: CONCURRENCY,
    beforeChange: () => client.reset(),
  });
  const createTrips = client.trips;
  const createCommands = client.commands;
  const createKinds = new Map(client.kinds);

  say(`redis-provisioning: plain script at concurrency ${CONCURRENCY}, last ${n - half} consumers`);
  const rawB = await rawRun(server, provisions("r", half, n - half));
  const rawMs = rawA.ms + rawB.ms;
  const createSaveMs = client.saveMs;

  // ---- 2. verification through the harness's own pass ----
  say(`redis-provisioning: the harness's verify passes over ${n} consumers, ${VERIFY_PASSES} of them`);
  const dir = await tempDir("redis-verify");
  const file = new ContributionsFile(dir, IFACE, { sync: false });
  await file.add(Array.from({ length: n }, (_, i) => loginOf("v", i, 4)));
  const verifyLogger = quietLogger();
  const verifying = adapterFor(server, verifyLogger);
  const harness = new VerifyingHarness(IFACE, verifying.adapter, file, `${INSTANCE}-v`);
  await harness.start();
  const passMs: number[] = [];
  const trips: number[] = [];
  const seen: number[] = [];
  let lastKinds = new Map<string, number>();
  let held = 0;
  for (let pass = 0; pass < VERIFY_PASSES; pass++) {
    await admin.call("CONFIG", "RESETSTAT");
    verifying.client.reset();
    const result = await harness.verifyPass();
    lastKinds = await serverCommands(admin);
    passMs.push(result.ms);
    trips.push(verifying.client.trips);
    seen.push(sum(lastKinds));
    held = result.held;
  }
  await harness.stop();
  const tripsPer = median(trips) / n;
  const seenPer = median(seen) / n;

  const ratio = run.wallMs / rawMs;
  printResult(
    "redis-provisioning",
    [
      `${n} new consumers (a mark user and an ACL user on ~<login>:* &<login>:*, password as its SHA-256)`,
      `private Redis with an ACL file, the same admin for both; everything at concurrency ${CONCURRENCY}.`,
      "",
      table(
        ["way", "wall", "per consumer", "round trips", "commands", "ACL SAVE"],
        [
          [
            "harness + adapter (rename → pass ended)",
            fmtMs(run.wallMs),
            fmtMs(run.wallMs / n),
            createTrips,
            createCommands,
            createKinds.get("ACL SAVE") ?? 0,
          ],
          [
            "plain script, the same ACL SETUSERs",
            fmtMs(rawMs),
            fmtMs(rawMs / n),
            RAW_COMMANDS * n + 1,
            RAW_COMMANDS * n + 1,
            1,
          ],
        ],
      ),
      "",
      `ratio harness/script: ${verdict(fmtRatio(ratio), `≤ ${GOAL}×`, ratio <= GOAL)}`,
      `(rename → last created: ${fmtMs(run.lastCreatedMs)}; the rest is the end of the pass, its one ACL SAVE ` +
        `${fmtMs(createSaveMs)}; the script's two ACL SAVEs took ${fmtMs(rawA.saveMs + rawB.saveMs)})`,
      `adapter per consumer: ${(createTrips / n).toFixed(2)} round trips, ${(createCommands / n).toFixed(2)} commands ` +
        `(${perConsumer(createKinds, n)}; MULTI/EXEC counted as commands): a login the inventory's ACL LIST`,
      "showed absent is written at once, in a transaction that reads the user and mark before writing them (one someone",
      "made meanwhile is put back and refused); any other is read first, so nothing is written when all is in place.",
      "Creates made at once leave together in one pipeline, each its own MULTI/EXEC.",
      "",
      `the harness's verify pass over ${n} consumers (median of ${VERIFY_PASSES}):`,
      table(
        ["wall", "round trips (client)", "commands (server's INFO commandstats)", "held"],
        [[fmtMs(median(passMs)), median(trips), median(seen), held]],
      ),
      `server-side commands in the last pass: ${[...lastKinds].map(([k, c]) => `${k} ${c}`).join(", ") || "none"}`,
      `round trips per consumer per verify pass: ${verdict(
        `${tripsPer.toFixed(4)} (server saw ${seenPer.toFixed(4)} commands)`,
        `≤ ${VERIFY_GOAL}`,
        tripsPer <= VERIFY_GOAL && seenPer <= VERIFY_GOAL,
      )}`,
      `verify pass times: ${passMs.map(fmtMs).join(", ")}`,
      [...run.problems, ...verifyLogger.errors].length > 0
        ? `harness said: ${[...run.problems, ...verifyLogger.errors].slice(0, 3).join(" | ")}`
        : "harness warnings: none",
    ].join("\n"),
  );
  if (run.created !== n || held !== n) {
    say(`only ${run.created} created and ${held} held of ${n}`);
    process.exitCode = 1;
  }
});
