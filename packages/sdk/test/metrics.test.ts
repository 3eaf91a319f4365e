// A provider's /metrics, scraped over real HTTP and read as Prometheus reads it, while its harness
// (over a MemoryAdapter, under a FakeClock) creates, verifies, fails, retires and deletes.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type ProviderModule } from "@mesh/sdk";
import {
  ListenAddressError,
  ListenError,
  ProviderSettingsError,
  metricsUrlOf,
  metricsUrlPath,
  parseListenAddress,
  resolveProviderSettings,
  startProviderProcess,
} from "@mesh/sdk/provider";
import { ProviderMetrics, isLoopbackHost, serveMetrics, type MetricsServer } from "../src/metrics.ts";
import { MemoryAdapter, scrapeProm, type PromScrape, quietLogger } from "@mesh/testkit";
import { IFACE, makeFixture, type Fixture } from "./harness-fixture.ts";

const INSTANCE = "default";
const L = { interface: IFACE, instance: INSTANCE };

/** A fixture whose harness counts into `metrics`, served on a free loopback port. */
async function withServedFixture(
  initial: readonly string[],
  fn: (f: Fixture, scrape: () => Promise<PromScrape>) => Promise<void>,
  options: Parameters<typeof makeFixture>[0] = {},
): Promise<void> {
  const metrics = new ProviderMetrics();
  const f = await makeFixture({ ...options, metrics: metrics.observer(IFACE, INSTANCE) }, initial);
  metrics.follow(f.handle);
  const server = await serveMetrics(metrics.registry);
  try {
    await fn(f, () => scrapeProm(server.url));
  } finally {
    await server.close();
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
  }
}

function consumers(s: PromScrape, state: string): number | undefined {
  return s.value("mesh_provider_consumers", { ...L, state });
}

