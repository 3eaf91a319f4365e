import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  AUTHORITY_FILE,
  AuthorityFileError,
  CONTROLLER_KEYS_FILE,
  ControllerKeysError,
  loadOrCreateAuthority,
  loadOrCreateControllerKeys,
  nodePlan,
} from "@mesh/controller";
import type { Plan } from "@mesh/manifest";
import { encodeJoinToken, JoinTokenError, parseJoinToken } from "@mesh/bus";

void describe("the controller's files and tokens", () => {
  const dirs: string[] = [];
  const stateDir = async (): Promise<string> => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-controller-files-"));
    dirs.push(dir);
    return dir;
  };
  after(async () => {
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  });

  void it("makes the bus authority once, 0600, and reads the same one back", async () => {
    const dir = await stateDir();
    const made = await loadOrCreateAuthority(dir);
    assert.equal((await stat(join(dir, AUTHORITY_FILE))).mode & 0o777, 0o600);
    const again = await loadOrCreateAuthority(dir);
    assert.equal(again.operatorPublicKey, made.operatorPublicKey);
    assert.equal(again.accountPublicKey, made.accountPublicKey);
  });

  void it("refuses a damaged authority file instead of replacing it", async () => {
    const dir = await stateDir();
    await writeFile(join(dir, AUTHORITY_FILE), "{ not json");
    await assert.rejects(loadOrCreateAuthority(dir), AuthorityFileError);
    assert.equal(await readFile(join(dir, AUTHORITY_FILE), "utf8"), "{ not json");
  });

  void it("makes the controller's keys once, 0600, and refuses a damaged key file", async () => {
    const dir = await stateDir();
    const keys = await loadOrCreateControllerKeys(dir);
    assert.equal((await stat(join(dir, CONTROLLER_KEYS_FILE))).mode & 0o777, 0o600);
    assert.deepEqual(await loadOrCreateControllerKeys(dir), keys);
    await writeFile(join(dir, CONTROLLER_KEYS_FILE), '{"v":1}');
    await assert.rejects(loadOrCreateControllerKeys(dir), ControllerKeysError);
  });

  void it("reads back a join token it wrote, and refuses a damaged one without quoting it", () => {
    const token = {
      v: 1 as const,
      node: "node-a",
      servers: ["nats://127.0.0.1:4333"],
      creds: "-----BEGIN NATS USER JWT-----\nX\n------END NATS USER JWT------\n",
      secret: "S3CRET",
    };
    assert.deepEqual(parseJoinToken(encodeJoinToken(token), "node-a"), token);
    const damaged = encodeJoinToken({ ...token, node: "Node.A" });
    assert.throws(
      () => parseJoinToken(damaged, "node-a"),
      (err: unknown) => err instanceof JoinTokenError && !err.message.includes("S3CRET"),
    );
    assert.throws(() => parseJoinToken("not a token!", "node-a"), JoinTokenError);
  });

  void it("gives a node the instances it provides whole, and of the others only its own consumers", () => {
    const entry = (consumer: string, consumerNode: string, provider: string, providerNode: string) => ({
      consumer,
      consumerNode,
      interface: "postgres-database",
      login: `${consumer}_postgres`,
      values: {},
      derived: {},
      provider,
      providerNode,
    });
    const plan: Plan = {
      instances: [
        {
          provider: "pg1",
          node: "n1",
          interface: "postgres-database",
          consumers: [
            entry("a", "n1", "pg1", "n1"),
            entry("b", "n2", "pg1", "n1"),
            entry("c", "n3", "pg1", "n1"),
          ],
        },
        { provider: "pg3", node: "n3", interface: "postgres-database", consumers: [] },
      ],
    };
    assert.deepEqual(nodePlan(plan, "n1"), { instances: [plan.instances[0]] });
    assert.deepEqual(
      nodePlan(plan, "n2").instances.map((i) => [i.provider, i.consumers.map((c) => c.consumer)]),
      [["pg1", ["b"]]],
    );
    assert.deepEqual(
      nodePlan(plan, "n3").instances.map((i) => [i.provider, i.consumers.map((c) => c.consumer)]),
      [
        ["pg1", ["c"]],
        ["pg3", []],
      ],
    );
    assert.deepEqual(nodePlan(plan, "n4"), { instances: [] });
  });
});
