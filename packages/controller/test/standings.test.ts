// The standings book: newest per (provider module, consumer), what it refuses, how it stays bounded;
// and, against a real nats-server, that only a module itself can say something in its own name.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeBus, connectBus, credsFor, newUserKeys } from "@mesh/bus";
import { type Controller } from "@mesh/controller";
import { StandingsBook, STANDINGS_SUBJECT, standingsSender } from "../src/standings-book.ts";
import { type FailingStatus } from "../src/controller-status.ts";
import { compilePermissions, eventSubject, loadManifest } from "@mesh/manifest";
import { until } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import type { FleetDir } from "./fleet-dir.ts";
import {
  recordingLogger,
  startFleetMesh,
  type FleetMesh,
  type RecordingLogger,
  type TestMesh,
} from "./test-mesh.ts";

const encode = (body: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(body));
const FAILING = "mesh.events.postgres.provisioner.failing";
const RECOVERED = "mesh.events.postgres.provisioner.recovered";

/** A failing body as the sdk's harness announces it, said at `at`. */
function failing(
  consumer: string,
  at: string,
  change: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    provider: "postgres-database",
    instance: "postgres",
    "provider-node": "node-a",
    consumer,
    node: "node-b",
    class: "credentials-rejected",
    error: 'password authentication failed for user "mesh_admin"',
    since: "2026-01-01T10:00:00.000Z",
    attempts: 61,
    at,
    ...change,
  };
}

function recovered(consumer: string, at: string | undefined, why?: string): Record<string, unknown> {
  return {
    provider: "postgres-database",
    instance: "postgres",
    "provider-node": "node-a",
    consumer,
    ...(at === undefined ? {} : { at }),
    ...(why === undefined ? {} : { why }),
  };
}

/** A book whose clock reads `now` (ms), later than every time these tests send. */
function bookAt(now = Date.parse("2026-01-02T00:00:00Z"), maxEntries?: number) {
  const log = recordingLogger();
  const book = new StandingsBook({ logger: log, now: () => now, ...(maxEntries ? { maxEntries } : {}) });
  return { book, log };
}

