import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { until } from "@mesh/testkit";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { newNodeKeys, seal } from "@mesh/bus";
import { contributionsFor, credentialsFor, providerSecretPath, secretPath } from "@mesh/manifest";
import { AgentNotEnrolledError, startAgent, type Agent } from "../src/index.ts";
import { EnrollmentError } from "../src/enroll-node.ts";
import { type AgentTimings } from "../src/node-agent.ts";
import { planFor, writeTestFleet, type TestFleet } from "./test-fleet.ts";
import { recordingLogger, startTestMesh, type DeliveryDraft, type TestMesh } from "./test-mesh.ts";

const FAST: Partial<AgentTimings> = { reportEveryMs: 500, retryMs: 200, stopGraceMs: 2_000 };

const mode = async (path: string): Promise<number> => (await stat(path)).mode & 0o777;

void describe("an agent enrolls, and writes its node's files from its deliveries", () => {
  let mesh: TestMesh;
  let fleet: TestFleet;
  let stateDir: string;
  let draft: DeliveryDraft;
  const logger = recordingLogger();
  let agent: Agent | undefined;

  before(async () => {
    mesh = await startTestMesh();
    fleet = await writeTestFleet(await mkdtemp(join(tmpdir(), "mesh-agent-fleet-")));
    stateDir = await mkdtemp(join(tmpdir(), "mesh-agent-state-"));
    // The provider and one consumer on this node; app's module runs elsewhere in this suite, but
    // its password is delivered here all the same because this node runs its provider.
    draft = {
      generation: 1,
      modules: [fleet.module("store"), fleet.module("worker")],
      plan: planFor(fleet.plan, "n1", ["app", "worker", "remote"]),
      secrets: {
        "app/kv-store": "pw-app-1",
        "worker/kv-store": "pw-worker-1",
        "remote/kv-store": "pw-remote-1",
      },
    };
  });
  after(async () => {
    await agent?.stop();
    if (process.env["AGENT_TEST_LOG"]) console.log(logger.lines.join("\n"));
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
    await rm(stateDir, { recursive: true, force: true });
  });

  void it("enrolls with a join token, keeping its keys and credentials 0600 and sending only public keys", async () => {
    agent = await startAgent({
      node: "n1",
      stateDir,
      joinToken: await mesh.joinToken("n1"),
      logger,
      timings: FAST,
    });
    assert.equal(await mode(join(stateDir, "keys.json")), 0o600);
    assert.equal(await mode(join(stateDir, "node.creds")), 0o600);
    const keys = JSON.parse(await readFile(join(stateDir, "keys.json"), "utf8")) as {
      nats: { publicKey: string };
      seal: { publicKey: string };
    };
    assert.deepEqual(mesh.enrolled.get("n1"), {
      natsPublicKey: keys.nats.publicKey,
      sealPublicKey: keys.seal.publicKey,
    });
  });

  void it("writes each secret (0600) for each reader, the provider's contributions and the consumer's credentials", async () => {
    await mesh.publish("n1", draft);
    await until("delivery 1 applied", () => agent?.status().generation === 1);
    for (const [consumer, password] of [
      ["app", "pw-app-1"],
      ["worker", "pw-worker-1"],
      ["remote", "pw-remote-1"],
    ] as const) {
      const path = providerSecretPath(stateDir, "store", consumer, "kv-store");
      assert.equal(await readFile(path, "utf8"), password);
      assert.equal(await mode(path), 0o600);
    }
    // The consumer on this node has its own copy; one whose module runs elsewhere has none here.
    assert.equal(await readFile(secretPath(stateDir, "worker", "kv-store"), "utf8"), "pw-worker-1");
    assert.equal(await mode(secretPath(stateDir, "worker", "kv-store")), 0o600);
    await assert.rejects(stat(secretPath(stateDir, "app", "kv-store")), { code: "ENOENT" });
    const [contributions] = contributionsFor(draft.plan, "store", stateDir);
    assert.ok(contributions);
    assert.deepEqual(JSON.parse(await readFile(contributions.path, "utf8")), contributions.contents);
    assert.deepEqual(
      contributions.contents.given.map((g) => g.as),
      ["app_kv", "remote_kv", "worker_kv"],
    );
    const [credential] = credentialsFor(draft.plan, "worker", stateDir);
    assert.ok(credential);
    assert.deepEqual(JSON.parse(await readFile(credential.path, "utf8")), credential.contents);
    assert.equal(credential.contents.passwordFile, secretPath(stateDir, "worker", "kv-store"));
    // Six files of the plan, and the `ledgers` file (`{}`: no module has a ledger credential).
    assert.deepEqual(agent?.status().files, { written: 7, unchanged: 0 });
    await until("a report of delivery 1", () => mesh.reports.some((r) => r.generation === 1));
    assert.equal(logger.lines.join("\n").includes("pw-"), false, "no password in the log");
  });

  void it("restarted without a join token, it reuses its keys and credentials and rewrites nothing the same", async () => {
    const paths = [
      providerSecretPath(stateDir, "store", "app", "kv-store"),
      secretPath(stateDir, "worker", "kv-store"),
      ...contributionsFor(draft.plan, "store", stateDir).map((f) => f.path),
      ...credentialsFor(draft.plan, "worker", stateDir).map((f) => f.path),
    ];
    const before = await Promise.all(paths.map(async (p) => (await stat(p)).mtimeMs));
    const keys = await readFile(join(stateDir, "keys.json"), "utf8");
    await agent?.stop();
    agent = await startAgent({ node: "n1", stateDir, logger, timings: FAST });
    await until("delivery 1 applied again", () => agent?.status().generation === 1);
    assert.deepEqual(agent.status().files, { written: 0, unchanged: 7 });
    assert.deepEqual(await Promise.all(paths.map(async (p) => (await stat(p)).mtimeMs)), before);
    assert.equal(await readFile(join(stateDir, "keys.json"), "utf8"), keys);
    assert.equal(mesh.enrollments(), 1, "no second enrollment");
  });

  void it("refuses a tampered or wrongly addressed secret, naming the consumer, and never writes it", async () => {
    const good = await seal("pw-app-2", mesh.enrolled.get("n1")?.sealPublicKey ?? "");
    const tampered = `${good.slice(0, 40)}${good[40] === "A" ? "B" : "A"}${good.slice(41)}`;
    const elsewhere = await seal("pw-worker-2", (await newNodeKeys()).publicKey);
    await mesh.publish("n1", {
      ...draft,
      generation: 2,
      secrets: {
        "app/kv-store": { box: tampered },
        "worker/kv-store": { box: elsewhere },
        "remote/kv-store": "pw-remote-2",
      },
    });
    await until("delivery 2 applied", () => agent?.status().generation === 2);
    const errors = logger.lines.filter((l) => l.startsWith("error:"));
    assert.ok(
      errors.some((l) =>
        /consumer app for kv-store: .*tampered with or is not addressed to this node/.test(l),
      ),
    );
    assert.ok(errors.some((l) => /consumer worker for kv-store/.test(l)));
    const copy = (consumer: string) => providerSecretPath(stateDir, "store", consumer, "kv-store");
    assert.equal(await readFile(copy("app"), "utf8"), "pw-app-1");
    assert.equal(await readFile(copy("worker"), "utf8"), "pw-worker-1");
    assert.equal(await readFile(secretPath(stateDir, "worker", "kv-store"), "utf8"), "pw-worker-1");
    assert.equal(await readFile(copy("remote"), "utf8"), "pw-remote-2");
  });

  void it("removes, and says, a secret no longer delivered, and leaves a stale credential file in place", async () => {
    await mesh.publish("n1", {
      generation: 3,
      modules: draft.modules,
      plan: planFor(fleet.plan, "n1", ["app", "remote"]),
      secrets: { "app/kv-store": "pw-app-3", "remote/kv-store": "pw-remote-2" },
    });
    await until("delivery 3 applied", () => agent?.status().generation === 3);
    await assert.rejects(stat(secretPath(stateDir, "worker", "kv-store")), { code: "ENOENT" });
    await assert.rejects(stat(providerSecretPath(stateDir, "store", "worker", "kv-store")), {
      code: "ENOENT",
    });
    assert.ok(logger.lines.some((l) => /removed the secret file .*worker.*no longer delivered/.test(l)));
    const [stale] = credentialsFor(draft.plan, "worker", stateDir);
    assert.ok(stale);
    await stat(stale.path);
    assert.ok(
      logger.lines.some(
        (l) => l.startsWith("warn:") && l.includes(stale.path) && l.includes("left in place"),
      ),
    );
  });

  void it("reconnects after nats-server restarts and applies the next delivery", async () => {
    await mesh.server.restart();
    await until("the bus to take delivery 4", async () => {
      try {
        await mesh.publish("n1", {
          generation: 4,
          modules: draft.modules,
          plan: planFor(fleet.plan, "n1", ["app", "remote"]),
          secrets: { "app/kv-store": "pw-app-4", "remote/kv-store": "pw-remote-2" },
        });
        return true;
      } catch {
        return false; // JetStream is not back yet
      }
    });
    await until("delivery 4 applied after the restart", () => agent?.status().generation === 4, 60);
    assert.equal(
      await readFile(providerSecretPath(stateDir, "store", "app", "kv-store"), "utf8"),
      "pw-app-4",
    );
    assert.equal(agent?.status().connected, true);
  });

  void it("refuses to enroll when the controller refuses the join secret", async () => {
    const other = await mkdtemp(join(tmpdir(), "mesh-agent-state-"));
    try {
      await assert.rejects(
        startAgent({
          node: "n2",
          stateDir: other,
          joinToken: await mesh.joinToken("n2", { secret: "wrong" }),
          logger: recordingLogger(),
          timings: FAST,
        }),
        (err: unknown) =>
          err instanceof EnrollmentError && /refused .*join secret is not right/.test(err.message),
      );
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });

  void it("without a join token, a node that never enrolled is told how to enroll", async () => {
    const other = await mkdtemp(join(tmpdir(), "mesh-agent-state-"));
    try {
      await assert.rejects(
        startAgent({ node: "n2", stateDir: other, logger: recordingLogger(), servers: mesh.server.url }),
        (err: unknown) => err instanceof AgentNotEnrolledError && /join token/.test(err.message),
      );
    } finally {
      await rm(other, { recursive: true, force: true });
    }
  });
});
