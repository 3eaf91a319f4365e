// A provider announcing its standings on its own bus credential: best effort, newest per consumer,
// stamped with when it was said; and, against a real nats-server, what the controller would hear.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeBus, connectBus, createAuthority, credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { compilePermissions, loadManifest } from "@mesh/manifest";
import { type Logger, type ProviderModule } from "@mesh/sdk";
import { resolveProviderSettings, startProviderProcess } from "@mesh/sdk/provider";
import { BusAnnouncer, type StandingsBus } from "../src/bus-announcer.ts";
import { busEnvOf } from "../src/provider-settings.ts";
import { freePort, MemoryAdapter, startNats, type NatsServer, until } from "@mesh/testkit";
import type { Msg, NatsConnection } from "@nats-io/transport-node";

function collectingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(m),
    warn: (m) => lines.push(`warning: ${m}`),
    error: (m) => lines.push(`error: ${m}`),
  };
}

/** A bus that records what is emitted, and throws `fail` when set. */
function fakeBus(): StandingsBus & {
  emitted: [string, Record<string, unknown>][];
  closed: boolean;
  fail?: Error;
} {
  const bus = {
    emitted: [] as [string, Record<string, unknown>][],
    closed: false,
    fail: undefined as Error | undefined,
    emit(event: string, body: unknown) {
      if (bus.fail) throw bus.fail;
      bus.emitted.push([event, body as Record<string, unknown>]);
    },
    async close() {
      bus.closed = true;
    },
  };
  return bus;
}

