// A controller killed with -9 after the bus refused a rotation, before the bus could store again:
// the refused password is committed late (as a server that kept it in its log commits it once its
// peers are back), and the controller started next over the same state directory puts the old
// password back, as the operator was told ("nothing changed"), listing the restore in its status
// until the bus stores it. The bus refuses by its own rule here: the sealed-passwords stream is
// given a largest message size no password fits, and then its usual one back.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  closeBus,
  connectBus,
  credsFor,
  newUserKeys,
  seal,
  SEALED_PASSWORDS_BUCKET,
  unseal,
} from "@mesh/bus";
import {
  loadOrCreateControllerKeys,
  RESTORES_FILE,
  saveAuthority,
  type RestoreIntent,
  type SealedPassword,
} from "@mesh/controller";
import { until } from "@mesh/testkit";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { startTestMesh, type TestMesh } from "./test-mesh.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const CHILD = fileURLToPath(new URL("./controller-process.ts", import.meta.url));
const STREAM = `KV_${SEALED_PASSWORDS_BUCKET}`;
const KEY = "app1/postgres-database";

void describe("a controller killed -9 after the bus refused a rotation", { timeout: 180_000 }, () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let admin: NatsConnection;
  let child: ChildProcess | undefined;

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    const keys = newUserKeys();
    const jwt = await mesh.authority.issueUser({
      name: "test-admin",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    admin = await connectBus({
      servers: [mesh.nats.url],
      creds: credsFor(jwt, keys.seed),
      name: "test-admin",
    });
  });
  after(async () => {
    if (child?.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
    await closeBus(admin);
    await mesh.stop();
    await rm(fleet.dir, { recursive: true, force: true });
  });

  // The bus refuses every new password (none fits in one byte), or takes them again.
  const refuseWrites = async (refuse: boolean): Promise<void> => {
    const jsm = await jetstreamManager(admin);
    await jsm.streams.update(STREAM, { max_msg_size: refuse ? 1 : -1 });
  };
  const kv = async (): Promise<KV> => new Kvm(admin).open(SEALED_PASSWORDS_BUCKET);
  const keptVersion = async (): Promise<string | undefined> =>
    (await (await kv()).get(KEY))?.json<SealedPassword>().version;

  void it("is followed by one that puts the old password back and lists it until the bus stores it", async () => {
    await saveAuthority(mesh.stateDir, mesh.authority);
    const spawned = spawn(
      process.execPath,
      ["--conditions=source", "--import", "tsx", CHILD, mesh.stateDir, fleet.fleetFile, mesh.nats.url],
      { cwd: root, stdio: ["pipe", "pipe", "inherit"] },
    );
    child = spawned;
    const lines = createInterface({ input: spawned.stdout! })[Symbol.asyncIterator]();
    const next = async (): Promise<string> => {
      const line = await lines.next();
      assert.equal(line.done, false, "the controller process ended");
      return String(line.value);
    };
    assert.equal(await next(), "started");
    const before = await until("the kept password", keptVersion, 30);

    await refuseWrites(true);
    spawned.stdin!.write(`rotate app1 postgres-database\n`);
    assert.equal(await next(), "BusCannotStoreError");
    // Written down before the bus was asked; killed before the bus could store again.
    const text = await readFile(join(mesh.stateDir, RESTORES_FILE), "utf8");
    const intent = (JSON.parse(text) as { restores: Record<string, RestoreIntent> }).restores[KEY];
    assert.ok(intent !== undefined, text);
    assert.equal(intent.kept.version, before);
    const [late] = intent.refused;
    assert.ok(late !== undefined && intent.refused.length === 1, text);
    spawned.kill("SIGKILL");
    await once(spawned, "exit");
    assert.equal(spawned.signalCode, "SIGKILL");

    // The refused password lands late; the bus refuses again, as it may when the next one starts.
    const keys = await loadOrCreateControllerKeys(mesh.stateDir);
    await refuseWrites(false);
    await (
      await kv()
    ).put(
      KEY,
      JSON.stringify({
        v: 1,
        sealed: await seal("the-late-password", keys.seal.publicKey),
        version: late,
        mintedAt: new Date().toISOString(),
      } satisfies SealedPassword),
    );
    await refuseWrites(true);

    const controller = await mesh.startController(fleet.fleetFile);
    const waits = await until(
      "the restore to be listed as waiting",
      () => (controller.status().waiting ?? []).find((w) => w.what.startsWith("app1's postgres-database")),
      30,
    );
    assert.match(waits.what, /a rotation the bus did not confirm is undone/);
    assert.equal(waits.since, intent.since, "since the rotation was refused, before the kill");
    assert.equal(await keptVersion(), late, "the bus still holds the late one");

    await refuseWrites(false);
    await until("the kept password to be the one before the refused rotation", async () =>
      (await keptVersion()) === before ? true : undefined,
    );
    const restored = (await (await kv()).get(KEY))?.json<SealedPassword>();
    assert.notEqual(await unseal(restored?.sealed ?? "", keys.seal), "the-late-password");
    await until("the restore to be settled", async () =>
      (controller.status().waiting ?? []).length === 0 &&
      Object.keys(
        (JSON.parse(await readFile(join(mesh.stateDir, RESTORES_FILE), "utf8")) as { restores: object })
          .restores,
      ).length === 0
        ? true
        : undefined,
    );
  });
});