describe("a provider's metrics", () => {
  it("show passes, creates and consumers by state moving as the contributions change", async () => {
    await withServedFixture(
      ["alpha", "beta"],
      async (f, scrape) => {
        let s = await scrape();
        assert.equal(s.types.get("mesh_provider_passes_total"), "counter");
        assert.equal(s.types.get("mesh_provider_pass_duration_seconds"), "histogram");
        assert.equal(s.types.get("mesh_provider_consumers"), "gauge");
        assert.equal(s.value("mesh_provider_passes_total", { ...L, kind: "periodic" }), 1);
        assert.equal(s.value("mesh_provider_pass_duration_seconds_count", { ...L, kind: "periodic" }), 1);
        assert.equal(s.value("mesh_provider_creates_total", { ...L, kind: "created" }), 2);
        assert.equal(consumers(s, "active"), 2);
        for (const state of ["failing", "awaiting-approval", "unasked", "retired"]) {
          assert.equal(consumers(s, state), 0, `${state} is reported, as 0`);
        }
        assert.equal(s.value("mesh_provider_failures_total"), undefined, "nothing failed");
        assert.ok((s.value("mesh_provider_last_pass_timestamp_seconds", L) ?? 0) > 0);
        assert.equal(s.value("mesh_provider_contributions_unreadable", L), 0);
        assert.ok(s.value("process_cpu_user_seconds_total") !== undefined, "the process's own metrics too");

        await f.ask(["alpha", "beta", "gamma"]);
        await f.watchPass();
        s = await scrape();
        assert.equal(s.value("mesh_provider_passes_total", { ...L, kind: "watch" }), 1);
        assert.equal(s.value("mesh_provider_creates_total", { ...L, kind: "created" }), 3);
        assert.equal(consumers(s, "active"), 3);

        await f.ask(["alpha", "gamma"]);
        await f.periodic();
        s = await scrape();
        assert.equal(consumers(s, "active"), 2);
        assert.equal(consumers(s, "unasked"), 1);
        assert.equal(s.value("mesh_provider_retirements_total", L), 0);

        await f.periodic(4);
        s = await scrape();
        assert.equal(f.stateOf("beta"), "retired");
        assert.equal(consumers(s, "unasked"), 0);
        assert.equal(consumers(s, "retired"), 1);
        assert.equal(s.value("mesh_provider_retirements_total", { ...L, by: "provisioner" }), 1);
        assert.equal(s.value("mesh_provider_passes_total", { ...L, kind: "periodic" }), 6);

        await f.handle.cleanupDelete("beta", "ops");
        s = await scrape();
        assert.equal(s.value("mesh_provider_deletions_total", L), 1);
        assert.equal(consumers(s, "retired"), 0);
      },
      { stablePasses: 5 },
    );
  });

  it("count each verify round trip, and a consumer found not held as re-applied", async () => {
    await withServedFixture(
      ["alpha", "beta"],
      async (f, scrape) => {
        let s = await scrape();
        assert.equal(s.value("mesh_provider_verify_round_trips_total", L), 0, "nothing held yet to verify");
        await f.periodic();
        s = await scrape();
        // The MemoryAdapter has no holdsMany: one question per consumer.
        assert.equal(s.value("mesh_provider_verify_round_trips_total", L), 2);
        assert.equal(s.value("mesh_provider_verifications_total", { ...L, result: "held" }), 2);

        f.adapter.backend.delete("beta");
        await f.periodic();
        s = await scrape();
        assert.equal(s.value("mesh_provider_verify_round_trips_total", L), 4);
        assert.equal(s.value("mesh_provider_verifications_total", { ...L, result: "not-held" }), 1);
        assert.equal(s.value("mesh_provider_creates_total", { ...L, kind: "re-applied" }), 1);
      },
      { verifyEvery: 5_000 },
    );
  });

  it("count batched verification as one round trip per batch", async () => {
    const metrics = new ProviderMetrics({ processMetrics: false });
    const f = await makeFixture(
      { metrics: metrics.observer(IFACE, INSTANCE), verifyEvery: 5_000, verifyBatch: 2 },
      ["a1", "a2", "a3"],
    );
    const adapter = f.adapter as typeof f.adapter & { holdsMany?: unknown };
    try {
      adapter.holdsMany = async (ps: readonly { as: string }[]) =>
        new Map(ps.map((p) => [p.as, f.adapter.backend.has(p.as)]));
      await f.periodic();
      const server = await serveMetrics(metrics.registry);
      try {
        const s = await scrapeProm(server.url);
        assert.equal(
          s.value("mesh_provider_verify_round_trips_total", L),
          2,
          "three consumers, batches of two",
        );
        assert.equal(s.value("mesh_provider_verifications_total", { ...L, result: "held" }), 3);
        assert.equal(s.value("process_cpu_user_seconds_total"), undefined, "process metrics were not asked");
      } finally {
        await server.close();
      }
    } finally {
      await f.close();
    }
  });

  it("count a failing adapter's failures by class, and show the consumer failing", async () => {
    await withServedFixture(["alpha"], async (f, scrape) => {
      f.adapter.failCreate.set("beta", new Error('password authentication failed for user "mesh_admin"'));
      await f.ask(["alpha", "beta"]);
      await f.periodic(3);
      let s = await scrape();
      assert.equal(
        s.value("mesh_provider_failures_total", { ...L, operation: "create", class: "credentials-rejected" }),
        3,
      );
      assert.equal(consumers(s, "failing"), 1);
      assert.equal(consumers(s, "active"), 1);

      f.adapter.failCreate.delete("beta");
      f.adapter.down = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
      await f.ask(["alpha", "beta", "gamma"]);
      await f.periodic();
      s = await scrape();
      assert.ok(
        (s.value("mesh_provider_failures_total", { ...L, operation: "create", class: "unreachable" }) ?? 0) >=
          1,
      );

      f.adapter.down = undefined;
      await f.periodic();
      s = await scrape();
      assert.equal(consumers(s, "failing"), 0);
      assert.equal(consumers(s, "active"), 3);
    });
  });

  it("count an unreadable secret and an invalid login as failures of their own", async () => {
    await withServedFixture([], async (f, scrape) => {
      await f.writeRaw(
        JSON.stringify({
          requirement: IFACE,
          given: [
            { as: "nosecret", secret: `${f.dir}/missing.secret`, values: {} },
            { as: "Bad-Login", secret: `${f.dir}/x.secret`, values: {} },
          ],
        }),
      );
      await f.periodic();
      const s = await scrape();
      assert.equal(
        s.value("mesh_provider_failures_total", {
          ...L,
          operation: "read-secret",
          class: "secret-unreadable",
        }),
        1,
      );
      assert.equal(
        s.value("mesh_provider_failures_total", { ...L, operation: "validate", class: "refused" }),
        1,
      );
    });
  });

  it("say 1 while the contributions file cannot be read", async () => {
    await withServedFixture(["alpha"], async (f, scrape) => {
      await f.writeRaw("{broken");
      await f.periodic();
      assert.equal((await scrape()).value("mesh_provider_contributions_unreadable", L), 1);
    });
  });

  it("keep two providers apart on one registry, and two registries apart in one process", async () => {
    const one = new ProviderMetrics({ processMetrics: false });
    const two = new ProviderMetrics({ processMetrics: false });
    one.observer("redis-namespace", "a").created("created");
    one.observer("redis-namespace", "b").deleted();
    two.observer("redis-namespace", "a").created("re-applied");
    const [a, b] = [await one.text(), await two.text()];
    assert.match(
      a,
      /mesh_provider_creates_total\{interface="redis-namespace",instance="a",kind="created"\} 1/,
    );
    assert.match(a, /mesh_provider_deletions_total\{interface="redis-namespace",instance="b"\} 1/);
    assert.match(
      b,
      /mesh_provider_creates_total\{interface="redis-namespace",instance="a",kind="created"\} 0/,
    );
  });
});