describe("the bus announcer", () => {
  it("keeps what is said before the bus is there, the newest per consumer, and sends it stamped with when it was said", async () => {
    const bus = fakeBus();
    let open: (b: StandingsBus) => void = () => {};
    const announcer = new BusAnnouncer({
      connect: () => new Promise((resolve) => (open = resolve)),
      logger: collectingLogger(),
      now: () => Date.parse("2026-01-01T10:00:00Z"),
    });
    announcer.announce("provisioner.failing", { consumer: "a", attempts: 1 });
    announcer.announce("provisioner.failing", { consumer: "b", attempts: 1 });
    announcer.announce("provisioner.recovered", { consumer: "a" });
    assert.deepEqual(announcer.stats(), { sent: 0, pending: 2, dropped: 0 });
    open(bus);
    await until("the waiting standings to go out", () => bus.emitted.length === 2);
    assert.deepEqual(bus.emitted, [
      ["provisioner.failing", { consumer: "b", attempts: 1, at: "2026-01-01T10:00:00.000Z" }],
      ["provisioner.recovered", { consumer: "a", at: "2026-01-01T10:00:00.000Z" }],
    ]);
    announcer.announce("provisioner.failing", { consumer: "c", at: "2025-12-31T00:00:00.000Z" });
    assert.equal(bus.emitted.at(-1)?.[1].at, "2025-12-31T00:00:00.000Z", "a time already given is kept");
    await announcer.close();
    assert.equal(bus.closed, true);
  });

  it("keeps each of a provider's own events while the bus is not there, and sends them all in order", async () => {
    const bus = fakeBus();
    let open: (b: StandingsBus) => void = () => {};
    const announcer = new BusAnnouncer({
      connect: () => new Promise((resolve) => (open = resolve)),
      logger: collectingLogger(),
      now: () => Date.parse("2026-01-01T10:00:00Z"),
    });
    announcer.emit("bucket.created", { bucket: "a-s3", login: "a_s3" });
    announcer.emit("bucket.removed", { bucket: "a-s3", login: "a_s3" });
    open(bus);
    await until("the events to go out", () => bus.emitted.length === 2);
    assert.deepEqual(
      bus.emitted.map(([event]) => event),
      ["bucket.created", "bucket.removed"],
    );
    announcer.emit("bucket.created", { bucket: "b-s3" });
    assert.equal(bus.emitted.at(-1)?.[1].at, "2026-01-01T10:00:00.000Z");
    await announcer.close();
  });

  it("says once that the bus cannot be reached, never throws at the harness, and says once when it is back", async () => {
    const logger = collectingLogger();
    const bus = fakeBus();
    let tries = 0;
    const announcer = new BusAnnouncer({
      connect: async () => {
        tries += 1;
        if (tries < 4) throw new Error("the bus at nats://127.0.0.1:1 does not answer");
        return bus;
      },
      logger,
      retryEvery: 1,
      maxRetryEvery: 4,
    });
    announcer.announce("provisioner.failing", { consumer: "a" });
    await until("the bus to come back", () => bus.emitted.length === 1);
    assert.equal(tries, 4);
    assert.equal(logger.lines.filter((l) => /cannot announce on the bus/.test(l)).length, 1);
    assert.equal(logger.lines.filter((l) => /reachable again/.test(l)).length, 1);
    await announcer.close();
  });

  it("an emit that fails is said once per kind and never reaches the harness", async () => {
    const logger = collectingLogger();
    const bus = fakeBus();
    const announcer = new BusAnnouncer({ connect: async () => bus, logger });
    await until("connected", () => {
      announcer.announce("provisioner.recovered", { consumer: "warmup" });
      return bus.emitted.length > 0;
    });
    bus.fail = Object.assign(new Error("refused by the server"), { name: "EventRefusedError" });
    announcer.announce("provisioner.failing", { consumer: "a" });
    announcer.announce("provisioner.failing", { consumer: "b" });
    assert.equal(logger.lines.filter((l) => /was not announced: refused by the server/.test(l)).length, 1);
    await announcer.close();
  });

  it("past its bound while waiting, drops the oldest consumers' standings and says so once", async () => {
    const logger = collectingLogger();
    const announcer = new BusAnnouncer({
      connect: () => new Promise(() => {}),
      logger,
      maxPending: 2,
    });
    for (const c of ["a", "b", "c", "d"]) announcer.announce("provisioner.failing", { consumer: c });
    assert.deepEqual(announcer.stats(), { sent: 0, pending: 2, dropped: 2 });
    assert.equal(logger.lines.filter((l) => /dropped/.test(l)).length, 1);
  });

  it("is asked for only when the agent gave a bus credential and the bus's address", () => {
    assert.equal(busEnvOf({}), undefined);
    assert.equal(busEnvOf({ MESH_BUS_CREDS: "/c" }), undefined);
    assert.equal(busEnvOf({ MESH_BUS_SERVERS: "nats://h:1", MESH_BUS_CREDS: " " }), undefined);
    assert.deepEqual(
      busEnvOf({
        MESH_BUS_SERVERS: "nats://h:1",
        MESH_BUS_CREDS: "/c",
        MESH_MODULE: "pg",
        MESH_SEATS: "",
        PATH: "/bin",
      }),
      { MESH_BUS_SERVERS: "nats://h:1", MESH_BUS_CREDS: "/c", MESH_MODULE: "pg", MESH_SEATS: "" },
    );
    // The bus CA, when the bus uses TLS, goes with the rest.
    assert.equal(
      busEnvOf({ MESH_BUS_SERVERS: "tls://h:1", MESH_BUS_CREDS: "/c", MESH_BUS_CA: "/ca.pem" })?.[
        "MESH_BUS_CA"
      ],
      "/ca.pem",
    );
  });
});

