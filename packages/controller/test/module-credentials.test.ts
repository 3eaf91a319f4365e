import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import {
  closeBus,
  connectBus,
  credsFor,
  ALL_LEDGER_SUBJECTS,
  ledgerStreamName,
  ledgerSubjects,
  newUserKeys,
  reportSubject,
} from "@mesh/bus";
import type { Delivery } from "@mesh/controller";
import { startFleetMesh, type FleetMesh, type TestMesh, type TestNode } from "./test-mesh.ts";
import { until } from "@mesh/testkit";

/** The user public key a JWT was issued for. */
const subjectOf = (jwt: string): string =>
  (JSON.parse(Buffer.from(jwt.split(".")[1] ?? "", "base64url").toString()) as { sub: string }).sub;

const keys = (): { bus: string; ledger: string } => ({
  bus: newUserKeys().publicKey,
  ledger: newUserKeys().publicKey,
});

void describe("the controller issues module credentials for the keys a node reports", () => {
  let mesh: TestMesh;
  let a: TestNode;
  let generation = 0;
  const report = (node: TestNode, moduleKeys: unknown): void => {
    generation++;
    node.nc.publish(reportSubject(node.node), JSON.stringify({ generation, modules: [], moduleKeys }));
  };
  // The delivery once the controller has answered a report in which `module`'s bus key is `bus`.
  const issuedFor = (module: string, bus: string): Promise<Delivery> =>
    until(`a credential for ${module}`, async () => {
      const d = await a.delivery();
      const jwt = d?.credentials?.[module]?.bus;
      return jwt !== undefined && subjectOf(jwt) === bus ? d : undefined;
    });

  let setup: FleetMesh<["node-a"]>;
  before(async () => {
    setup = await startFleetMesh(["node-a"]);
    ({ mesh } = setup);
    [a] = setup.nodes;
  });
  after(() => setup.stop());

  void it("issues only for a module the fleet runs on that node, for keys that are no one else's", async () => {
    const app1 = keys();
    report(a, {
      app1,
      app2: keys(), // runs on node-b
      postgres: { bus: a.natsKeys.publicKey, ledger: newUserKeys().publicKey }, // the node's own key
      "not a module!": keys(),
      app3: { bus: "not a key", ledger: "neither" },
    });
    const d = await issuedFor("app1", app1.bus);
    assert.deepEqual(Object.keys(d.credentials ?? {}), ["app1"]);
    assert.equal(subjectOf(d.credentials?.["app1"]?.ledger ?? ""), app1.ledger);
    // Keys it will not issue for are to be replaced: the agent makes new ones.
    assert.deepEqual(d.replaceKeys, { postgres: a.natsKeys.publicKey });
    // The module's ledger is made beside its credentials (not waited for: see module-ledgers.test.ts).
    const admin = newUserKeys();
    const jwt = await mesh.authority.issueUser({
      name: "admin",
      publicKey: admin.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    const nc = await connectBus({ servers: mesh.nats.url, creds: credsFor(jwt, admin.seed), name: "admin" });
    try {
      const jsm = await jetstreamManager(nc);
      // The ledger every module shares: app1's entries are those of its subjects.
      const info = await until("app1's ledger", () => jsm.streams.info(ledgerStreamName("app1")), 30);
      assert.deepEqual(info.config.subjects, [ALL_LEDGER_SUBJECTS]);
      assert.ok(ledgerSubjects("app1").startsWith(ALL_LEDGER_SUBJECTS.slice(0, -1)));
    } finally {
      await closeBus(nc);
    }
  });

  void it("revokes a replaced key, and asks for new keys when a node reports a revoked one", async () => {
    const first = (await a.delivery())?.credentials?.["app1"];
    assert.ok(first);
    const old = { bus: subjectOf(first.bus), ledger: subjectOf(first.ledger) };
    const next = keys();
    report(a, { app1: next });
    await issuedFor("app1", next.bus);
    // Revoked, and saved so that the revocation outlives a restart.
    const saved = await until("the old keys revoked and saved", async () => {
      const text = await readFile(join(mesh.stateDir, "authority.json"), "utf8").catch(() => "{}");
      const file = JSON.parse(text) as { revocations?: Record<string, number> };
      return file.revocations?.[old.bus] !== undefined ? file.revocations : undefined;
    });
    assert.ok(saved[old.ledger] !== undefined);
    assert.ok(mesh.authority.revocations[old.bus] !== undefined);

    // A node that reports the revoked keys again (its state restored from a backup, say) is asked
    // for new ones, and keeps the credential it has until then.
    report(a, { app1: old });
    const d = await until("replaceKeys", async () => {
      const got = await a.delivery();
      return got?.replaceKeys?.["app1"] !== undefined ? got : undefined;
    });
    assert.deepEqual(d.replaceKeys, { app1: old.bus });
    assert.equal(subjectOf(d.credentials?.["app1"]?.bus ?? ""), next.bus);
  });
});
