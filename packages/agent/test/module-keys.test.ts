import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { createAuthority, credsFor, type BusAuthority } from "@mesh/bus";
import type { Delivery, ModuleCredential } from "@mesh/manifest";
import { ledgersPath, moduleCredsPath, moduleKeysPath } from "../src/index.ts";
import { InvalidDeliveryError, parseDelivery } from "../src/delivery.ts";
import { ModuleKeyring, subjectOf, type ModuleKeyPairs } from "../src/module-keys.ts";
import { recordingLogger } from "./test-mesh.ts";

const NOBODY = { pub: { allow: [] }, sub: { allow: [] } };

const mode = async (path: string): Promise<number> => (await stat(path)).mode & 0o777;
const exists = (path: string): Promise<boolean> =>
  stat(path).then(
    () => true,
    () => false,
  );

function delivery(
  modules: readonly string[],
  more: { credentials?: Record<string, ModuleCredential>; replaceKeys?: Record<string, string> } = {},
): Delivery {
  return {
    node: "n1",
    generation: 1,
    fleetFile: "/srv/mesh.yaml",
    modules: modules.map((name) => ({ name, manifest: `/srv/${name}/module.json` })),
    plan: { instances: [] },
    secrets: {},
    ...more,
  };
}

void describe("a node's module keys and the credentials issued for them", () => {
  let authority: BusAuthority;
  let stateDir: string;
  const logger = recordingLogger();
  const keyring = (): ModuleKeyring => new ModuleKeyring(stateDir, logger);
  const keysOf = async (module: string): Promise<ModuleKeyPairs> =>
    JSON.parse(await readFile(moduleKeysPath(stateDir, module), "utf8")) as ModuleKeyPairs;
  const issue = async (keys: ModuleKeyPairs): Promise<ModuleCredential> => ({
    bus: await authority.issueUser({ name: "m", publicKey: keys.bus.publicKey, permissions: NOBODY }),
    ledger: await authority.issueUser({ name: "m", publicKey: keys.ledger.publicKey, permissions: NOBODY }),
  });
  const ledgers = async (): Promise<Record<string, { jwt: string; seed: string }>> =>
    JSON.parse(await readFile(ledgersPath(stateDir), "utf8")) as Record<
      string,
      { jwt: string; seed: string }
    >;

  before(async () => {
    authority = await createAuthority();
    stateDir = await mkdtemp(join(tmpdir(), "mesh-module-keys-"));
  });
  after(async () => {
    await rm(stateDir, { recursive: true, force: true });
  });

  void it("makes each module two key pairs of its own (0600), keeps them, and reports only the public keys", async () => {
    const ring = keyring();
    assert.equal(await ring.reconcile(delivery(["notes", "blog"])), true);
    const notes = await keysOf("notes");
    assert.equal(await mode(moduleKeysPath(stateDir, "notes")), 0o600);
    assert.notEqual(notes.bus.publicKey, notes.ledger.publicKey);
    assert.notEqual(notes.bus.publicKey, (await keysOf("blog")).bus.publicKey);
    const reported = ring.publicKeys();
    assert.deepEqual(reported["notes"], { bus: notes.bus.publicKey, ledger: notes.ledger.publicKey });
    assert.equal(JSON.stringify(reported).includes(notes.bus.seed), false);

    const again = keyring();
    assert.equal(await again.reconcile(delivery(["notes", "blog"])), false, "a restart makes nothing new");
    assert.deepEqual(again.publicKeys(), reported);
    assert.equal(
      logger.lines.some((l) => l.includes(notes.bus.seed) || l.includes(notes.ledger.seed)),
      false,
    );
  });

  void it("writes bus.creds and the ledgers file (0600) only from JWTs issued for the module's own keys", async () => {
    const ring = keyring();
    const d = delivery(["notes", "blog"]);
    await ring.reconcile(d);
    const notes = await keysOf("notes");
    const blog = await keysOf("blog");
    const forNotes = await issue(notes);
    // blog's JWTs are for keys it does not hold (notes'): not written.
    const result = await ring.writeCredentials({ ...d, credentials: { notes: forNotes, blog: forNotes } });
    assert.equal(
      await readFile(moduleCredsPath(stateDir, "notes"), "utf8"),
      new TextDecoder().decode(credsFor(forNotes.bus, notes.bus.seed)),
    );
    assert.equal(await mode(moduleCredsPath(stateDir, "notes")), 0o600);
    assert.equal(await exists(moduleCredsPath(stateDir, "blog")), false);
    assert.deepEqual([...result.busUsers], [["notes", notes.bus.publicKey]]);
    assert.deepEqual(await ledgers(), { notes: { jwt: forNotes.ledger, seed: notes.ledger.seed } });
    assert.equal(await mode(ledgersPath(stateDir)), 0o600);
    assert.equal(subjectOf(forNotes.ledger), notes.ledger.publicKey);
    assert.notEqual(blog.bus.publicKey, notes.bus.publicKey);

    const same = await ring.writeCredentials({ ...d, credentials: { notes: forNotes } });
    assert.equal(same.written, 0, "nothing rewritten the same");
  });

  void it("makes new keys when asked to replace the current bus key, keeping the old credential until the new one comes", async () => {
    const ring = keyring();
    const old = await keysOf("notes");
    const oldCreds = await readFile(moduleCredsPath(stateDir, "notes"), "utf8");
    const oldLedger = (await ledgers())["notes"];
    const stale = delivery(["notes", "blog"], { replaceKeys: { notes: "U" + "A".repeat(55) } });
    assert.equal(await ring.reconcile(stale), false, "a key it does not hold is not replaced");

    const asked = delivery(["notes", "blog"], {
      credentials: { notes: await issue(old) },
      replaceKeys: { notes: old.bus.publicKey },
    });
    assert.equal(await ring.reconcile(asked), true);
    const fresh = await keysOf("notes");
    assert.notEqual(fresh.bus.publicKey, old.bus.publicKey);
    assert.notEqual(fresh.ledger.publicKey, old.ledger.publicKey);
    const meanwhile = await ring.writeCredentials(asked);
    assert.equal(await readFile(moduleCredsPath(stateDir, "notes"), "utf8"), oldCreds);
    assert.equal(meanwhile.busUsers.get("notes"), old.bus.publicKey);
    assert.deepEqual((await ledgers())["notes"], oldLedger);

    const issued = delivery(["notes", "blog"], { credentials: { notes: await issue(fresh) } });
    assert.equal(await ring.reconcile(issued), false);
    const now = await ring.writeCredentials(issued);
    assert.equal(now.busUsers.get("notes"), fresh.bus.publicKey);
    assert.equal((await ledgers())["notes"]?.seed, fresh.ledger.seed);
  });

  void it("removes the keys and creds of a module no longer delivered, and leaves {} in the ledgers file", async () => {
    const ring = keyring();
    await ring.reconcile(delivery([]));
    await ring.writeCredentials(delivery([]));
    assert.equal(await exists(moduleKeysPath(stateDir, "notes")), false);
    assert.equal(await exists(moduleCredsPath(stateDir, "notes")), false);
    assert.deepEqual(await ledgers(), {});
    assert.deepEqual(ring.publicKeys(), {});
    assert.ok(
      logger.lines.some((l) => l.includes("removed the key pairs and bus credential of module notes")),
    );
  });

  void it("replaces a damaged keys file with new key pairs, and says so", async () => {
    await keyring().reconcile(delivery(["blog"]));
    const before = await keysOf("blog");
    await writeFile(moduleKeysPath(stateDir, "blog"), "{ not json", { mode: 0o600 });
    const ring = keyring();
    assert.equal(await ring.reconcile(delivery(["blog"])), true);
    assert.notEqual((await keysOf("blog")).bus.publicKey, before.bus.publicKey);
    assert.ok(
      logger.lines.some(
        (l) => l.startsWith("warn: module blog's keys file") && l.includes("not a keys file"),
      ),
    );
  });

  void it("refuses a delivery whose credentials are not JWTs, or are for a module the node does not run", () => {
    const ok = delivery(["notes"], { credentials: { notes: { bus: "a.b.c", ledger: "d.e.f" } } });
    assert.equal(parseDelivery(ok, "n1"), ok);
    for (const bad of [
      delivery(["notes"], { credentials: { blog: { bus: "a.b.c", ledger: "d.e.f" } } }),
      delivery(["notes"], { credentials: { notes: { bus: "not a jwt", ledger: "d.e.f" } } }),
      delivery(["notes"], { replaceKeys: { notes: "SUSEEDSHOULDNEVERBEHERE" } }),
      { ...delivery(["notes"]), credentials: [] },
    ]) {
      assert.throws(() => parseDelivery(bad, "n1"), InvalidDeliveryError);
    }
  });
});
