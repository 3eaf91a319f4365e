import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  copyStandbyState,
  loadOrCreateAuthority,
  loadOrCreateControllerKeys,
  loadOrCreateToken,
  operatorTokenPath,
  scrapeTokenPath,
} from "@mesh/controller";
import { AUTHORITY_FILE, AuthorityFileError } from "../src/authority-file.ts";
import { CONTROLLER_KEYS_FILE, ControllerKeysError } from "../src/controller-keys.ts";
import { nodePlan } from "@mesh/manifest";
import { StandbyStateError } from "../src/standby-state.ts";
import { TokenFileError } from "../src/secret-token.ts";
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

  void it("makes the operator and scrape tokens once, 0600, distinct, and reads the same ones back", async () => {
    const dir = await stateDir();
    const operator = await loadOrCreateToken(operatorTokenPath(dir), "operator token");
    const scrape = await loadOrCreateToken(scrapeTokenPath(dir), "scrape token");
    assert.match(operator, /^[A-Za-z0-9_-]{43}$/, "256 bits, base64url");
    assert.notEqual(operator, scrape);
    for (const file of [operatorTokenPath(dir), scrapeTokenPath(dir)])
      assert.equal((await stat(file)).mode & 0o777, 0o600, file);
    assert.equal(await loadOrCreateToken(operatorTokenPath(dir), "operator token"), operator);
    assert.equal(await readFile(operatorTokenPath(dir), "utf8"), `${operator}\n`);
  });

  void it("refuses a token file others may read, one that is not a file, and one holding no token, changing none", async () => {
    const dir = await stateDir();
    const open = join(dir, "open.token");
    await writeFile(open, "a-token-of-the-operators-own-making\n", { mode: 0o644 });
    await chmod(open, 0o644);
    await assert.rejects(
      loadOrCreateToken(open, "operator token"),
      (err: unknown) => err instanceof TokenFileError && /chmod 600/.test(err.message),
    );
    assert.equal((await stat(open)).mode & 0o777, 0o644, "left as it was");
    await chmod(open, 0o600);
    assert.equal(await loadOrCreateToken(open, "operator token"), "a-token-of-the-operators-own-making");
    const short = join(dir, "short.token");
    await writeFile(short, "abc\n", { mode: 0o600 });
    await assert.rejects(loadOrCreateToken(short, "operator token"), /does not hold a token/);
    await mkdir(join(dir, "a-directory"));
    await assert.rejects(loadOrCreateToken(join(dir, "a-directory"), "scrape token"), /not a regular file/);
    // A link is followed to what it names, which is held to the same rules.
    await symlink("/etc/passwd", join(dir, "link.token"));
    await assert.rejects(loadOrCreateToken(join(dir, "link.token"), "operator token"), /may be read/);
    await symlink("/dev/zero", join(dir, "device.token"));
    await assert.rejects(
      loadOrCreateToken(join(dir, "device.token"), "operator token"),
      /not a regular file/,
    );
    await symlink(open, join(dir, "kept.token"));
    assert.equal(
      await loadOrCreateToken(join(dir, "kept.token"), "operator token"),
      "a-token-of-the-operators-own-making",
    );
  });

  void it("gives a standby the leader's tokens with its keys, and refuses a standby that made its own", async () => {
    const leader = await stateDir();
    await loadOrCreateAuthority(leader);
    await loadOrCreateControllerKeys(leader);
    const operator = await loadOrCreateToken(operatorTokenPath(leader), "operator token");
    const scrape = await loadOrCreateToken(scrapeTokenPath(leader), "scrape token");
    const standby = join(await stateDir(), "controller");
    await copyStandbyState(leader, standby);
    assert.equal(await loadOrCreateToken(operatorTokenPath(standby), "operator token"), operator);
    assert.equal(await loadOrCreateToken(scrapeTokenPath(standby), "scrape token"), scrape);
    assert.equal((await stat(operatorTokenPath(standby))).mode & 0o777, 0o600);
    await copyStandbyState(leader, standby); // again: the same files, nothing to do

    const own = join(await stateDir(), "controller");
    await mkdir(own);
    await loadOrCreateToken(operatorTokenPath(own), "operator token");
    await assert.rejects(
      copyStandbyState(leader, own),
      (err: unknown) => err instanceof StandbyStateError && /takes the leader's/.test(err.message),
    );

    // A leader without tokens in its controller directory (kept elsewhere, or an older mesh): keys only.
    const older = await stateDir();
    await loadOrCreateAuthority(older);
    await loadOrCreateControllerKeys(older);
    const third = join(await stateDir(), "controller");
    await copyStandbyState(older, third);
    await assert.rejects(stat(operatorTokenPath(third)), { code: "ENOENT" });
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
