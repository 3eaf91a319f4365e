// What the s3 provider costs over doing the same by hand: N new consumers (a gateway user with its
// key, and its bucket) through the harness and the adapter, against a plain script making the same
// requests (GET /admin/user, GET /admin/bucket, PUT /admin/user, then CreateBucket as the consumer)
// at the same concurrency, signed the same way. Both on one private Ceph cluster, each with its own
// N logins; the script runs in two halves around the provider's run, so whatever drifts over the
// run weighs on both alike. A second script makes only the two writes, to show what the adapter's
// two reads (is the user ours? is the bucket someone else's?) cost.
//
//   node --import tsx bench/s3-provisioning.ts   (MESH_BENCH_CONSUMERS=200 to change N)

import { runProvisioner } from "@mesh/sdk";
import {
  bucketFor,
  resolveS3Config,
  S3BucketAdapter,
  SdkConsumerS3,
  SignedGatewayAdmin,
  type AdminAnswer,
  type ConsumerAnswer,
  type ConsumerS3,
  type GatewayAdmin,
  type ResolvedS3Config,
} from "@mesh/provider-s3";
import { startCeph } from "@mesh/testkit";
import {
  ContributionsFile,
  envInt,
  fmtMs,
  fmtRatio,
  loginOf,
  mintPassword,
  now,
  onCleanup,
  printResult,
  quietLogger,
  runBench,
  say,
  table,
  tempDir,
} from "./lib.ts";

const IFACE = "s3-bucket";
const CONCURRENCY = 8;
const GOAL = 1.2;

/** Counts the requests, by method and path, that go through it. */
class Counting implements GatewayAdmin, ConsumerS3 {
  readonly kinds = new Map<string, number>();
  constructor(
    private readonly admin: GatewayAdmin,
    private readonly s3: ConsumerS3,
  ) {}
  request(
    method: "GET" | "PUT" | "POST" | "DELETE",
    path: string,
    query: Readonly<Record<string, string>>,
  ): Promise<AdminAnswer> {
    this.note(`${method} ${path}`);
    return this.admin.request(method, path, query);
  }
  listBucket(bucket: string, accessKey: string, secretKey: string): Promise<ConsumerAnswer> {
    this.note("S3 ListObjectsV2");
    return this.s3.listBucket(bucket, accessKey, secretKey);
  }
  createBucket(bucket: string, accessKey: string, secretKey: string): Promise<ConsumerAnswer> {
    this.note("S3 CreateBucket");
    return this.s3.createBucket(bucket, accessKey, secretKey);
  }
  get total(): number {
    return [...this.kinds.values()].reduce((a, b) => a + b, 0);
  }
  reset(): void {
    this.kinds.clear();
  }
  private note(kind: string): void {
    this.kinds.set(kind, (this.kinds.get(kind) ?? 0) + 1);
  }
}

