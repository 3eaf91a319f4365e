// What the Redis provider costs over doing the same by hand, and what verifying costs.
//
// 1. N new consumers (mark user + consumer ACL user) through the adapter, one `create` after another
//    as the harness calls it, against a file of the same ACL SETUSER commands piped into one
//    `redis-cli` process (one command, one answer, as the adapter waits for each), ending with one
//    ACL SAVE. Both on the same private Redis with an ACL file, each with its own N logins; the
//    script runs in two halves around the adapter's run, so whatever drifts over the run weighs on
//    both alike. The adapter also runs once on a Redis without an ACL file, to show what its
//    ACL SAVE after every change costs.
// 2. A verification pass over M consumers with `holdsMany`: round trips and commands per consumer
//    and wall time, next to `holds` asked one consumer at a time.
//
//   node --import tsx bench/redis-provisioning.ts
//   (MESH_BENCH_CONSUMERS=200 and MESH_BENCH_VERIFY=1000 change N and M)

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
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
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  median,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
  type QuietLogger,
} from "./lib.ts";

const INSTANCE = "bench";
const never = new AbortController().signal;

/** Counts round trips (a call, or a whole pipeline or MULTI) and the commands in them, by name. */
class CountingClient implements RedisClient {
  trips = 0;
  commands = 0;
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
    return this.inner.call(command, ...args);
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

/** The ACL commands the adapter sends for a new consumer, as a person would script them. */
function rawScript(consumers: readonly Provision[]): string {
  const mark = Buffer.from(JSON.stringify({ v: 1, state: "active", derived: {} }), "utf8").toString(
    "base64url",
  );
  const lines: string[] = [];
  for (const { as, password } of consumers) {
    const hash = createHash("sha256").update(password, "utf8").digest("hex");
    lines.push(
      `ACL SETUSER _mesh:${INSTANCE}:${as} reset resetchannels ~${mark}`,
      `ACL SETUSER ${as} reset resetchannels on #${hash} ~${as}:* &${as}:* ${CONSUMER_COMMAND_RULES.join(" ")}`,
    );
  }
  lines.push("ACL SAVE");
  return `${lines.join("\n")}\n`;
}

/** Commands per consumer in `rawScript` (its one ACL SAVE aside). */
const RAW_COMMANDS = 2;

/** Pipes `script` into one `redis-cli` process as the admin; answers its wall time. */
async function runScript(server: RedisServer, dir: string, script: string): Promise<number> {
  const file = join(dir, `script-${Date.now()}.txt`);
  await writeFile(file, script, { mode: 0o600 });
  const url = new URL(server.adminUrl);
  const started = now();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(
      "redis-cli",
      [
        "-h",
        server.host,
        "-p",
        String(server.port),
        "--user",
        decodeURIComponent(url.username),
        "--no-auth-warning",
      ],
      // The password goes in the environment, not on the command line where ps would show it.
      {
        stdio: ["pipe", "pipe", "pipe"],
        env: { ...process.env, REDISCLI_AUTH: decodeURIComponent(url.password) },
      },
    );
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.on("error", reject);
    child.on("exit", (code) => {
      const refused = out.split("\n").find((line) => line.startsWith("ERR") || line.startsWith("NOPERM"));
      if (code !== 0 || refused !== undefined)
        reject(new Error(`redis-cli exited ${code}: ${refused ?? out.slice(0, 300)}`));
      else resolve();
    });
    child.stdin.end(script);
  });
  return now() - started;
}

function provisions(prefix: string, from: number, count: number): Provision[] {
  return Array.from({ length: count }, (_, i) => ({
    as: loginOf(prefix, from + i, 4),
    password: mintPassword(),
    values: {},
    derived: {},
  }));
}

function perConsumer(kinds: ReadonlyMap<string, number>, n: number): string {
  return [...kinds].map(([k, c]) => `${k} ${(c / n).toFixed(2)}`).join(", ");
}

