import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import type { NatsConnection } from "@nats-io/transport-node";
import { startNats, type NatsServer } from "@mesh/testkit";
import {
  ACCOUNT_UPDATER_IDENTITY,
  accountUpdaterPermissions,
  BusCredentialsRefusedError,
  connectBus,
  createAuthority,
  credsFor,
  inboxPrefix,
  loadAuthority,
  newUserKeys,
  pushAccountClaims,
  type BusAuthority,
  type BusPermissions,
} from "@mesh/bus";
import { AccountClaimsRefusedError, AccountUpdatesUnavailableError } from "../src/account-updates.ts";
import { EVERYTHING, recordingLogger, startBusServer, type BusServer } from "./bus-server.ts";

const MODULE: BusPermissions = { pub: { allow: ["mesh.events.notes.>"] }, sub: { allow: ["mesh.events.>"] } };

/** A connection of the system user that pushes account updates. */
async function connectUpdater(url: string, authority: BusAuthority): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueSystemUser({
    name: ACCOUNT_UPDATER_IDENTITY,
    publicKey: keys.publicKey,
    permissions: accountUpdaterPermissions(authority),
  });
  return connectBus({
    servers: url,
    creds: credsFor(jwt, keys.seed),
    name: ACCOUNT_UPDATER_IDENTITY,
    inboxPrefix: inboxPrefix(ACCOUNT_UPDATER_IDENTITY),
  });
}

/** A user of the mesh account, issued but not connected. */
async function issued(
  authority: BusAuthority,
  name: string,
): Promise<{ publicKey: string; creds: Uint8Array }> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({ name, publicKey: keys.publicKey, permissions: MODULE });
  return { publicKey: keys.publicKey, creds: credsFor(jwt, keys.seed) };
}

