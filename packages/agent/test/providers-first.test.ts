// A fleet change that adds consumers reaches the provider running on the node before the consumers'
// own users are made: the agent first applies the delivery narrowed to that provider (each new
// consumer's password, then the contributions file naming it), then the whole delivery. The
// narrowed application writes the provider's files and nothing of the others: it removes none of
// their files and writes none of their credentials.
import assert from "node:assert/strict";
import { access, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { newNodeKeys, seal, type NodeKeys } from "@mesh/bus";
import type { Delivery, PlanEntry } from "@mesh/manifest";
import { applyDelivery, type ApplyContext } from "../src/apply-delivery.ts";
import { recordingLogger } from "./test-mesh.ts";

const IFACE = "postgres-database";

const entryOf = (consumer: string): PlanEntry => ({
  consumer,
  consumerNode: "n1",
  interface: IFACE,
  login: `${consumer}_postgres`,
  values: {},
  derived: { name: `${consumer}_postgres` },
  provider: "db",
  providerNode: "n1",
});

const present = (path: string): Promise<boolean> =>
  access(path).then(
    () => true,
    () => false,
  );

void describe("a delivery applied to its providers first", () => {
  let dir: string;
  let keys: NodeKeys;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-providers-first-"));
    keys = await newNodeKeys();
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const deliveryFor = async (consumers: readonly string[], generation: number): Promise<Delivery> => ({
    node: "n1",
    generation,
    fleetFile: "/srv/mesh.yaml",
    modules: [
      { name: "db", manifest: "/srv/db/module.json" },
      ...consumers.map((name) => ({ name, manifest: `/srv/${name}/module.json` })),
    ],
    plan: {
      instances: [
        {
          provider: "db",
          node: "n1",
          interface: IFACE,
          endpoint: { scheme: "postgresql", host: "127.0.0.1", port: 5432, path: "/{name}", query: {} },
          consumers: consumers.map(entryOf),
        },
      ],
    },
    secrets: Object.fromEntries(
      await Promise.all(consumers.map(async (c) => [`${c}/${IFACE}`, await seal(`pw-${c}`, keys.publicKey)])),
    ),
  });

  void it("gives the provider the new consumer and leaves the other modules' files as they are", async () => {
    const stateDir = join(dir, "state");
    const ctx: ApplyContext = { node: "n1", stateDir, sealKeys: keys, logger: recordingLogger() };
    const receives = join(stateDir, "modules", "db", "receives", `${IFACE}.json`);
    const passwordOf = (c: string) => join(stateDir, "modules", c, "passwords", IFACE);
    const credentialOf = (c: string) => join(stateDir, "modules", c, "credentials", `${IFACE}.json`);
    const logins = async () =>
      (JSON.parse(await readFile(receives, "utf8")) as { given: { as: string }[] }).given.map((g) => g.as);

    await applyDelivery(await deliveryFor(["app"], 1), ctx);
    assert.equal(await readFile(passwordOf("app"), "utf8"), "pw-app");

    const next = await deliveryFor(["app", "app2"], 2);
    const narrowed = { ...next, modules: next.modules.filter((m) => m.name === "db") };
    await applyDelivery(narrowed, { ...ctx, removeUnused: false });
    assert.deepEqual(await logins(), ["app_postgres", "app2_postgres"], "the provider is told at once");
    assert.equal(await readFile(passwordOf("app"), "utf8"), "pw-app", "the other consumer's password stays");
    assert.equal(await present(credentialOf("app")), true, "and its credential file");
    assert.equal(
      await present(credentialOf("app2")),
      false,
      "the new consumer's files wait for the whole delivery",
    );
    assert.equal(await present(passwordOf("app2")), false);

    const whole = await applyDelivery(next, ctx);
    assert.deepEqual(whole.removed, []);
    assert.equal(await readFile(passwordOf("app2"), "utf8"), "pw-app2");
    assert.equal(await present(credentialOf("app2")), true);
    assert.deepEqual(await logins(), ["app_postgres", "app2_postgres"]);
  });
});