describe("the standings book", () => {
  it("keeps a failing consumer under the module the subject names, never the one the body names", () => {
    const { book } = bookAt();
    const body = failing("app1_postgres", "2026-01-01T10:05:00Z", { instance: "redis" });
    assert.equal(book.take("mesh.events.postgres.provisioner.failing", encode(body)), "failing");
    const [s] = book.failing();
    assert.equal(s?.provider, "postgres");
    assert.equal(s?.interface, "postgres-database");
    assert.equal(s?.login, "app1_postgres");
    assert.equal(s?.node, "node-b");
    assert.equal(s?.class, "credentials-rejected");
    assert.equal(s?.since, "2026-01-01T10:00:00.000Z");
    assert.equal(s?.attempts, 61);
    assert.equal(s?.at, "2026-01-01T10:05:00.000Z");
    assert.match(s?.error ?? "", /password authentication failed/);
  });

  it("masks the password of a URL a driver wrote into the error, once, as it takes the standing in", () => {
    const { book } = bookAt();
    const error = "connect ECONNREFUSED postgres://mesh_admin:Hunter2-secret@db:5432/postgres";
    const body = failing("app1_postgres", "2026-01-01T10:05:00Z", { error });
    assert.equal(book.take("mesh.events.postgres.provisioner.failing", encode(body)), "failing");
    const kept = JSON.stringify(book.failing());
    assert.ok(!kept.includes("Hunter2-secret"), kept);
    assert.match(kept, /postgres:\/\/mesh_admin:\*\*\*@db:5432/);
  });

  it("the newest word wins: an older message arriving late changes nothing", () => {
    const { book } = bookAt();
    book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T10:20:00Z", { attempts: 200 })));
    assert.equal(
      book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T10:05:00Z", { attempts: 61 }))),
      "stale",
    );
    assert.equal(book.failing()[0]?.attempts, 200);
    assert.equal(book.take(RECOVERED, encode(recovered("app1_postgres", "2026-01-01T10:10:00Z"))), "stale");
    assert.equal(book.failing().length, 1, "a recovery older than the failure does not clear it");
    assert.equal(book.stats().stale, 2);
  });

  it("a recovery clears a failure, and a failure said before it does not bring it back", () => {
    const { book } = bookAt();
    book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T10:05:00Z")));
    assert.equal(
      book.take(RECOVERED, encode(recovered("app1_postgres", "2026-01-01T10:30:00Z"))),
      "recovered",
    );
    assert.deepEqual(book.failing(), []);
    assert.equal(book.recovery("postgres", "app1_postgres")?.at, "2026-01-01T10:30:00.000Z");
    assert.equal(book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T10:20:00Z"))), "stale");
    assert.deepEqual(book.failing(), []);
    // A new run of failures after the recovery is news.
    assert.equal(book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T11:00:00Z"))), "failing");
    assert.equal(book.failing().length, 1);
  });

  it("a message without a time of its own counts from when it was heard", () => {
    let now = Date.parse("2026-01-01T12:00:00Z");
    const book = new StandingsBook({ logger: recordingLogger(), now: () => now });
    book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T11:59:00Z")));
    now += 1_000;
    assert.equal(
      book.take(RECOVERED, encode(recovered("app1_postgres", undefined, "first-success"))),
      "recovered",
    );
    assert.equal(book.recovery("postgres", "app1_postgres")?.why, "first-success");
    assert.deepEqual(book.failing(), []);
  });

  it("a time ahead of the controller's clock is taken as when it was heard, so it cannot pin a standing", () => {
    let now = Date.parse("2026-01-01T12:00:00Z");
    const book = new StandingsBook({ logger: recordingLogger(), now: () => now });
    book.take(FAILING, encode(failing("app1_postgres", "2027-06-01T00:00:00Z")));
    assert.equal(book.failing()[0]?.at, "2026-01-01T12:00:00.000Z");
    now += 60_000;
    assert.equal(
      book.take(RECOVERED, encode(recovered("app1_postgres", "2026-01-01T12:00:30Z"))),
      "recovered",
    );
  });

  it("standings of one consumer from two providers are kept apart", () => {
    const { book } = bookAt();
    book.take(FAILING, encode(failing("app2_x", "2026-01-01T10:05:00Z")));
    book.take("mesh.events.redis.provisioner.failing", encode(failing("app2_x", "2026-01-01T10:05:00Z")));
    book.take(RECOVERED, encode(recovered("app2_x", "2026-01-01T10:06:00Z")));
    assert.deepEqual(
      book.failing().map((s) => s.provider),
      ["redis"],
    );
  });

  it("refuses malformed messages, counts them, says so once per sender and never throws", () => {
    const { book, log } = bookAt();
    const bad: [string, Uint8Array][] = [
      [FAILING, new TextEncoder().encode("not json {")],
      [FAILING, encode(null)],
      [FAILING, encode([1, 2])],
      [FAILING, encode(failing("app1_postgres", "2026-01-01T10:05:00Z", { attempts: "many" }))],
      [FAILING, encode(failing("app1_postgres", "yesterday"))],
      [FAILING, encode(failing("app1_postgres", "2026-01-01T10:05:00Z", { class: "Bad Class!" }))],
      [FAILING, encode({ consumer: "app1_postgres" })],
      [RECOVERED, encode({ provider: "postgres-database" })],
      [FAILING, new Uint8Array([0xff, 0xfe, 0x00])],
    ];
    for (const [subject, data] of bad) assert.equal(book.take(subject, data), "refused");
    assert.equal(book.take("mesh.events.redis.provisioner.failing", encode({ nothing: true })), "refused");
    for (const subject of [
      "mesh.events.postgres.provisioner.other",
      "mesh.events.Postgres.provisioner.failing",
      "mesh.events.postgres.failing",
      "mesh.seats.db.provisioner.failing",
    ]) {
      assert.equal(book.take(subject, encode(failing("x", "2026-01-01T10:05:00Z"))), "refused");
    }
    assert.equal(book.stats().refused, bad.length + 5);
    assert.deepEqual(book.failing(), []);
    const said = log.lines.filter((l) => /was refused/.test(l));
    assert.equal(said.filter((l) => /module postgres\b/.test(l)).length, 1, "said once for postgres");
    assert.equal(said.filter((l) => /module redis\b/.test(l)).length, 1, "said once for redis");
    assert.match(said[0] ?? "", /not JSON/);
  });

  it("keeps an error to one line and clips a huge one", () => {
    const { book } = bookAt();
    book.take(
      FAILING,
      encode(failing("app1_postgres", "2026-01-01T10:05:00Z", { error: `a\nb\r\n${"x".repeat(5000)}` })),
    );
    const error = book.failing()[0]?.error ?? "";
    assert.ok(!/[\r\n]/.test(error));
    assert.ok(error.length <= 1_001, `${error.length}`);
  });

  it("stays within its bound: recovered pairs go first, then the oldest failing, said once", () => {
    const { book, log } = bookAt(undefined, 3);
    book.take(FAILING, encode(failing("a1", "2026-01-01T10:01:00Z")));
    book.take(RECOVERED, encode(recovered("a2", "2026-01-01T10:02:00Z")));
    book.take(FAILING, encode(failing("a3", "2026-01-01T10:03:00Z")));
    book.take(FAILING, encode(failing("a4", "2026-01-01T10:04:00Z")));
    assert.equal(book.size, 3);
    assert.equal(book.recovery("postgres", "a2"), undefined, "the recovered one went first");
    assert.deepEqual(
      book.failing().map((s) => s.login),
      ["a1", "a3", "a4"],
    );
    book.take(FAILING, encode(failing("a5", "2026-01-01T10:05:00Z")));
    assert.deepEqual(
      book.failing().map((s) => s.login),
      ["a3", "a4", "a5"],
      "then the oldest failing one",
    );
    // A pair it holds is updated in place, dropping nothing.
    book.take(FAILING, encode(failing("a3", "2026-01-01T10:06:00Z")));
    assert.equal(book.stats().dropped, 2);
    assert.equal(log.lines.filter((l) => /at most 3 standings/.test(l)).length, 1);
  });

  it("forgets the consumers a new fleet no longer has", () => {
    const { book } = bookAt();
    book.take(FAILING, encode(failing("app1_postgres", "2026-01-01T10:05:00Z")));
    book.take(FAILING, encode(failing("gone_postgres", "2026-01-01T10:05:00Z")));
    book.take(
      "mesh.events.oldpg.provisioner.failing",
      encode(failing("app1_postgres", "2026-01-01T10:05:00Z")),
    );
    const plan = {
      instances: [
        {
          provider: "postgres",
          node: "node-a",
          interface: "postgres-database",
          consumers: [
            {
              consumer: "app1",
              consumerNode: "node-a",
              interface: "postgres-database",
              login: "app1_postgres",
              values: {},
              derived: {},
              provider: "postgres",
              providerNode: "node-a",
            },
          ],
        },
      ],
    };
    assert.equal(book.retainPlan(plan), 2);
    assert.deepEqual(
      book.failing().map((s) => `${s.provider}/${s.login}`),
      ["postgres/app1_postgres"],
    );
  });

  it("its subject covers every module's standings and nothing else", () => {
    assert.equal(STANDINGS_SUBJECT, "mesh.events.*.provisioner.*");
    assert.deepEqual(standingsSender(eventSubject("my-pg", "provisioner.recovered")), {
      module: "my-pg",
      event: "recovered",
    });
    assert.equal(standingsSender("mesh.events.pg.bucket.created"), undefined);
  });
});

describe("standings through a real nats-server", () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let controller: Controller;
  let postgres: NatsConnection;
  let postgresLog: RecordingLogger;
  let loginOf: (consumer: string, provider: string) => string;

  let setup: FleetMesh<[]> | undefined;

  before(async () => {
    setup = await startFleetMesh([]);
    ({ mesh, fleet, controller } = setup);
    loginOf = (consumer, provider) => {
      const entry = controller
        .current()
        .plan.instances.flatMap((i) => i.consumers)
        .find((c) => c.consumer === consumer && c.provider === provider);
      if (entry === undefined) throw new Error(`the test fleet has no ${consumer} of ${provider}`);
      return entry.login;
    };
    // The postgres module's own credential, compiled from its manifest as the controller issues it.
    const manifest = await loadManifest(join(fleet.dir, "postgres", "module.json"));
    const keys = newUserKeys();
    const jwt = await mesh.authority.issueUser({
      name: "postgres",
      publicKey: keys.publicKey,
      permissions: compilePermissions(manifest, "postgres", []),
    });
    postgresLog = recordingLogger();
    postgres = await connectBus({
      servers: [mesh.nats.url],
      creds: credsFor(jwt, keys.seed),
      name: "postgres",
      log: postgresLog,
    });
  });

  after(async () => {
    if (postgres) await closeBus(postgres);
    await setup?.stop();
  });

  const failingOf = (provider: string): FailingStatus[] =>
    controller.status().failing.filter((f) => f.provider === provider);

  it("a module's own credential announces its failing consumer, and mesh status's answer names it", async () => {
    const login = loginOf("app2", "postgres");
    postgres.publish(
      eventSubject("postgres", "provisioner.failing"),
      encode(failing(login, new Date().toISOString())),
    );
    await postgres.flush();
    await until("the controller to hear the standing", () => failingOf("postgres").length === 1, 30);
    const [f] = failingOf("postgres");
    assert.equal(f?.consumer, "app2", "the consumer module, looked up from the login");
    assert.equal(f?.login, login);
    assert.equal(f?.interface, "postgres-database");
    assert.equal(f?.class, "credentials-rejected");
    assert.equal(f?.attempts, 61);
    assert.equal(f?.since, "2026-01-01T10:00:00.000Z");
    assert.match(f?.error ?? "", /password authentication failed/);
  });

  it("a standing under another module's name is refused by the server, and the book never sees it", async () => {
    const redisLogin = loginOf("app3", "redis");
    postgres.publish(
      eventSubject("redis", "provisioner.failing"),
      encode(failing(redisLogin, new Date().toISOString())),
    );
    // What follows on the same connection arrives after it: once the controller has this, it has
    // had every chance to see the forged one.
    postgres.publish(
      eventSubject("postgres", "provisioner.recovered"),
      encode(recovered(loginOf("app2", "postgres"), new Date().toISOString())),
    );
    await postgres.flush();
    await until("the recovery to reach the controller", () => failingOf("postgres").length === 0, 30);
    await until(
      "the server to refuse the forged standing",
      () =>
        postgresLog.lines.some((l) =>
          /refused to let postgres publish to "mesh\.events\.redis\.provisioner\.failing"/.test(l),
        ),
      30,
    );
    assert.deepEqual(controller.status().failing, []);
    assert.ok(
      !mesh.log.lines.some((l) => /redis says/.test(l)),
      "the controller never heard redis say anything",
    );
  });

  it("the module's credential cannot listen to other modules' standings", async () => {
    postgres.subscribe(STANDINGS_SUBJECT);
    await postgres.flush();
    await until(
      "the server to refuse the subscription",
      () => postgresLog.lines.some((l) => /refused to let postgres subscribe to/.test(l)),
      30,
    );
  });
});