describe("a provider process's standings settings", () => {
  const provider: ProviderModule = {
    name: "memory",
    interface: "memory-store",
    adminUrlEnv: "MESH_MEMORY_URL",
    adminUrlExample: "memory://u:<password>@h:1/x",
    createAdapter: () => new MemoryAdapter(),
  };
  const base = { MESH_RECEIVES: "/r.json", MESH_MEMORY_URL: "memory://u:p@h:1/x" };

  it("come from MESH_NODE, MESH_FAILING_AFTER, MESH_SAY_AGAIN_EVERY and the bus variables", () => {
    const settings = resolveProviderSettings(provider, {
      ...base,
      MESH_NODE: "node-a",
      MESH_FAILING_AFTER: "2s",
      MESH_SAY_AGAIN_EVERY: "1m",
      MESH_BUS_SERVERS: "nats://127.0.0.1:1",
      MESH_BUS_CREDS: "/state/modules/memory/bus.creds",
    });
    assert.equal(settings.node, "node-a");
    assert.equal(settings.failingAfter, 2_000);
    assert.equal(settings.sayAgainEvery, 60_000);
    assert.deepEqual(settings.bus, {
      MESH_BUS_SERVERS: "nats://127.0.0.1:1",
      MESH_BUS_CREDS: "/state/modules/memory/bus.creds",
    });
  });

  it("are absent without those variables, and a bad duration is named", () => {
    const settings = resolveProviderSettings(provider, base);
    assert.equal("bus" in settings || "failingAfter" in settings || "node" in settings, false);
    assert.throws(
      () => resolveProviderSettings(provider, { ...base, MESH_FAILING_AFTER: "soon" }),
      /MESH_FAILING_AFTER/,
    );
  });
});

const MANIFEST = { name: "store", provides: { "memory-store": { receives: "/run/mesh/memory-store.json" } } };

