import assert from "node:assert/strict";
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Adapter, InventoryEntry, Logger, ProviderModule } from "@mesh/sdk";
import {
  ControlSocketInUseError,
  ProviderSettingsError,
  callControl,
  resolveProviderSettings,
  startProviderProcess,
} from "@mesh/sdk/provider";

const PASSWORD = "adm1n-S3cret/with@odd chars";
const ADMIN_URL = `memory://mesh_admin:${encodeURIComponent(PASSWORD)}@127.0.0.1:1/store`;

/** A backend in memory, enough for the harness to create, verify and list consumers. */
function memoryAdapter(options: { failWith?: string } = {}): Adapter & { closed: boolean } {
  const made = new Map<string, { password: string; state: "active" | "retired" }>();
  return {
    closed: false,
    async create(p) {
      if (options.failWith !== undefined) throw new Error(options.failWith);
      made.set(p.as, { password: p.password, state: "active" });
    },
    async holds(p) {
      const found = made.get(p.as);
      return found?.state === "active" && found.password === p.password;
    },
    async retire(as) {
      const found = made.get(as);
      if (found !== undefined) found.state = "retired";
    },
    async inventory(): Promise<InventoryEntry[]> {
      if (options.failWith !== undefined) throw new Error(options.failWith);
      return [...made].map(([as, { state }]) => ({ as, state, derived: {} }));
    },
    async delete(r) {
      made.delete(r.as);
      return { freedBytes: 0 };
    },
    async close() {
      this.closed = true;
    },
  };
}

function memoryProvider(adapter: Adapter, made: { count: number } = { count: 0 }): ProviderModule {
  return {
    name: "memory",
    interface: "memory-store",
    adminUrlEnv: "MESH_MEMORY_URL",
    adminUrlExample: "memory://mesh_admin:<password>@127.0.0.1:1/store",
    createAdapter: () => {
      made.count += 1;
      return adapter;
    },
  };
}

function collectingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(m),
    warn: (m) => lines.push(`warning: ${m}`),
    error: (m) => lines.push(`error: ${m}`),
  };
}

describe("a provider process", () => {
  let dir: string;
  let receives: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-provider-process-"));
    const secret = join(dir, "app_one.secret");
    await writeFile(secret, "consumer-password-0123456789abcdef\n", { mode: 0o600 });
    receives = join(dir, "memory-store.json");
    const given = [{ as: "app_one", secret, node: "n1", values: {}, derived: {} }];
    await writeFile(receives, JSON.stringify({ requirement: "memory-store", given }));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("runs the harness, serves its tools on the control socket, and removes the socket when stopped", async () => {
    const adapter = memoryAdapter();
    const logger = collectingLogger();
    const control = join(dir, "a.sock");
    const running = await startProviderProcess({
      provider: memoryProvider(adapter),
      receives,
      adminUrl: ADMIN_URL,
      control,
      every: 60_000,
      logger,
    });
    try {
      await running.handle.ready;
      const status = await callControl(control, { tool: "status" });
      assert.equal(status.instance, "memory", "the instance defaults to the provider's name");
      assert.deepEqual(
        status.consumers.map((c) => [c.login, c.state]),
        [["app_one", "active"]],
      );
      assert.equal((await stat(control)).mode & 0o777, 0o600);
      assert.ok(logger.lines.some((l) => l.includes(`control socket: ${control}`)));
      assert.ok(logger.lines.some((l) => l.includes(receives) && l.includes("memory-store")));
    } finally {
      await running.stop();
    }
    await assert.rejects(stat(control), { code: "ENOENT" });
    assert.equal(adapter.closed, true);
  });

  it("never says the admin URL's password, even when the backend's errors carry it", async () => {
    const adapter = memoryAdapter({ failWith: `could not connect to ${ADMIN_URL} (password ${PASSWORD})` });
    const logger = collectingLogger();
    const running = await startProviderProcess({
      provider: memoryProvider(adapter),
      receives,
      adminUrl: ADMIN_URL,
      logger,
      every: 60_000,
    });
    try {
      await running.handle.ready.catch(() => {});
    } finally {
      await running.stop();
    }
    const said = logger.lines.join("\n");
    assert.match(said, /mesh_admin:\*\*\*@127\.0\.0\.1:1/);
    assert.ok(!said.includes(PASSWORD), said);
    assert.ok(!said.includes(encodeURIComponent(PASSWORD)), said);
  });

  it("refuses a second copy on a live control socket before making its adapter", async () => {
    const control = join(dir, "b.sock");
    const first = await startProviderProcess({
      provider: memoryProvider(memoryAdapter()),
      receives,
      adminUrl: ADMIN_URL,
      control,
      every: 60_000,
      logger: collectingLogger(),
    });
    try {
      const made = { count: 0 };
      await assert.rejects(
        startProviderProcess({
          provider: memoryProvider(memoryAdapter(), made),
          receives,
          adminUrl: ADMIN_URL,
          control,
          logger: collectingLogger(),
        }),
        ControlSocketInUseError,
      );
      assert.equal(made.count, 0);
      assert.equal((await callControl(control, { tool: "status" })).instance, "memory");
    } finally {
      await first.stop();
    }
  });
});

