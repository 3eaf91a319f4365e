// `mesh bus-config` against real nats-servers: three servers started from the configurations it
// writes form one JetStream cluster trusting the mesh's operator, with TLS when asked, and a
// revocation pushed at run time is still known by a server restarted from its config.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  ACCOUNT_UPDATER_IDENTITY,
  accountUpdaterPermissions,
  closeBus,
  connectBus,
  credsFor,
  inboxPrefix,
  newUserKeys,
  pushAccountClaims,
  type BusAuthority,
} from "@mesh/bus";
import { loadOrCreateAuthority, saveAuthority } from "@mesh/controller";
import { startNatsCluster, until, type NatsCluster } from "@mesh/testkit";
import { Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { writeBusConfig } from "../src/bus-config-command.ts";
import { meshInProcess as mesh } from "./run-mesh.ts";

const EVERYTHING = { pub: { allow: [">"] }, sub: { allow: [">"] } };
const temps: string[] = [];
after(async () => {
  for (const dir of temps) await rm(dir, { recursive: true, force: true });
});
async function temp(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "mesh-bus-config-"));
  temps.push(dir);
  return dir;
}

/** A cluster of three started from `mesh bus-config`'s files, under the authority in `state`. */
async function clusterFromBusConfig(state: string, tlsDir?: string): Promise<NatsCluster> {
  return startNatsCluster({
    configure: async (members, dir) => {
      const written = await writeBusConfig({
        cluster: "mesh",
        servers: members.map((m) => ({
          name: m.name,
          host: m.host,
          clientPort: m.port,
          clusterPort: m.clusterPort,
        })),
        state,
        out: dir,
        ...(tlsDir !== undefined ? { tlsDir } : {}),
      });
      return written.servers.map((s) => s.config);
    },
  });
}

async function connectUser(
  authority: BusAuthority,
  servers: readonly string[],
  keys = newUserKeys(),
  caFile?: string,
): Promise<NatsConnection> {
  const jwt = await authority.issueUser({
    name: "tester",
    publicKey: keys.publicKey,
    permissions: EVERYTHING,
  });
  return connectBus({
    servers,
    creds: credsFor(jwt, keys.seed),
    name: "tester",
    ...(caFile ? { caFile } : {}),
  });
}

