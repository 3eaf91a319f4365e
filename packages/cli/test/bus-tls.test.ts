// The mesh's own connections over TLS: a 3-server cluster started from `mesh bus-config --tls-dir`,
// `mesh controller --bus tls://… --bus-ca`, an agent that joins with the token alone (it carries the
// CA), and the CLI's reads from the state directory. A client without the CA, or with another
// one, is refused with words that name the fix.
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { decodeJoinToken, encodeJoinToken } from "@mesh/bus";
import { startNatsCluster, until, type NatsCluster } from "@mesh/testkit";
import { writeBusConfig } from "../src/bus-config-command.ts";
import { ensureBusCa } from "../src/bus-tls.ts";
import { meshInProcess as mesh, runMesh, startMesh, type MeshProcess } from "./run-mesh.ts";

describe("the mesh over a TLS cluster", { timeout: 240_000 }, () => {
  let dir: string;
  let state: string;
  let caFile: string;
  let urls: string[];
  let cluster: NatsCluster | undefined;
  const running: MeshProcess[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-bus-tls-"));
    state = join(dir, "state");
    const tlsDir = join(dir, "bus-ca");
    caFile = join(tlsDir, "ca.pem");
    cluster = await startNatsCluster({
      configure: async (members, out) => {
        const written = await writeBusConfig({
          cluster: "mesh",
          servers: members.map((m) => ({
            name: m.name,
            host: m.host,
            clientPort: m.port,
            clusterPort: m.clusterPort,
          })),
          state,
          out,
          tlsDir,
        });
        return written.servers.map((s) => s.config);
      },
    });
    urls = cluster.urls.map((u) => u.replace("nats://", "tls://"));
    const fleetFile = join(dir, "mesh.yaml");
    await writeFile(fleetFile, "nodes:\n  node-1: {}\n  node-2: {}\nmodules: {}\n");
    const controller = startMesh([
      "controller",
      fleetFile,
      "--state",
      state,
      "--bus",
      urls.join(","),
      "--bus-ca",
      caFile,
    ]);
    running.push(controller);
    controller.child.stdin?.end();
    await controller.waitFor(/3\/3 the controller serves/);
  });

  after(async () => {
    for (const p of running) {
      if (p.child.exitCode === null) p.child.kill("SIGKILL");
      await p.done.catch(() => {});
    }
    await cluster?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("the controller serves over TLS, and mesh status finds the bus and its CA in the state directory", async () => {
    const bus = JSON.parse(await readFile(join(state, "bus.json"), "utf8")) as {
      servers: string[];
      ca?: string;
    };
    assert.deepEqual(bus.servers, urls);
    assert.equal(bus.ca, await readFile(caFile, "utf8"));
    const status = await mesh(["status", "--json", "--state", state]);
    assert.equal(status.code, 0, status.stderr);
    assert.deepEqual(
      (JSON.parse(status.stdout) as { nodes: { name: string }[] }).nodes.map((n) => n.name),
      ["node-1", "node-2"],
    );
  });

  it("an agent joins with the token alone: it carries the CA, kept for the next start and the modules", async () => {
    const tokenFile = join(state, "join", "node-1.token");
    const token = decodeJoinToken((await readFile(tokenFile, "utf8")).trim());
    assert.equal(token.ca, await readFile(caFile, "utf8"));
    const agentState = join(dir, "node-1");
    const agent = startMesh([
      "agent",
      "--node",
      "node-1",
      "--join",
      tokenFile,
      "--state",
      agentState,
      "--isolation",
      "auto",
    ]);
    running.push(agent);
    agent.child.stdin?.end();
    await agent.waitFor(/is connected to the bus at tls:\/\//);
    await until(
      "mesh status to show node-1 enrolled",
      async () => {
        const run = await mesh(["status", "--json", "--state", state]);
        const nodes = (JSON.parse(run.stdout) as { nodes: { name: string; enrolled: boolean }[] }).nodes;
        return nodes.find((n) => n.name === "node-1")?.enrolled === true ? true : undefined;
      },
      60,
    );
    assert.equal(await readFile(join(agentState, "bus-ca.pem"), "utf8"), token.ca);
    assert.equal((await stat(join(agentState, "bus-ca.pem"))).mode & 0o777, 0o644);
    agent.child.kill("SIGTERM");
    assert.equal((await agent.done).code, 0);
  });

  it("mesh join-token gives a token that carries the CA", async () => {
    const run = await mesh(["join-token", "node-2", "--json", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const token = decodeJoinToken((JSON.parse(run.stdout) as { token: string }).token);
    assert.equal(token.ca, await readFile(caFile, "utf8"));
    assert.deepEqual(token.servers, urls);
  });

  it("a client without the CA is refused with words that name --bus-ca", async () => {
    const bare = join(dir, "bare-state");
    await mkdir(bare, { recursive: true, mode: 0o700 });
    await copyFile(join(state, "operator.creds"), join(bare, "operator.creds"));
    await writeFile(join(bare, "bus.json"), JSON.stringify({ servers: urls }));
    const run = await mesh(["status", "--state", bare]);
    assert.equal(run.code, 3, run.stderr);
    assert.match(
      run.stderr,
      /uses TLS and no bus CA was given: pass the mesh's bus CA .* with --bus-ca FILE/,
    );

    // The same URLs as nats://: the servers still demand TLS, and the answer is the same.
    const plain = await mesh(["status", "--state", bare, "--bus", cluster?.urls.join(",") ?? ""]);
    assert.equal(plain.code, 3, plain.stderr);
    assert.match(plain.stderr, /no bus CA was given/);

    const withCa = await mesh(["status", "--json", "--state", bare, "--bus-ca", caFile]);
    assert.equal(withCa.code, 0, withCa.stderr);
  });

  it("a client trusting another CA is refused: the certificate is not one it trusts", async () => {
    await ensureBusCa(join(dir, "other-ca"));
    const run = await mesh(["status", "--state", state, "--bus-ca", join(dir, "other-ca", "ca.pem")]);
    assert.equal(run.code, 3, run.stderr);
    assert.match(run.stderr, /presented a certificate that .* does not trust .* --bus-ca FILE/);
  });

  it("an agent whose token carries no CA is refused at once, naming --bus-ca", async () => {
    const token = decodeJoinToken((await readFile(join(state, "join", "node-2.token"), "utf8")).trim());
    const { ca: _ca, ...withoutCa } = token;
    const tokenFile = join(dir, "node-2-without-ca.token");
    await writeFile(tokenFile, encodeJoinToken(withoutCa), { mode: 0o600 });
    const run = await runMesh([
      "agent",
      "--node",
      "node-2",
      "--join",
      tokenFile,
      "--state",
      join(dir, "node-2"),
      "--isolation",
      "auto",
    ]);
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stderr, /no bus CA was given: pass .* --bus-ca FILE/);
  });

  it("mesh up --bus-ca without --bus is a usage error", async () => {
    const run = await mesh(["up", join(dir, "mesh.yaml"), "--state", join(dir, "up"), "--bus-ca", caFile]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /--bus-ca is for an existing cluster with TLS/);
  });
});
