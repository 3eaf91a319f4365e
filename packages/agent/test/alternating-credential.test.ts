// Where the provider alternates logins (Postgres), a rotation moves the consumer's credential file to
// the other login and its own password file. The agent writes that password file first and moves
// the credential file only once the provider on the node has taken the new password: an app that
// reads the credential file, then the password file it names, always reads a pair that logs in.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { newNodeKeys, seal, type NodeKeys } from "@mesh/bus";
import type { Delivery, PlanEntry } from "@mesh/manifest";
import { applyDelivery, type ApplyContext } from "../src/apply-delivery.ts";
import type { GateAnswer } from "../src/module-launch.ts";
import { recordingLogger } from "./test-mesh.ts";

const entry: PlanEntry = {
  consumer: "app",
  consumerNode: "n1",
  interface: "postgres-database",
  login: "app_postgres",
  values: {},
  derived: { name: "app_postgres" },
  provider: "db",
  providerNode: "n1",
  alternates: true,
};

void describe("a credential file where logins alternate", () => {
  let dir: string;
  let keys: NodeKeys;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-alternating-"));
    keys = await newNodeKeys();
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const deliveryWith = async (
    password: string,
    slot: 1 | undefined,
    generation: number,
  ): Promise<Delivery> => ({
    node: "n1",
    generation,
    fleetFile: "/srv/mesh.yaml",
    modules: [
      { name: "db", manifest: "/srv/db/module.json" },
      { name: "app", manifest: "/srv/app/module.json" },
    ],
    plan: {
      instances: [
        {
          provider: "db",
          node: "n1",
          interface: "postgres-database",
          endpoint: { scheme: "postgresql", host: "127.0.0.1", port: 5432, path: "/{name}", query: {} },
          consumers: [slot === 1 ? { ...entry, slot } : entry],
        },
      ],
    },
    secrets: { "app/postgres-database": await seal(password, keys.publicKey) },
  });

  void it("moves to the other login and its own password file only once the provider took the new password", async () => {
    const stateDir = join(dir, "state");
    let answer: GateAnswer = { applied: true };
    const ctx: ApplyContext = {
      node: "n1",
      stateDir,
      sealKeys: keys,
      logger: recordingLogger(),
      passwordApplied: async () => answer,
      heldSince: new Map(),
    };
    const credentialFile = join(stateDir, "modules", "app", "credentials", "postgres-database.json");
    const receives = join(stateDir, "modules", "db", "receives", "postgres-database.json");
    const named = async () => {
      const c = JSON.parse(await readFile(credentialFile, "utf8")) as {
        login: string;
        passwordFile: string;
        url: string;
      };
      return { ...c, password: await readFile(c.passwordFile, "utf8") };
    };

    await applyDelivery(await deliveryWith("pw-one", undefined, 1), ctx);
    const first = await named();
    assert.equal(first.login, "app_postgres");
    assert.equal(first.password, "pw-one");
    assert.ok(first.passwordFile.endsWith("/passwords/postgres-database"));

    // Rotated: the new password is for the second login; the provider has not taken it yet.
    answer = { applied: false, why: "not yet", overlaps: true };
    const held = await applyDelivery(await deliveryWith("pw-two", 1, 2), ctx);
    assert.deepEqual(held.held, [credentialFile], "the credential file waits");
    const waiting = await named();
    assert.equal(waiting.login, "app_postgres", "still the first login");
    assert.equal(waiting.password, "pw-one", "with the password it logs in with");
    assert.equal(
      await readFile(`${first.passwordFile}.2`, "utf8"),
      "pw-two",
      "the second login's password file already holds the new password",
    );
    const given = (JSON.parse(await readFile(receives, "utf8")) as { given: Record<string, unknown>[] })
      .given;
    assert.equal(given[0]?.["login"], "app_postgres_2", "the provider is told the login to use");
    assert.equal(typeof given[0]?.["retiring"], "string", "and the password being retired");

    // Taken: the credential file names the second login and its password file.
    answer = { applied: true };
    const moved = await applyDelivery(await deliveryWith("pw-two", 1, 2), ctx);
    assert.deepEqual(moved.held, []);
    const second = await named();
    assert.equal(second.login, "app_postgres_2");
    assert.equal(second.password, "pw-two");
    assert.match(
      second.url,
      /^postgresql:\/\/app_postgres_2@127\.0\.0\.1:5432\/app_postgres$/,
      "same database",
    );
    assert.equal(await readFile(first.passwordFile, "utf8"), "pw-one", "the first login's file is kept");

    // And back to the first login at the next rotation, the same way.
    answer = { applied: false, why: "not yet", overlaps: true };
    await applyDelivery(await deliveryWith("pw-three", undefined, 3), ctx);
    assert.equal((await named()).login, "app_postgres_2", "waits again");
    assert.equal(await readFile(first.passwordFile, "utf8"), "pw-three");
    answer = { applied: true };
    await applyDelivery(await deliveryWith("pw-three", undefined, 3), ctx);
    const third = await named();
    assert.equal(third.login, "app_postgres");
    assert.equal(third.password, "pw-three");
  });
});