runBench("redis-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 200);
  const m = Math.max(envInt("MESH_BENCH_VERIFY", 1000), n);
  const half = Math.floor(n / 2);
  const dir = await tempDir("redis");

  say("redis-provisioning: starting a private Redis with an ACL file, and one without");
  const server = await startRedis({ aclFile: true });
  onCleanup(() => server.stop());
  const bare = await startRedis();
  onCleanup(() => bare.stop());
  const logger = quietLogger();
  const { adapter, client } = adapterFor(server, logger);
  const bareLogger = quietLogger();
  const { adapter: bareAdapter } = adapterFor(bare, bareLogger);
  // The first call learns the server (CONFIG GET aclfile and the rules probe) once: not timed.
  await adapter.inventory();
  await bareAdapter.inventory();

  // ---- 1. provisioning ----
  const rawA = provisions("r", 0, half);
  say(`redis-provisioning: raw redis-cli script, first ${half} consumers`);
  const rawAMs = await runScript(server, dir, rawScript(rawA));

  const made = provisions("m", 0, n);
  say(`redis-provisioning: adapter, ${n} consumers one create after another`);
  client.reset();
  let t = now();
  for (const p of made) await adapter.create(p, never);
  const adapterMs = now() - t;
  const createTrips = client.trips;
  const createCommands = client.commands;
  const createKinds = new Map(client.kinds);

  const rawB = provisions("r", half, n - half);
  say(`redis-provisioning: raw redis-cli script, last ${n - half} consumers`);
  const rawBMs = await runScript(server, dir, rawScript(rawB));
  const rawMs = rawAMs + rawBMs;

  say(`redis-provisioning: adapter on the Redis without an ACL file, ${n} consumers`);
  t = now();
  for (const p of provisions("b", 0, n)) await bareAdapter.create(p, never);
  const bareMs = now() - t;

  // ---- 2. verification ----
  const extra = provisions("r", n, m - n);
  say(`redis-provisioning: ${m - n} more consumers by script, for a verification pass over ${m}`);
  await runScript(server, dir, rawScript(extra));
  const all: Provision[] = [...made, ...[...rawA, ...rawB, ...extra].slice(0, m - n)];

  say(`redis-provisioning: holdsMany over ${all.length} consumers, 5 rounds`);
  const manyMs: number[] = [];
  let manyTrips = 0;
  let manyCommands = 0;
  let held = 0;
  for (let round = 0; round < 5; round++) {
    client.reset();
    t = now();
    const answers = await adapter.holdsMany(all, never);
    manyMs.push(now() - t);
    manyTrips = client.trips;
    manyCommands = client.commands;
    held = [...answers.values()].filter((a) => a === true).length;
  }

  say(`redis-provisioning: holds one consumer at a time over ${all.length} consumers`);
  client.reset();
  t = now();
  let heldOneByOne = 0;
  for (const p of all) if (await adapter.holds(p, never)) heldOneByOne++;
  const oneMs = now() - t;
  const oneTrips = client.trips;
  const oneCommands = client.commands;

  const ratio = adapterMs / rawMs;
  printResult(
    "redis-provisioning",
    [
      `${n} new consumers (a mark user and an ACL user on ~<login>:* &<login>:*, password as its SHA-256)`,
      "Redis private server with an ACL file, the same admin for both; the adapter one create after another.",
      "",
      table(
        ["way", "wall", "per consumer", "round trips", "commands"],
        [
          [
            "adapter (create, sequential)",
            fmtMs(adapterMs),
            fmtMs(adapterMs / n),
            createTrips,
            createCommands,
          ],
          [
            "raw ACL SETUSER file piped into one redis-cli",
            fmtMs(rawMs),
            fmtMs(rawMs / n),
            RAW_COMMANDS * n + 2,
            RAW_COMMANDS * n + 2,
          ],
          ["adapter, Redis without an ACL file", fmtMs(bareMs), fmtMs(bareMs / n), "", ""],
        ],
      ),
      "",
      `ratio adapter/raw: ${fmtRatio(ratio)} (the adapter first reads the user and its mark, so that it never`,
      "touches a user it did not make and writes nothing when all is in place, writes mark and user in one",
      "MULTI, and saves the ACL file after every change so that a crash loses nothing; the script saves once)",
      `ratio adapter with/without ACL file: ${fmtRatio(adapterMs / bareMs)} (the cost of ACL SAVE after each change)`,
      `adapter per consumer: ${(createTrips / n).toFixed(2)} round trips, ${(createCommands / n).toFixed(2)} commands ` +
        `(${perConsumer(createKinds, n)}; MULTI/EXEC counted as commands)`,
      "",
      `verification over ${all.length} consumers:`,
      table(
        ["way", "wall (median)", "per consumer", "round trips", "trips per consumer", "commands", "held"],
        [
          [
            "holdsMany (one ACL LIST)",
            fmtMs(median(manyMs)),
            fmtMs(median(manyMs) / all.length),
            manyTrips,
            (manyTrips / all.length).toFixed(4),
            manyCommands,
            held,
          ],
          [
            "holds, one at a time",
            fmtMs(oneMs),
            fmtMs(oneMs / all.length),
            oneTrips,
            (oneTrips / all.length).toFixed(4),
            oneCommands,
            heldOneByOne,
          ],
        ],
      ),
      `holdsMany rounds: ${manyMs.map(fmtMs).join(", ")}`,
      `holdsMany speed-up over holds one at a time: ${fmtRatio(oneMs / median(manyMs))}`,
      logger.warnings.length + logger.errors.length > 0
        ? `adapter said: ${[...logger.errors, ...logger.warnings].slice(0, 3).join(" | ")}`
        : "adapter warnings: none (the Redis without an ACL file warned once, as it should: " +
          `${bareLogger.warnings.length} warning)`,
    ].join("\n"),
  );
  if (held !== all.length || heldOneByOne !== all.length) {
    say(`only ${held} (batched) and ${heldOneByOne} (one by one) of ${all.length} held`);
    process.exitCode = 1;
  }
});
