import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startAgent } from "../src/index.ts";
import { InvalidDeliveryError, parseDelivery } from "../src/delivery.ts";
import { KeysFileError } from "../src/node-identity.ts";
import { JoinTokenError, parseJoinToken, writeFileAtomic } from "@mesh/bus";
import { recordingLogger } from "./test-mesh.ts";

const token = (fields: Record<string, unknown>): string =>
  Buffer.from(JSON.stringify(fields)).toString("base64url");
const GOOD = {
  v: 1,
  node: "n1",
  servers: ["nats://127.0.0.1:4333"],
  creds: "-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n",
  secret: "s3cr3t-value",
};

void describe("a node's files and inputs", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-agent-files-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("writes a file whole with its mode, and leaves one that already holds the same bytes alone", async () => {
    const path = join(dir, "a", "b", "secret");
    assert.equal(await writeFileAtomic(path, "pw", 0o600), "written");
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    const first = await stat(path);
    assert.equal(await writeFileAtomic(path, "pw", 0o600), "unchanged");
    assert.equal((await stat(path)).ino, first.ino);
    assert.equal(await writeFileAtomic(path, "pw", 0o644), "written", "a different mode is a change");
    assert.equal(await writeFileAtomic(path, "pw2", 0o644), "written");
    assert.equal(await readFile(path, "utf8"), "pw2");
  });

  void it("reads a join token for its node, and refuses one for another node without quoting its secret", () => {
    assert.equal(parseJoinToken(token(GOOD), "n1").secret, GOOD.secret);
    for (const [bad, why] of [
      ["not-a-token", /not a join token/],
      [token({ ...GOOD, v: 2 }), /version 2/],
      [token({ ...GOOD, node: "n2" }), /made for node n2/],
      [token({ ...GOOD, servers: [] }), /no bus servers/],
      [token({ ...GOOD, creds: "x" }), /no enrollment credentials/],
    ] as const) {
      assert.throws(
        () => parseJoinToken(bad, "n1"),
        (err: unknown) =>
          err instanceof JoinTokenError && why.test(err.message) && !err.message.includes(GOOD.secret),
      );
    }
  });

  void it("refuses a delivery for another node, or one whose secrets are not keyed consumer/interface", () => {
    const delivery = {
      node: "n1",
      generation: 1,
      fleetFile: "/srv/mesh.yaml",
      modules: [{ name: "app", manifest: "/srv/app/module.json" }],
      plan: { instances: [] },
      secrets: {},
    };
    assert.deepEqual(parseDelivery(delivery, "n1"), delivery);
    const refused = (value: unknown, field: RegExp): void => {
      assert.throws(
        () => parseDelivery(value, "n1"),
        (err: unknown) => err instanceof InvalidDeliveryError && field.test(err.message),
      );
    };
    refused({ ...delivery, node: "n2" }, /node is "n2", not n1/);
    refused({ ...delivery, secrets: { "../etc/passwd": "box" } }, /secrets\["\.\.\/etc\/passwd"\]/);
    refused({ ...delivery, modules: [{ name: "app", manifest: "module.json" }] }, /modules\[0\]\.manifest/);
    // A delivered manifest is text of a manifest's size; its content is checked as the module starts.
    refused(
      {
        ...delivery,
        modules: [{ name: "app", manifest: "/m/app/module.json", manifestText: { name: "app" } }],
      },
      /modules\[0\]\.manifestText/,
    );
    refused(
      {
        ...delivery,
        modules: [{ name: "app", manifest: "/m/app/module.json", manifestText: "x".repeat(1024 * 1024 + 1) }],
      },
      /modules\[0\]\.manifestText is not a manifest's text of at most/,
    );
    refused(
      {
        ...delivery,
        plan: { instances: [{ provider: "db", node: "n1", interface: "kv", consumers: [{}] }] },
      },
      /plan\.instances\[0\]\.consumers\[0\]\.consumer/,
    );
  });

  void it("refuses to start with a damaged keys file rather than replace it", async () => {
    const stateDir = join(dir, "damaged");
    await mkdir(stateDir);
    await writeFile(join(stateDir, "keys.json"), "{ not json");
    await assert.rejects(
      startAgent({ node: "n1", stateDir, logger: recordingLogger(), joinToken: token(GOOD) }),
      KeysFileError,
    );
    assert.equal(await readFile(join(stateDir, "keys.json"), "utf8"), "{ not json");
  });
});
