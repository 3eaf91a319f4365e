import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import { connect, PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";
import {
  BusCredentialsRefusedError,
  connectBus,
  createAuthority,
  credsFor,
  InvalidUserKeyError,
  inboxPrefix,
  inboxSubjects,
  kvReadSubjects,
  loadAuthority,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  RESPONSE_WINDOW_MS,
  type BusPermissions,
} from "@mesh/bus";
import {
  InvalidAuthoritySeedsError,
  InvalidPermissionError,
  InvalidServerOptionError,
} from "../src/authority.ts";
import { nodeSubjects } from "../src/subjects.ts";
import { EVERYTHING, recordingLogger, startBusServer, type BusServer } from "./bus-server.ts";

/** Node n1's permissions: its own subjects, its own inbox, and reading its own deliveries bucket. */
const N1: BusPermissions = {
  pub: { allow: [nodeSubjects("n1"), ...kvReadSubjects(nodeDeliveriesBucket("n1"))] },
  sub: { allow: [nodeSubjects("n1"), inboxSubjects("n1")] },
};

void describe("decentralized authentication against a real nats-server", () => {
  let bus: BusServer;
  let controller: NatsConnection;
  before(async () => {
    bus = await startBusServer();
    controller = await bus.connectAs("controller", EVERYTHING);
  });
  after(async () => {
    await bus.stop();
  });

  void it("writes a server config with the operator and preloaded accounts and no authorization block", () => {
    const config = bus.authority.serverConfig({ port: 4333, storeDir: "/tmp/x y" });
    assert.match(config, /^operator: eyJ/m);
    assert.match(config, /^resolver: MEMORY$/m);
    assert.ok(config.includes(`${bus.authority.accountPublicKey}: eyJ`));
    assert.ok(config.includes(`system_account: ${bus.authority.systemPublicKey}`));
    assert.ok(config.includes('jetstream { store_dir: "/tmp/x y" }'));
    assert.doesNotMatch(config, /^\s*authorization/m);
    assert.throws(() => bus.authority.serverConfig({ storeDir: 'a"\n}' }), InvalidServerOptionError);
  });

  void it("refuses a connection that brings no credentials", async () => {
    await assert.rejects(connect({ servers: bus.server.url, reconnect: false }), /Authorization Violation/);
  });

  void it("refuses credentials issued by another mesh's authority, in plain words", async () => {
    const stranger = await createAuthority();
    const keys = newUserKeys();
    const jwt = await stranger.issueUser({ name: "n1", publicKey: keys.publicKey, permissions: EVERYTHING });
    await assert.rejects(
      connectBus({ servers: bus.server.url, creds: credsFor(jwt, keys.seed), name: "n1" }),
      (err: unknown) => {
        assert.ok(err instanceof BusCredentialsRefusedError);
        assert.match(err.message, /refused n1's credentials/);
        assert.match(err.message, /enroll again/);
        return true;
      },
    );
  });

  void it("refuses credentials that have expired", async () => {
    const keys = newUserKeys();
    const jwt = await bus.authority.issueUser({
      name: "n1",
      publicKey: keys.publicKey,
      permissions: EVERYTHING,
      expiresAt: new Date(Date.now() - 60_000),
    });
    await assert.rejects(
      connectBus({ servers: bus.server.url, creds: credsFor(jwt, keys.seed), name: "n1" }),
      BusCredentialsRefusedError,
    );
  });

  void it("lets a user that may answer requests answer one, within a window the server bounds", async () => {
    const service: BusPermissions = { pub: { allow: [] }, sub: { allow: ["svc.ask"] }, allowResponses: true };
    const keys = newUserKeys();
    const jwt = await bus.authority.issueUser({
      name: "svc",
      publicKey: keys.publicKey,
      permissions: service,
    });
    // What the server is told: one answer per request, and the reply subject forgotten after the
    // window (nanoseconds). With no window it would keep every reply subject the user was handed,
    // a JetStream message's included, and scan them all on each message once past a few thousand.
    const claims = JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString()) as {
      nats: { resp?: { max: number; ttl: number } };
    };
    assert.deepEqual(claims.nats.resp, { max: 1, ttl: RESPONSE_WINDOW_MS * 1_000_000 });

    const svc = await connectBus({ servers: bus.server.url, creds: credsFor(jwt, keys.seed), name: "svc" });
    try {
      svc.subscribe("svc.ask", {
        callback: (_err, msg) => {
          msg.respond("answered");
        },
      });
      await svc.flush();
      const reply = await controller.request("svc.ask", "?", { timeout: 5_000 });
      assert.equal(reply.string(), "answered");
    } finally {
      await svc.close();
    }
  });

  void it("lets a node publish under its own subjects and refuses another node's, saying so", async () => {
    const log = recordingLogger();
    const n1 = await bus.connectAs("n1", N1, { inboxPrefix: inboxPrefix("n1"), log });
    const errors: Error[] = [];
    void (async () => {
      for await (const status of n1.status()) if (status.type === "error") errors.push(status.error);
    })();

    const seen: string[] = [];
    const watcher = controller.subscribe("mesh.node.>", {
      callback: (_err, msg) => {
        seen.push(msg.subject);
      },
    });
    await controller.flush();
    n1.publish("mesh.node.n1.report", "ok");
    n1.publish("mesh.node.n2.x", "not mine");
    n1.publish("mesh.node.n1.after", "ok");
    await n1.flush();

    await until("n1's own publish to arrive", () => seen.includes("mesh.node.n1.after"));
    await until("the server's permission error", () => errors.length > 0);
    watcher.unsubscribe();
    assert.deepEqual(seen, ["mesh.node.n1.report", "mesh.node.n1.after"]);
    const refusal = errors[0];
    assert.ok(refusal instanceof PermissionViolationError);
    assert.equal(refusal.operation, "publish");
    assert.equal(refusal.subject, "mesh.node.n2.x");
    await until("the refusal in words", () => log.lines.some((l) => l.includes("mesh.node.n2.x")));
    assert.ok(
      log.lines.includes(
        'warn: the bus refused to let n1 publish to "mesh.node.n2.x": its credentials do not allow it ' +
          "(the controller derives them; declare it where the controller reads it, or use a subject it allows)",
      ),
      log.lines.join("\n"),
    );
    assert.equal(n1.isClosed(), false, "a refused publish does not close the connection");
  });

  void it("refuses a subscription outside a node's permissions and keeps the connection", async () => {
    const n1 = await bus.connectAs("n1", N1, { inboxPrefix: inboxPrefix("n1") });
    const sub = n1.subscribe("mesh.node.n2.>");
    const closed = await sub.closed;
    assert.ok(closed instanceof PermissionViolationError, String(closed));
    assert.equal(closed.operation, "subscription");
    assert.equal(closed.subject, "mesh.node.n2.>");

    const everything = n1.subscribe(">");
    assert.ok((await everything.closed) instanceof PermissionViolationError);
    const others = n1.subscribe(inboxSubjects("n2"));
    assert.ok((await others.closed) instanceof PermissionViolationError);
    assert.equal(n1.isClosed(), false);
  });

  void it("an empty allow list allows nothing rather than everything", async () => {
    const log = recordingLogger();
    const mute = await bus.connectAs(
      "mute",
      { pub: { allow: [] }, sub: { allow: [inboxSubjects("mute")] } },
      {
        inboxPrefix: inboxPrefix("mute"),
        log,
      },
    );
    mute.publish("anything.at.all", "x");
    await mute.flush();
    await until("the refusal", () => log.lines.some((l) => l.includes('publish to "anything.at.all"')));
  });

  void it("lets a node read its own KV bucket under JWT auth and refuses another node's", async () => {
    const own = await openState<{ sealed: string }>(controller, nodeDeliveriesBucket("n1"));
    await own.put("postgres-database", { sealed: "box-for-n1" });
    const other = await openState<{ sealed: string }>(controller, nodeDeliveriesBucket("n2"));
    await other.put("postgres-database", { sealed: "box-for-n2" });

    const n1 = await bus.connectAs("n1", N1, { inboxPrefix: inboxPrefix("n1") });
    const mine = await openState<{ sealed: string }>(n1, nodeDeliveriesBucket("n1"), { create: false });
    assert.deepEqual(await mine.get("postgres-database"), { sealed: "box-for-n1" });
    assert.deepEqual(await mine.keys(), ["postgres-database"]);
    const watch = await mine.watch();
    for await (const change of watch) {
      assert.deepEqual(change, {
        operation: "put",
        key: "postgres-database",
        revision: 1,
        value: { sealed: "box-for-n1" },
      });
      break;
    }
    watch.stop();

    // Opening binds without asking the server; every read is where the server says no.
    const theirs = await openState<{ sealed: string }>(n1, nodeDeliveriesBucket("n2"), { create: false });
    await assert.rejects(theirs.get("postgres-database"), /Permissions Violation/);
    await assert.rejects(theirs.keys(), /Permissions Violation/);
    await assert.rejects(mine.put("postgres-database", { sealed: "forged" }), /Permissions Violation/);
    assert.deepEqual(await own.get("postgres-database"), { sealed: "box-for-n1" });
  });

  void it("a reloaded authority issues credentials the running server still accepts", async () => {
    const again = await loadAuthority(bus.authority.exportSeeds());
    assert.equal(again.accountPublicKey, bus.authority.accountPublicKey);
    assert.equal(again.operatorPublicKey, bus.authority.operatorPublicKey);
    assert.equal(JSON.stringify(again).includes(bus.authority.exportSeeds().account), false);
    const keys = newUserKeys();
    const jwt = await again.issueUser({ name: "n3", publicKey: keys.publicKey, permissions: N1 });
    const nc = await connectBus({ servers: bus.server.url, creds: credsFor(jwt, keys.seed), name: "n3" });
    await nc.close();
  });

  void it("a revoked credential stops working after a config reload, with no restart", async () => {
    const log = recordingLogger();
    const keys = newUserKeys();
    const jwt = await bus.authority.issueUser({ name: "gone", publicKey: keys.publicKey, permissions: N1 });
    const doomed = await connectBus({
      servers: bus.server.url,
      creds: credsFor(jwt, keys.seed),
      name: "gone",
      log,
    });
    const bystander = await bus.connectAs("n1", N1, { inboxPrefix: inboxPrefix("n1") });

    await bus.authority.revokeUser(keys.publicKey);
    assert.ok(keys.publicKey in bus.authority.revocations);
    await bus.server.reload(bus.authority.serverConfig());

    await until("the revoked connection to be closed", () => doomed.isClosed(), 60);
    await until("the error", () =>
      log.lines.some((l) => l.startsWith("error: gone's bus connection closed")),
    );
    await assert.rejects(
      connectBus({ servers: bus.server.url, creds: credsFor(jwt, keys.seed), name: "gone" }),
      BusCredentialsRefusedError,
    );
    await bystander.flush();
    assert.equal(bystander.isClosed(), false, "other users keep their connections");

    const fresh = newUserKeys();
    const replacement = await bus.authority.issueUser({
      name: "gone",
      publicKey: fresh.publicKey,
      permissions: N1,
    });
    const back = await connectBus({
      servers: bus.server.url,
      creds: credsFor(replacement, fresh.seed),
      name: "gone",
    });
    await back.close();

    const reloaded = await loadAuthority(bus.authority.exportSeeds(), bus.authority.revocations);
    assert.equal(reloaded.accountJwt.length > 0, true);
    assert.deepEqual(reloaded.revocations, bus.authority.revocations);
  });

  void it("refuses bad seeds, keys that are not user keys, and permissions that are not subjects", async () => {
    const seeds = bus.authority.exportSeeds();
    await assert.rejects(loadAuthority({ ...seeds, operator: seeds.account }), InvalidAuthoritySeedsError);
    await assert.rejects(loadAuthority({ ...seeds, account: "SAnot-a-seed" }), InvalidAuthoritySeedsError);
    await assert.rejects(
      bus.authority.issueUser({ name: "x", publicKey: bus.authority.accountPublicKey, permissions: N1 }),
      InvalidUserKeyError,
    );
    await assert.rejects(
      bus.authority.issueUser({ name: "x", publicKey: "Unope", permissions: N1 }),
      InvalidUserKeyError,
    );
    const { publicKey } = newUserKeys();
    for (const bad of ["mesh..x", "mesh.>.x", "mesh.node n1", "", "mesh.*x"]) {
      await assert.rejects(
        bus.authority.issueUser({
          name: "x",
          publicKey,
          permissions: { pub: { allow: [bad] }, sub: { allow: [] } },
        }),
        InvalidPermissionError,
        bad,
      );
    }
  });
});