describe("a provider's settings", () => {
  const provider = memoryProvider(memoryAdapter());

  it("come from the environment, with the provider's name as the instance and 5s / 60s as the periods", () => {
    const settings = resolveProviderSettings(provider, {
      MESH_RECEIVES: "/r.json",
      MESH_MEMORY_URL: ADMIN_URL,
    });
    assert.deepEqual(settings, {
      receives: "/r.json",
      adminUrl: ADMIN_URL,
      control: undefined,
      instance: "memory",
      every: 5_000,
      verifyEvery: 60_000,
    });
  });

  it("take a flag over its variable", () => {
    const env = {
      MESH_RECEIVES: "/env.json",
      MESH_MEMORY_URL: "memory://env",
      MESH_CONTROL: "/env.sock",
      MESH_INSTANCE: "env",
      MESH_EVERY: "1m",
      MESH_VERIFY_EVERY: "1h",
    };
    const flags = {
      receives: "/flag.json",
      adminUrl: "memory://flag",
      control: "/flag.sock",
      instance: "flag",
      every: "2s",
      verifyEvery: "30s",
    };
    assert.deepEqual(resolveProviderSettings(provider, env, flags), {
      receives: "/flag.json",
      adminUrl: "memory://flag",
      control: "/flag.sock",
      instance: "flag",
      every: 2_000,
      verifyEvery: 30_000,
    });
    assert.deepEqual(resolveProviderSettings(provider, env, {}), {
      receives: "/env.json",
      adminUrl: "memory://env",
      control: "/env.sock",
      instance: "env",
      every: 60_000,
      verifyEvery: 3_600_000,
    });
  });

  it("take the admin URL from MESH_ADMIN_URL when the agent read it from a file, the provider's own variable first", () => {
    const env = { MESH_RECEIVES: "/r.json", MESH_ADMIN_URL: "memory://from-file" };
    assert.equal(resolveProviderSettings(provider, env).adminUrl, "memory://from-file");
    assert.equal(
      resolveProviderSettings(provider, { ...env, MESH_MEMORY_URL: "memory://own" }).adminUrl,
      "memory://own",
    );
  });

  it("name every missing or bad one at once, with the flag only when there are flags", () => {
    assert.throws(
      () => resolveProviderSettings(provider, { MESH_EVERY: "5" }, {}),
      (err: unknown) => {
        assert.ok(err instanceof ProviderSettingsError);
        assert.equal(err.problems.length, 3);
        assert.match(err.message, /--receives FILE or set MESH_RECEIVES/);
        assert.match(err.message, /--admin-url URL or set MESH_MEMORY_URL/);
        assert.match(err.message, /MESH_EVERY: "5" is not a duration/);
        return true;
      },
    );
    assert.throws(
      () => resolveProviderSettings(provider, {}),
      (err: unknown) =>
        err instanceof ProviderSettingsError &&
        !err.message.includes("--") &&
        /set MESH_MEMORY_URL/.test(err.message),
    );
  });

  it("refuse an admin URL that does not parse without echoing it", () => {
    const bad = "mesh_admin:hunter2hunter2@nowhere";
    assert.throws(
      () => resolveProviderSettings(provider, { MESH_RECEIVES: "/r.json", MESH_MEMORY_URL: bad }),
      (err: unknown) =>
        err instanceof ProviderSettingsError &&
        /not a URL/.test(err.message) &&
        !err.message.includes("hunter2"),
    );
  });
});