/** The plain script: each consumer's requests in order, `CONCURRENCY` consumers at a time. */
async function script(
  config: ResolvedS3Config,
  consumers: readonly { as: string; password: string }[],
  withReads: boolean,
): Promise<number> {
  const admin = new SignedGatewayAdmin(config);
  const s3 = new SdkConsumerS3(config);
  const started = now();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < consumers.length) {
      const { as, password } = consumers[next++] as { as: string; password: string };
      const bucket = bucketFor(as);
      if (withReads) {
        await admin.request("GET", "/admin/user", { uid: as });
        await admin.request("GET", "/admin/bucket", { bucket });
      }
      const made = await admin.request("PUT", "/admin/user", {
        uid: as,
        "display-name": `script ${as}`,
        "access-key": as,
        "secret-key": password,
        "max-buckets": "1",
        "generate-key": "false",
      });
      if (made.status !== 200) throw new Error(`PUT /admin/user ${as}: ${made.status} ${made.code}`);
      const answer = await s3.createBucket(bucket, as, password);
      if (answer !== "ok") throw new Error(`CreateBucket ${bucket}: ${JSON.stringify(answer)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return now() - started;
}

runBench("s3-provisioning", async () => {
  const n = envInt("MESH_BENCH_CONSUMERS", 200);
  const half = Math.floor(n / 2);
  say("s3-provisioning: starting a private Ceph cluster (monitor, memstore OSD, radosgw)");
  const ceph = await startCeph();
  onCleanup(() => ceph.stop());
  const config = resolveS3Config({ adminUrl: ceph.adminUrl, instance: "bench" });
  const consumers = (prefix: string, from: number, count: number): { as: string; password: string }[] =>
    Array.from({ length: count }, (_, i) => ({ as: loginOf(prefix, from + i, 4), password: mintPassword() }));

  // Warm the gateway (its first bucket creates its index pools' objects): not timed.
  await script(config, consumers("w", 0, CONCURRENCY), true);

  say(`s3-provisioning: plain script with the adapter's requests, first ${half} consumers`);
  const rawA = await script(config, consumers("r", 0, half), true);

  say(`s3-provisioning: provider (harness at concurrency ${CONCURRENCY}), ${n} consumers written at once`);
  const dir = await tempDir("s3-bench");
  const file = new ContributionsFile(dir, IFACE);
  await file.write();
  const logger = quietLogger();
  const counting = new Counting(new SignedGatewayAdmin(config), new SdkConsumerS3(config));
  const adapter = new S3BucketAdapter(counting, counting, config, logger, undefined);
  const logins = Array.from({ length: n }, (_, i) => loginOf("m", i, 4));
  const created = new Set<string>();
  let lastAt = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => (allDone = resolve));
  const handle = runProvisioner(IFACE, adapter, {
    receives: file.path,
    instance: "bench",
    concurrency: CONCURRENCY,
    logger,
    actions: {
      append(entry) {
        if (entry.action !== "created") return;
        created.add(entry.login);
        lastAt = now();
        if (created.size === logins.length) allDone();
      },
    },
  });
  onCleanup(() => handle.stop());
  await handle.ready;
  counting.reset();
  const renamedAt = await file.add(logins);
  const timeout = setTimeout(allDone, 600_000);
  await done;
  clearTimeout(timeout);
  const providerMs = lastAt - renamedAt;
  const kinds = new Map(counting.kinds);
  const requests = counting.total;
  await handle.stop();

  say(`s3-provisioning: plain script with the adapter's requests, last ${n - half} consumers`);
  const rawB = await script(config, consumers("r", half, n - half), true);
  const rawMs = rawA + rawB;
  say(`s3-provisioning: plain script with the two writes only, ${n} consumers`);
  const writesMs = await script(config, consumers("w", CONCURRENCY, n), false);

  let held = 0;
  for (const as of logins) {
    if (
      await adapter.holds(
        { as, password: file.passwordOf(as), values: {}, derived: {} },
        new AbortController().signal,
      )
    )
      held++;
  }

  const ratio = providerMs / rawMs;
  printResult(
    "s3-provisioning",
    [
      `${n} new consumers (a RADOS Gateway user whose access key is the login, and its one bucket)`,
      `private Ceph 16 cluster (one monitor, one memstore OSD, radosgw); everything at concurrency ${CONCURRENCY}.`,
      "",
      table(
        ["way", "wall", "per consumer", "requests"],
        [
          ["provider (harness + adapter)", fmtMs(providerMs), fmtMs(providerMs / n), requests],
          ["plain script, the same requests", fmtMs(rawMs), fmtMs(rawMs / n), 4 * n],
          ["plain script, the two writes only", fmtMs(writesMs), fmtMs(writesMs / n), 2 * n],
        ],
      ),
      "",
      `provider requests per consumer: ${[...kinds].map(([k, c]) => `${k} ${(c / n).toFixed(2)}`).join(", ")}`,
      `ratio provider/script (same requests): ${fmtRatio(ratio)}; goal ≤ ${GOAL}×: ${ratio <= GOAL ? "met" : "not met"}`,
      `ratio provider/script (writes only): ${fmtRatio(providerMs / writesMs)} (what the two reads before the writes cost)`,
      `held afterwards: ${held} of ${n}`,
      logger.warnings.length + logger.errors.length > 0
        ? `provider said: ${[...logger.errors, ...logger.warnings].slice(0, 3).join(" | ")}`
        : "provider warnings: none",
    ].join("\n"),
  );
  if (created.size !== n || held !== n) {
    say(`only ${created.size} created and ${held} held of ${n}`);
    process.exitCode = 1;
  }
});