describe("mesh bus-config", () => {
  it("writes configurations whose three servers form one JetStream cluster that stores an R3 bucket", async () => {
    const state = await temp();
    const cluster = await clusterFromBusConfig(state);
    try {
      const authority = await loadOrCreateAuthority(join(state, "controller"));
      const nc = await connectUser(authority, cluster.urls);
      try {
        assert.equal(nc.info?.cluster, "mesh");
        const kv = await until(
          "the JetStream cluster to take an R3 bucket",
          () => new Kvm(nc).create("probe", { replicas: 3 }),
          60,
        );
        await kv.put("k", "v");
        const status = await kv.status();
        assert.equal(status.replicas, 3);
      } finally {
        await closeBus(nc);
      }
      for (const member of cluster.members) {
        const file = join(cluster.dir, member.name, "nats.conf");
        const text = await readFile(file, "utf8");
        assert.doesNotMatch(text, /^\s*authorization\s*[:{]/m, "no authorization block beside the accounts");
        assert.match(text, /type: full/);
        assert.match(text, /allow_delete: false/);
        assert.equal((await stat(file)).mode & 0o777, 0o600);
      }
    } finally {
      await cluster.stop();
    }
  });

  it("with --tls-dir, clients and routes use TLS signed by a CA the mesh keeps, and made once", async () => {
    const state = await temp();
    const tlsDir = join(await temp(), "bus-ca");
    const cluster = await clusterFromBusConfig(state, tlsDir);
    try {
      const authority = await loadOrCreateAuthority(join(state, "controller"));
      const caFile = join(tlsDir, "ca.pem");
      const nc = await connectUser(
        authority,
        cluster.urls.map((u) => u.replace("nats://", "tls://")),
        undefined,
        caFile,
      );
      try {
        assert.equal(nc.info?.tls_required, true);
        const kv = await until(
          "the TLS cluster to take an R3 bucket",
          () => new Kvm(nc).create("probe", { replicas: 3 }),
          60,
        );
        await kv.put("k", "v");
      } finally {
        await closeBus(nc);
      }
      assert.equal((await stat(join(tlsDir, "ca-key.pem"))).mode & 0o777, 0o600);
      const caBefore = await readFile(caFile, "utf8");
      const again = await mesh([
        "bus-config",
        "--cluster",
        "mesh",
        "--server",
        "a=127.0.0.1:4001:5001",
        "--tls-dir",
        tlsDir,
        "--out",
        join(await temp(), "out"),
        "--state",
        state,
        "--json",
      ]);
      assert.equal(again.code, 0, again.stderr);
      assert.equal(await readFile(caFile, "utf8"), caBefore, "the kept CA is reused");
      assert.equal((JSON.parse(again.stdout) as { bus: string[] }).bus[0], "tls://127.0.0.1:4001");
    } finally {
      await cluster.stop();
    }
  });

  it("a key revoked at run time is still refused by a server restarted from its configuration", async () => {
    const state = await temp();
    const cluster = await clusterFromBusConfig(state);
    try {
      const authority = await loadOrCreateAuthority(join(state, "controller"));
      // The very JWT that was revoked: a JWT issued after a revocation is not covered by it.
      const revoked = newUserKeys();
      const revokedJwt = await authority.issueUser({
        name: "victim",
        publicKey: revoked.publicKey,
        permissions: EVERYTHING,
      });
      const connectRevoked = (url: string): Promise<NatsConnection> =>
        connectBus({ servers: url, creds: credsFor(revokedJwt, revoked.seed), name: "victim" });
      const victim = await connectRevoked(cluster.urls[2] ?? "");
      await until("JetStream to be ready", () => new Kvm(victim).create("probe", { replicas: 3 }), 60);
      const systemKeys = newUserKeys();
      const systemJwt = await authority.issueSystemUser({
        name: ACCOUNT_UPDATER_IDENTITY,
        publicKey: systemKeys.publicKey,
        permissions: accountUpdaterPermissions(authority),
      });
      const system = await connectBus({
        servers: [cluster.urls[0] ?? ""],
        creds: credsFor(systemJwt, systemKeys.seed),
        name: ACCOUNT_UPDATER_IDENTITY,
        inboxPrefix: inboxPrefix(ACCOUNT_UPDATER_IDENTITY),
      });
      try {
        await authority.revokeUser(revoked.publicKey);
        await saveAuthority(join(state, "controller"), authority);
        await pushAccountClaims(system, authority);
      } finally {
        await closeBus(system);
      }
      await until("the revoked connection on the third server to be closed", () => victim.isClosed(), 30);

      // The configuration is not written again: what the server knows of the revocation, it kept.
      await cluster.kill(2);
      await cluster.start(2);
      await assert.rejects(connectRevoked(cluster.urls[2] ?? ""), /refused/);
      const fresh = await connectUser(authority, [cluster.urls[2] ?? ""]);
      await closeBus(fresh);
    } finally {
      await cluster.stop();
    }
  });

  it("refuses a --server that is not NAME=HOST:CLIENT_PORT:CLUSTER_PORT (exit 2), writing nothing", async () => {
    const out = join(await temp(), "out");
    const run = await mesh([
      "bus-config",
      "--cluster",
      "mesh",
      "--server",
      "n1=10.0.0.1:4222",
      "--out",
      out,
      "--state",
      await temp(),
    ]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /NAME=HOST:CLIENT_PORT:CLUSTER_PORT/);
    await assert.rejects(stat(out));
    const twice = await mesh([
      "bus-config",
      "--cluster",
      "mesh",
      "--server",
      "n1=10.0.0.1:4222:6222",
      "--server",
      "n1=10.0.0.2:4222:6222",
      "--out",
      out,
      "--state",
      await temp(),
    ]);
    assert.equal(twice.code, 2);
    assert.match(twice.stderr, /repeats n1/);
  });
});
