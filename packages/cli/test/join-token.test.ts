// `mesh join-token` against a real nats-server and controller: the token's bus URLs are ones the
// node reaches, it is written 0600, it is refused for a node the fleet does not have, and it
// enrolls one node key only, until renewed.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  closeBus,
  connectBus,
  createAuthority,
  decodeJoinToken,
  enrollSubject,
  inboxPrefix,
  newNodeKeys,
  newUserKeys,
  type UserKeys,
} from "@mesh/bus";
import { startController, type Controller, type EnrollReply } from "@mesh/controller";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import { advertiseServers, writeJoinTokens } from "../src/join-token-command.ts";
import { meshInProcess as mesh, writeOperatorState } from "./run-mesh.ts";

const FLEET = fileURLToPath(new URL("../../../examples/fleet/mesh.yaml", import.meta.url));

/** Asks to enroll with `token` as an agent does, with the node key `keys`; `servers` overrides the token's. */
async function enroll(token: string, keys: UserKeys, servers: readonly string[]): Promise<EnrollReply> {
  const t = decodeJoinToken(token);
  const nc = await connectBus({
    servers,
    creds: new TextEncoder().encode(t.creds),
    name: t.node,
    inboxPrefix: inboxPrefix(t.node),
  });
  try {
    const body = {
      node: t.node,
      secret: t.secret,
      natsPublicKey: keys.publicKey,
      sealPublicKey: (await newNodeKeys()).publicKey,
    };
    return (await nc.request(enrollSubject(), JSON.stringify(body), { timeout: 30_000 })).json<EnrollReply>();
  } finally {
    await closeBus(nc);
  }
}

describe("mesh join-token", { timeout: 120_000 }, () => {
  let nats: NatsServer;
  let dir: string;
  let state: string;
  let controller: Controller;

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-join-token-"));
    state = join(dir, "state");
    await mkdir(state);
    controller = await startController({
      stateDir: join(state, "controller"),
      fleetFile: FLEET,
      servers: [nats.url],
      authority,
      logger: quietLogger,
      watch: false,
    });
    await writeOperatorState(authority, state, nats.url);
  });
  after(async () => {
    await controller?.stop();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("writes the token (0600) with the advertised address in place of the loopback one", async () => {
    const out = join(dir, "node-1.token");
    const run = await mesh([
      "join-token",
      "node-1",
      "--advertise",
      "10.9.8.7",
      "--out",
      out,
      "--state",
      state,
    ]);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /wrote the join token of node node-1/);
    assert.equal((await stat(out)).mode & 0o777, 0o600);
    const token = decodeJoinToken(await readFile(out, "utf8"));
    assert.equal(token.node, "node-1");
    assert.deepEqual(token.servers, [`nats://10.9.8.7:${nats.port}`]);
    assert.doesNotMatch(run.stdout + run.stderr, new RegExp(token.secret), "the secret is only in the file");

    const printed = await mesh(["join-token", "node-1", "--state", state]);
    assert.equal(printed.code, 0, printed.stderr);
    assert.equal(decodeJoinToken(printed.stdout).secret, token.secret, "the same token until renewed");
    assert.match(printed.stderr, /loopback.*--advertise/, "a loopback-only token is said to be one");
  });

  it("refuses a node the fleet does not have (exit 1), and a bad --advertise (exit 2)", async () => {
    const ghost = await mesh(["join-token", "ghost", "--state", state]);
    assert.equal(ghost.code, 1);
    assert.match(ghost.stderr, /"ghost" is not a node of the fleet/);
    assert.equal(ghost.stdout, "");
    const bad = await mesh(["join-token", "node-1", "--advertise", "a b:99999", "--state", state]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--advertise/);
  });

  it("enrolls one node key: the same key again, never another, until --renew", async () => {
    const first = await mesh(["join-token", "node-1", "--renew", "--state", state, "--json"]);
    assert.equal(first.code, 0, first.stderr);
    const { token, renewed } = JSON.parse(first.stdout) as { token: string; renewed: boolean };
    assert.equal(renewed, true);
    const node = newUserKeys();
    assert.equal((await enroll(token, node, [nats.url])).ok, true);
    assert.equal((await enroll(token, node, [nats.url])).ok, true, "an agent that retries is let in");
    const other = await enroll(token, newUserKeys(), [nats.url]);
    assert.equal(other.ok, false);
    assert.match(!other.ok ? other.error : "", /already used by another node key.*--renew/);

    const renewedRun = await mesh(["join-token", "node-1", "--renew", "--state", state, "--json"]);
    const next = (JSON.parse(renewedRun.stdout) as { token: string }).token;
    const replacement = newUserKeys();
    assert.equal((await enroll(next, replacement, [nats.url])).ok, true, "a renewed token takes a new key");
    const old = await enroll(token, node, [nats.url]).catch((err: unknown) => ({
      ok: false,
      error: String(err),
    }));
    assert.equal(old.ok, false, "the old token is refused");
  });

  it("writes <state>/join/<node>.token (0600) for the nodes this machine does not run, as mesh up does", async () => {
    const files = await writeJoinTokens({ controller, state, nodes: ["node-1"], advertise: "10.1.2.3" });
    assert.deepEqual(files, [join(state, "join", "node-1.token")]);
    assert.equal((await stat(files[0] ?? "")).mode & 0o777, 0o600);
    assert.deepEqual(decodeJoinToken(await readFile(files[0] ?? "", "utf8")).servers, [
      `nats://10.1.2.3:${nats.port}`,
    ]);
    await assert.rejects(writeJoinTokens({ controller, state, nodes: ["ghost"] }), /not a node of the fleet/);
  });

  it("replaces loopback hosts only, keeping or replacing the port", () => {
    const urls = ["nats://127.0.0.1:4222", "nats://10.0.0.2:4222", "tls://localhost:4333"];
    assert.deepEqual(advertiseServers(urls, "mesh-1.example.net"), [
      "nats://mesh-1.example.net:4222",
      "nats://10.0.0.2:4222",
      "tls://mesh-1.example.net:4333",
    ]);
    assert.deepEqual(advertiseServers(urls, "10.0.0.1:5000").slice(0, 1), ["nats://10.0.0.1:5000"]);
    assert.throws(() => advertiseServers(urls, "bad host"), /--advertise/);
  });
});