describe("a provider process's own secret", () => {
  it("never reaches a standing, the status report or the log, even when the backend's error carries it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-admin-secret-"));
    const admin = "admin-secret-7f3a9c";
    try {
      const secret = join(dir, "app_one.secret");
      await writeFile(secret, "consumer-password-0123456789abcdef\n", { mode: 0o600 });
      const receives = join(dir, "memory-store.json");
      const given = [{ as: "app_one", secret, node: "node-b", values: {}, derived: {} }];
      await writeFile(receives, JSON.stringify({ requirement: "memory-store", given }));
      const adapter = new MemoryAdapter("store");
      adapter.failCreate.set("app_one", new Error(`cannot connect to memory://admin:${admin}@127.0.0.1:1/x`));
      const said: [string, Record<string, unknown>][] = [];
      const logger = collectingLogger();
      const running = await startProviderProcess({
        provider: providerOf(adapter),
        receives,
        adminUrl: `memory://admin:${admin}@127.0.0.1:1/x`,
        every: 20,
        failingAfter: 1,
        sayAgainEvery: 3_600_000,
        announcer: { announce: (event, body) => said.push([event, { ...body }]) },
        logger,
      });
      try {
        await until("the failing standing", () => said.some(([event]) => event === "provisioner.failing"));
        const failing = said.find(([event]) => event === "provisioner.failing")?.[1];
        assert.match(String(failing?.["error"]), /cannot connect to memory:/);
        const everything = JSON.stringify([said, running.handle.status(), logger.lines]);
        assert.ok(!everything.includes(admin), everything);
      } finally {
        await running.stop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("a provider process announcing on a real nats-server", () => {
  let authority: BusAuthority;
  let server: NatsServer;
  let dir: string;
  let receives: string;
  let listener: NatsConnection;
  const heard: Msg[] = [];

  before(async () => {
    authority = await createAuthority();
    server = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-bus-announcer-"));
    await mkdir(join(dir, "store"));
    await writeFile(join(dir, "store", "module.json"), JSON.stringify(MANIFEST));
    const secret = join(dir, "app_one.secret");
    await writeFile(secret, "consumer-password-0123456789abcdef\n", { mode: 0o600 });
    receives = join(dir, "memory-store.json");
    const given = [{ as: "app_one", secret, node: "node-b", values: {}, derived: {} }];
    await writeFile(receives, JSON.stringify({ requirement: "memory-store", given }));
    // The module's credential, compiled from its manifest as the controller issues it.
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "store",
      publicKey: keys.publicKey,
      permissions: compilePermissions(await loadManifest(join(dir, "store", "module.json")), "store", []),
    });
    await writeFile(join(dir, "bus.creds"), credsFor(jwt, keys.seed), { mode: 0o600 });
    // What the controller would hear: every module's standings.
    const lk = newUserKeys();
    const ljwt = await authority.issueUser({
      name: "listener",
      publicKey: lk.publicKey,
      permissions: { pub: { allow: [] }, sub: { allow: ["mesh.events.*.provisioner.*"] } },
    });
    listener = await connectBus({ servers: server.url, creds: credsFor(ljwt, lk.seed), name: "listener" });
    const sub = listener.subscribe("mesh.events.*.provisioner.*");
    void (async () => {
      for await (const m of sub) heard.push(m);
    })();
    await listener.flush();
  });

  after(async () => {
    if (listener) await closeBus(listener);
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const busEnv = (servers: string) => ({
    MESH_BUS_SERVERS: servers,
    MESH_BUS_CREDS: join(dir, "bus.creds"),
    MESH_MANIFEST: join(dir, "store", "module.json"),
    MESH_SEATS: "",
    MESH_MODULE: "store",
  });

  it("a failing consumer is announced under the module's own name, and its recovery after", async () => {
    const adapter = new MemoryAdapter("store");
    adapter.failCreate.set("app_one", new Error('password authentication failed for user "admin"'));
    const logger = collectingLogger();
    const running = await startProviderProcess({
      provider: { ...providerOf(adapter), name: "store" },
      receives,
      adminUrl: "memory://admin:pw@127.0.0.1:1/x",
      instance: "store",
      node: "node-a",
      every: 20,
      failingAfter: 1,
      sayAgainEvery: 3_600_000,
      bus: busEnv(server.url),
      logger,
    });
    try {
      await until("the failing standing", () => heard.some((m) => m.subject.endsWith(".failing")));
      const failing = heard.find((m) => m.subject.endsWith(".failing"));
      assert.equal(failing?.subject, "mesh.events.store.provisioner.failing");
      const body = failing?.json<Record<string, unknown>>();
      assert.equal(body?.["consumer"], "app_one");
      assert.equal(body?.["node"], "node-b");
      assert.equal(body?.["provider"], "memory-store");
      assert.equal(body?.["provider-node"], "node-a");
      assert.equal(body?.["class"], "credentials-rejected");
      assert.equal(typeof body?.["at"], "string");
      adapter.failCreate.delete("app_one");
      await until("the recovery", () =>
        heard.some((m) => m.subject === "mesh.events.store.provisioner.recovered"),
      );
    } finally {
      await running.stop();
    }
    assert.ok(!logger.lines.some((l) => /cannot announce/.test(l)), logger.lines.join("\n"));
  });

  it("without the bus, it provisions all the same and says once that it cannot announce", async () => {
    const adapter = new MemoryAdapter("store");
    const logger = collectingLogger();
    const running = await startProviderProcess({
      provider: providerOf(adapter),
      receives,
      adminUrl: "memory://admin:pw@127.0.0.1:1/x",
      instance: "store",
      every: 20,
      bus: busEnv(`nats://127.0.0.1:${await freePort()}`),
      logger,
    });
    try {
      await running.handle.ready;
      await until("the consumer to be made", () => adapter.backend.get("app_one")?.state === "active");
      await until("the bus's absence to be said", () => logger.lines.some((l) => /cannot announce/.test(l)));
      await running.handle.pass();
      assert.equal(logger.lines.filter((l) => /cannot announce/.test(l)).length, 1);
    } finally {
      await running.stop();
    }
  });
});

function providerOf(adapter: MemoryAdapter): ProviderModule {
  return {
    name: "memory",
    interface: "memory-store",
    adminUrlEnv: "MESH_MEMORY_URL",
    adminUrlExample: "memory://u:<password>@h:1/x",
    createAdapter: () => adapter,
  };
}
