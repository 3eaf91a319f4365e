// A controller killed with -9 after the bus refused a rotation, before the bus could store again:
// the refused password is committed late (as a server that kept it in its log commits it once its
// peers are back). The controller started next over the same state directory, or a standby on
// another machine that has only the bus to go by, puts the old password back, as the operator was
// told ("nothing changed"), and lists the restore in its status until the bus stores it. The bus
// refuses by its own rule here: the sealed-passwords stream is given a largest message size no
// password fits, and then its usual one back.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { jetstreamManager } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { closeBus, seal, SEALED_PASSWORDS_BUCKET, unseal } from "@mesh/bus";
import {
  copyStandbyState,
  loadOrCreateAuthority,
  loadOrCreateControllerKeys,
  saveAuthority,
  startController,
  type Controller,
} from "@mesh/controller";
import { RESTORES_FILE, type RestoreIntent } from "../src/restore-intents.ts";
import { type SealedPassword } from "../src/password-store.ts";
import { until, quietLogger } from "@mesh/testkit";
import { makeFleetDir, type FleetDir } from "./fleet-dir.ts";
import { connectAsAdmin, startTestMesh, type TestMesh } from "./test-mesh.ts";

const root = fileURLToPath(new URL("../../..", import.meta.url));
const CHILD = fileURLToPath(new URL("./controller-process.ts", import.meta.url));
const STREAM = `KV_${SEALED_PASSWORDS_BUCKET}`;
const KEY = "app1/postgres-database";

void describe("a controller killed -9 after the bus refused a rotation", { timeout: 240_000 }, () => {
  let mesh: TestMesh;
  let fleet: FleetDir;
  let admin: NatsConnection;
  let child: ChildProcess | undefined;
  const dirs: string[] = [];
  const controllers: Controller[] = [];

  before(async () => {
    mesh = await startTestMesh();
    fleet = await makeFleetDir();
    await saveAuthority(mesh.stateDir, mesh.authority);
    admin = await connectAsAdmin(mesh.authority, mesh.nats.url, "test-admin");
  });
  after(async () => {
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      child.kill("SIGKILL");
      await once(child, "exit");
    }
    await Promise.all(controllers.map((c) => c.stop()));
    await closeBus(admin);
    await mesh.stop();
    await Promise.all([fleet.dir, ...dirs].map((d) => rm(d, { recursive: true, force: true })));
  });

  // The bus refuses every new password (none fits in one byte), or takes them again.
  const refuseWrites = async (refuse: boolean): Promise<void> => {
    const jsm = await jetstreamManager(admin);
    await jsm.streams.update(STREAM, { max_msg_size: refuse ? 1 : -1 });
  };
  const kv = async (): Promise<KV> => new Kvm(admin).open(SEALED_PASSWORDS_BUCKET);
  const kept = async (): Promise<SealedPassword | undefined> =>
    (await (await kv()).get(KEY))?.json<SealedPassword>();
  const restoresIn = async (dir: string): Promise<Record<string, RestoreIntent>> =>
    (
      JSON.parse(await readFile(join(dir, RESTORES_FILE), "utf8")) as {
        restores: Record<string, RestoreIntent>;
      }
    ).restores;

  // Starts a controller in a process of its own over the mesh's state directory, has it rotate
  // app1's password while the bus refuses it, and kills it with -9: what it wrote down is returned.
  async function killAfterRefusedRotation(): Promise<{ intent: RestoreIntent; late: string }> {
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
    const before = await until("the kept password", kept, 30);

    await refuseWrites(true);
    spawned.stdin!.write(`rotate app1 postgres-database\n`);
    assert.equal(await next(), "BusCannotStoreError");
    // Written down before the bus was asked.
    const intent = (await restoresIn(mesh.stateDir))[KEY];
    assert.ok(intent !== undefined);
    assert.equal(intent.kept.version, before.version);
    const [late] = intent.refused;
    assert.ok(late !== undefined && intent.refused.length === 1, JSON.stringify(intent));
    spawned.kill("SIGKILL");
    await once(spawned, "exit");
    assert.equal(spawned.signalCode, "SIGKILL");
    return { intent, late };
  }

  // The refused password (version `late`) lands late, naming what it replaces when the refused
  // write itself lands, and not when only its confirmation was lost; then the bus refuses again, as
  // it may when the next controller starts.
  async function landLate(late: string, replaces?: SealedPassword): Promise<void> {
    const keys = await loadOrCreateControllerKeys(mesh.stateDir);
    const record: SealedPassword = {
      v: 1,
      sealed: await seal("the-late-password", keys.seal.publicKey),
      version: late,
      mintedAt: new Date().toISOString(),
      ...(replaces === undefined ? {} : { replaces }),
    };
    await refuseWrites(false);
    await (await kv()).put(KEY, JSON.stringify(record));
    await refuseWrites(true);
  }

  // The restore is listed as waiting, since the rotation was refused; then, once the bus takes
  // writes, the old password is back and nothing waits.
  async function restoredBy(controller: Controller, dir: string, intent: RestoreIntent): Promise<void> {
    const waits = await until(
      "the restore to be listed as waiting",
      () => (controller.status().waiting ?? []).find((w) => w.what.includes("app1's postgres-database")),
      60,
    );
    assert.match(waits.what, /rotation the bus did not confirm \(the password before it is put back/);
    assert.notEqual((await kept())?.version, intent.kept.version, "the bus still holds the late one");

    await refuseWrites(false);
    await until("the kept password to be the one before the refused rotation", async () =>
      (await kept())?.version === intent.kept.version ? true : undefined,
    );
    const keys = await loadOrCreateControllerKeys(dir);
    assert.notEqual(await unseal((await kept())?.sealed ?? "", keys.seal), "the-late-password");
    assert.equal((await kept())?.replaces, undefined);
    await until("the restore to be settled", async () =>
      (controller.status().waiting ?? []).length === 0 && Object.keys(await restoresIn(dir)).length === 0
        ? true
        : undefined,
    );
  }

  void it("is followed by one over the same state that puts the old password back", async () => {
    const { intent, late } = await killAfterRefusedRotation();
    // Only the confirming write lost (the bus stored it as a confirmed rotation): the file is all
    // that says it must not stand.
    await landLate(late);
    const controller = await startController({
      stateDir: mesh.stateDir,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: mesh.authority,
      logger: quietLogger,
      watch: false,
    });
    controllers.push(controller);
    const waits = await until("the restore to be listed", () =>
      (controller.status().waiting ?? []).find((w) => w.what.includes("app1's postgres-database")),
    );
    assert.equal(waits.since, intent.since, "since the rotation was refused, before the kill");
    await restoredBy(controller, mesh.stateDir, intent);
    await controller.stop();
  });

  void it("is followed by a standby on another machine that puts the old password back", async () => {
    const { intent, late } = await killAfterRefusedRotation();
    // The refused write itself lands: it names the password it replaces.
    await landLate(late, intent.kept);
    const other = await mkdtemp(join(tmpdir(), "mesh-standby-state-"));
    dirs.push(other);
    await copyStandbyState(mesh.stateDir, other);
    const standby = await startController({
      stateDir: other,
      fleetFile: fleet.fleetFile,
      servers: [mesh.nats.url],
      authority: await loadOrCreateAuthority(other),
      logger: quietLogger,
      watch: false,
      standby: true,
      leaseTimings: { renewEveryMs: 500, takeOverAfterMs: 2_000, stepDownAfterMs: 1_500 },
    });
    controllers.push(standby);
    await until("the standby to lead", () => standby.leading(), 60);
    await restoredBy(standby, other, intent);
  });
});