describe("the /metrics server", () => {
  let server: MetricsServer;
  before(async () => {
    server = await serveMetrics(new ProviderMetrics({ processMetrics: false }).registry);
  });
  after(() => server.close());

  it("binds loopback by default", () => {
    assert.equal(server.host, "127.0.0.1");
    assert.ok(server.port > 0);
    assert.equal(server.url, `http://127.0.0.1:${server.port}/metrics`);
  });

  it("answers 404 for another path and 405 for another method", async () => {
    const base = `http://127.0.0.1:${server.port}`;
    assert.equal((await fetch(`${base}/`)).status, 404);
    assert.equal((await fetch(`${base}/metricsx`)).status, 404);
    const post = await fetch(server.url, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    assert.equal((await fetch(`${server.url}?name=x`)).status, 200, "a query string is ignored");
  });

  it("answers HEAD with the headers and no body", async () => {
    const res = await fetch(server.url, { method: "HEAD" });
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
    assert.equal(await res.text(), "");
  });

  it("refuses a port that is taken, naming it", async () => {
    await assert.rejects(
      serveMetrics(new ProviderMetrics({ processMetrics: false }).registry, `127.0.0.1:${server.port}`),
      (err: unknown) => err instanceof ListenError && /port is taken/.test(err.message),
    );
  });
});

describe("listen addresses", () => {
  it("read HOST:PORT, [IPv6]:PORT and a bare port", () => {
    assert.deepEqual(parseListenAddress("127.0.0.1:9464"), { host: "127.0.0.1", port: 9464 });
    assert.deepEqual(parseListenAddress("[::1]:9464"), { host: "::1", port: 9464 });
    assert.deepEqual(parseListenAddress("9464"), { host: "127.0.0.1", port: 9464 });
    assert.deepEqual(parseListenAddress(":0"), { host: "127.0.0.1", port: 0 });
    assert.deepEqual(parseListenAddress("0.0.0.0:80"), { host: "0.0.0.0", port: 80 });
    assert.deepEqual(parseListenAddress("localhost:1"), { host: "localhost", port: 1 });
  });

  for (const bad of ["", "host:", "example.com:80", "127.0.0.1:99999", "::1:80", "1.2.3.4:x"]) {
    it(`refuse ${JSON.stringify(bad)}, saying how to write it`, () => {
      assert.throws(
        () => parseListenAddress(bad),
        (err: unknown) => err instanceof ListenAddressError && /HOST:PORT/.test(err.message),
      );
    });
  }

  it("tell loopback from the rest", () => {
    for (const h of ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"]) {
      assert.ok(isLoopbackHost(h), h);
    }
    for (const h of ["0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "128.0.0.1"]) {
      assert.ok(!isLoopbackHost(h), h);
    }
  });
});

describe("a provider process's metrics", () => {
  const provider = (adapter: MemoryAdapter, made = { count: 0 }): ProviderModule => ({
    name: "memory",
    interface: IFACE,
    adminUrlEnv: "MESH_MEMORY_URL",
    adminUrlExample: "memory://mesh_admin:<password>@127.0.0.1:1/store",
    createAdapter: () => {
      made.count += 1;
      return adapter;
    },
  });
  const env = { MESH_RECEIVES: "/r.json", MESH_MEMORY_URL: "memory://mesh_admin:pw@127.0.0.1:1/store" };

  it("are served only when asked: MESH_METRICS asks, --metrics beats it", () => {
    const p = provider(new MemoryAdapter());
    assert.equal(resolveProviderSettings(p, env).metrics, undefined);
    assert.equal(
      resolveProviderSettings(p, { ...env, MESH_METRICS: "127.0.0.1:9464" }).metrics,
      "127.0.0.1:9464",
    );
    assert.equal(
      resolveProviderSettings(p, { ...env, MESH_METRICS: "127.0.0.1:9464" }, { metrics: "9465" }).metrics,
      "9465",
    );
  });

  it("refuse a bad address, naming the flag or the variable that gave it", () => {
    const p = provider(new MemoryAdapter());
    assert.throws(
      () => resolveProviderSettings(p, env, { metrics: "example.com:80" }),
      (err: unknown) => err instanceof ProviderSettingsError && /--metrics: .*HOST:PORT/.test(err.message),
    );
    assert.throws(
      () => resolveProviderSettings(p, { ...env, MESH_METRICS: "x" }),
      (err: unknown) => err instanceof ProviderSettingsError && /MESH_METRICS: /.test(err.message),
    );
  });

  it("a taken port refuses the start before the backend is touched", async () => {
    const taken = await serveMetrics(new ProviderMetrics({ processMetrics: false }).registry);
    const made = { count: 0 };
    try {
      await assert.rejects(
        startProviderProcess({
          provider: provider(new MemoryAdapter(), made),
          receives: "/nonexistent/contributions.json",
          adminUrl: env.MESH_MEMORY_URL,
          metrics: `127.0.0.1:${taken.port}`,
          logger: quietLogger,
        }),
        ListenError,
      );
      assert.equal(made.count, 0, "no adapter was made");
    } finally {
      await taken.close();
    }
  });

  it("run by the agent, say where: MESH_STATE_DIR and MESH_MODULE name the URL file", () => {
    const p = provider(new MemoryAdapter());
    const agent = { ...env, MESH_STATE_DIR: "/var/lib/mesh", MESH_MODULE: "memory" };
    assert.equal(
      resolveProviderSettings(p, { ...agent, MESH_METRICS: "127.0.0.1:0" }).metricsUrlFile,
      "/var/lib/mesh/modules/memory/home/metrics.url",
    );
    assert.equal(resolveProviderSettings(p, agent).metricsUrlFile, undefined, "no metrics, no file");
    assert.equal(
      resolveProviderSettings(p, { ...env, MESH_METRICS: "127.0.0.1:0" }).metricsUrlFile,
      undefined,
      "not run by the agent",
    );
  });

  it("write the URL really bound to the URL file once listening, and remove it on a clean stop", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-metrics-url-"));
    try {
      const receives = join(dir, "contributions.json");
      await writeFile(receives, JSON.stringify({ requirement: IFACE, given: [] }));
      const file = metricsUrlPath(dir, "memory");
      const running = await startProviderProcess({
        provider: provider(new MemoryAdapter()),
        receives,
        adminUrl: env.MESH_MEMORY_URL,
        metrics: "127.0.0.1:0",
        metricsUrlFile: file,
        logger: quietLogger,
      });
      try {
        const url = running.metrics?.url;
        assert.match(url ?? "", /^http:\/\/127\.0\.0\.1:[1-9]\d*\/metrics$/, "a real port, not 0");
        assert.equal(await readFile(file, "utf8"), `${url}\n`);
        assert.equal((await stat(file)).mode & 0o777, 0o644, "not secret");
        const scraped = await scrapeProm(url ?? "");
        const labels = { interface: IFACE, instance: "memory", state: "active" };
        assert.equal(scraped.value("mesh_provider_consumers", labels), 0, "it serves the metrics");
      } finally {
        await running.stop();
      }
      await assert.rejects(stat(file), { code: "ENOENT" });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("metrics URLs", () => {
  it("are http(s) URLs without credentials, anything else refused", () => {
    assert.equal(metricsUrlOf(" http://127.0.0.1:9464/metrics\n"), "http://127.0.0.1:9464/metrics");
    assert.equal(metricsUrlOf("https://[::1]:9464/metrics"), "https://[::1]:9464/metrics");
    for (const bad of [
      "javascript:alert(document.cookie)",
      "data:text/html,<script>alert(1)</script>",
      "ftp://127.0.0.1/metrics",
      "http://admin:pw@127.0.0.1:9464/metrics",
      "/metrics",
      `http://127.0.0.1/${"a".repeat(2100)}`,
      42,
      null,
    ]) {
      assert.equal(metricsUrlOf(bad), undefined, String(bad));
    }
  });

  it("are kept under the module's directory, for a valid module name and an absolute state directory", () => {
    assert.equal(
      metricsUrlPath("/var/lib/mesh", "postgres"),
      "/var/lib/mesh/modules/postgres/home/metrics.url",
    );
    assert.throws(() => metricsUrlPath("relative", "postgres"));
    assert.throws(() => metricsUrlPath("/var/lib/mesh", "../etc"));
  });
});