void describe("pushing the mesh account's JWT to a running nats-server", () => {
  let bus: BusServer;
  let updater: NatsConnection;
  before(async () => {
    bus = await startBusServer();
    updater = await connectUpdater(bus.server.url, bus.authority);
  });
  after(async () => {
    await updater.close();
    await bus.stop();
  });

  void it("a revoked user's connection is closed and refused, with no restart and no reload", async () => {
    const configBefore = await readFile(bus.server.configFile, "utf8");
    const log = recordingLogger();
    const victim = await issued(bus.authority, "notes");
    const doomed = await connectBus({ servers: bus.server.url, creds: victim.creds, name: "notes", log });
    const bystander = await bus.connectAs("counter", MODULE);
    const bystanderEvents: string[] = [];
    void (async () => {
      for await (const s of bystander.status()) bystanderEvents.push(s.type);
    })();

    await bus.authority.revokeUser(victim.publicKey);
    const pushed = await pushAccountClaims(updater, bus.authority);
    assert.ok(pushed.server.length > 0);

    const why = await doomed.closed();
    assert.ok(why instanceof Error, "the revoked connection is closed with the server's reason");
    assert.ok(
      log.lines.some((l) => l.startsWith("error: notes's bus connection closed") && /revoked/.test(l)),
      log.lines.join("\n"),
    );
    await assert.rejects(
      connectBus({ servers: bus.server.url, creds: victim.creds, name: "notes" }),
      BusCredentialsRefusedError,
    );

    // The same name with a new key pair is welcome.
    const replacement = await issued(bus.authority, "notes");
    const back = await connectBus({ servers: bus.server.url, creds: replacement.creds, name: "notes" });
    back.publish("mesh.events.notes.note.created", "{}");
    await back.flush();
    await back.close();

    await bystander.flush();
    assert.equal(bystander.isClosed(), false, "other users keep their connections");
    assert.deepEqual(
      bystanderEvents.filter((t) => t === "disconnect" || t === "reconnect"),
      [],
      "the server never went away",
    );
    assert.equal(await readFile(bus.server.configFile, "utf8"), configBefore, "the config was not touched");
  });

  void it("revocations given back to loadAuthority keep a restarted server refusing the key", async () => {
    const victim = await issued(bus.authority, "notes");
    await bus.authority.revokeUser(victim.publicKey);
    await pushAccountClaims(updater, bus.authority);

    const reloaded = await loadAuthority(bus.authority.exportSeeds(), bus.authority.revocations);
    await bus.server.restart({ config: reloaded.serverConfig() });
    await assert.rejects(
      connectBus({ servers: bus.server.url, creds: victim.creds, name: "notes" }),
      BusCredentialsRefusedError,
    );
    const fresh = await issued(reloaded, "notes");
    const nc = await connectBus({ servers: bus.server.url, creds: fresh.creds, name: "notes" });
    await nc.close();
    // A push on the restarted server works too (on a new connection: one still reconnecting may
    // time out, and the caller would retry).
    const again = await connectUpdater(bus.server.url, reloaded);
    try {
      await pushAccountClaims(again, reloaded);
    } finally {
      await again.close();
    }
  });

  void it("refuses to push on a connection that is not the system updater, saying which it needs", async () => {
    const meshUser = await bus.connectAs("controller", EVERYTHING);
    await assert.rejects(pushAccountClaims(meshUser, bus.authority), (err: unknown) => {
      assert.ok(err instanceof AccountUpdatesUnavailableError, String(err));
      assert.match(err.message, /nothing answers \$SYS\.REQ\.ACCOUNT\..*\.CLAIMS\.UPDATE/);
      assert.match(err.message, /issueSystemUser/);
      return true;
    });

    const keys = newUserKeys();
    const jwt = await bus.authority.issueSystemUser({
      name: "mute",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [] }, sub: { allow: [`${inboxPrefix("mute")}.>`] } },
    });
    const mute = await connectBus({
      servers: bus.server.url,
      creds: credsFor(jwt, keys.seed),
      name: "mute",
      inboxPrefix: inboxPrefix("mute"),
    });
    try {
      await assert.rejects(pushAccountClaims(mute, bus.authority), AccountUpdatesUnavailableError);
    } finally {
      await mute.close();
    }
  });

  void it("says so when the server does not know the account it is given", async () => {
    const stranger = await createAuthority();
    // Allowed to send it (the permission names the stranger's account), so the server itself answers.
    const keys = newUserKeys();
    const jwt = await bus.authority.issueSystemUser({
      name: ACCOUNT_UPDATER_IDENTITY,
      publicKey: keys.publicKey,
      permissions: accountUpdaterPermissions(stranger),
    });
    const sender = await connectBus({
      servers: bus.server.url,
      creds: credsFor(jwt, keys.seed),
      name: ACCOUNT_UPDATER_IDENTITY,
      inboxPrefix: inboxPrefix(ACCOUNT_UPDATER_IDENTITY),
    });
    try {
      await assert.rejects(pushAccountClaims(sender, stranger), (err: unknown) => {
        assert.ok(err instanceof AccountClaimsRefusedError, String(err));
        assert.equal(err.account, stranger.accountPublicKey);
        assert.match(err.message, /does not know the account/);
        assert.match(err.message, /serverConfig\(\)/);
        return true;
      });
    } finally {
      await sender.close();
    }
  });
});

void describe("a push to a server where nobody of the mesh account has connected yet", () => {
  let server: NatsServer;
  let authority: BusAuthority;
  before(async () => {
    authority = await createAuthority();
    server = await startNats({ config: authority.serverConfig() });
  });
  after(async () => {
    await server.stop();
  });

  void it("still refuses the revoked key (the server would otherwise load the account from its config)", async () => {
    const updater = await connectUpdater(server.url, authority);
    try {
      const victim = await issued(authority, "notes");
      const other = await issued(authority, "counter");
      await authority.revokeUser(victim.publicKey);
      await pushAccountClaims(updater, authority);
      await assert.rejects(
        connectBus({ servers: server.url, creds: victim.creds, name: "notes" }),
        BusCredentialsRefusedError,
      );
      const nc = await connectBus({ servers: server.url, creds: other.creds, name: "counter" });
      await nc.close();
    } finally {
      await updater.close();
    }
  });
});
