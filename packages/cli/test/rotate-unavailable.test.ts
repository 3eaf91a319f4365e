// `mesh rotate` while the bus cannot store the new password: on a real 3-server cluster with two
// servers killed, JetStream has no quorum while plain requests still reach the controller. The
// rotation changes nothing and says so in the operator's words, with exit 3; once the servers are
// back, the kept password is the old one (a refused write that the bus committed late is undone)
// and a rotation works.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  createAuthority,
  credsFor,
  newUserKeys,
  SEALED_PASSWORDS_BUCKET,
  type BusAuthority,
} from "@mesh/bus";
import { OPERATOR_IDENTITY, operatorPermissions, startController, type Controller } from "@mesh/controller";
import { meshClusterConfigs, startNatsCluster, until, type NatsCluster, quietLogger } from "@mesh/testkit";
import { meshInProcess as mesh } from "./run-mesh.ts";

const FLEET = fileURLToPath(new URL("../../../examples/fleet/mesh.yaml", import.meta.url));

describe("mesh rotate while the bus cannot store", { timeout: 240_000 }, () => {
  let authority: BusAuthority;
  let cluster: NatsCluster;
  let controller: Controller | undefined;
  let state: string;

  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-rotate-unstored-"));
    authority = await createAuthority();
    cluster = await startNatsCluster({ configure: meshClusterConfigs(authority) });
    controller = await until(
      "the controller to start on the cluster",
      () =>
        startController({
          stateDir: join(state, "controller"),
          fleetFile: FLEET,
          servers: cluster.urls,
          authority,
          logger: quietLogger,
          watch: false,
        }),
      90,
    );
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: OPERATOR_IDENTITY,
      publicKey: keys.publicKey,
      permissions: operatorPermissions(),
    });
    await writeFile(join(state, "operator.creds"), credsFor(jwt, keys.seed), { mode: 0o600 });
    await writeFile(join(state, "bus.json"), JSON.stringify({ servers: cluster.urls }));
  });

  after(async () => {
    await controller?.stop();
    await cluster?.stop();
    await rm(state, { recursive: true, force: true });
  });

  it("changes nothing and exits 3 with 'the bus cannot store it now; nothing changed, try again'", async () => {
    const version = async (): Promise<string | undefined> => {
      const { Kvm } = await import("@nats-io/kv");
      const { connectBus } = await import("@mesh/bus");
      const keys = newUserKeys();
      const jwt = await authority.issueUser({
        name: "reader",
        publicKey: keys.publicKey,
        permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
      });
      const nc = await connectBus({ servers: cluster.urls, creds: credsFor(jwt, keys.seed), name: "reader" });
      try {
        const kv = await new Kvm(nc).open(SEALED_PASSWORDS_BUCKET);
        const entry = await kv.get("notes/postgres-database");
        return entry === null ? undefined : (entry.json<{ version: string }>().version ?? undefined);
      } finally {
        await nc.close();
      }
    };
    const before = await until("the kept password", version, 30);

    await cluster.kill(1);
    await cluster.kill(2);
    const refused = await until(
      "the controller to answer on the one server left",
      async () => {
        const run = await mesh(["rotate", "notes", "postgres-database", "--wait", "0", "--state", state]);
        return /no controller answers|does not answer/.test(run.stderr) ? undefined : run;
      },
      60,
    );
    assert.equal(refused.code, 3, refused.stderr);
    assert.match(refused.stderr, /the bus cannot store it now; nothing changed, try again/);
    assert.doesNotMatch(refused.stderr, /jetstream|JetStream|timeout|stream/i);

    await cluster.start(1);
    await cluster.start(2);
    // The refused write may have been kept in the log of the one server left and committed once
    // its peers came back; the controller puts the old password back, so the kept one is the old.
    await until(
      "the kept password to be the one before the refused rotation",
      async () => ((await version()) === before ? true : undefined),
      60,
    );
    const rotated = await until(
      "a rotation once the servers are back",
      async () => {
        const run = await mesh(["rotate", "notes", "postgres-database", "--wait", "0", "--state", state]);
        return run.code === 0 ? run : undefined;
      },
      60,
    );
    assert.match(rotated.stdout, /rotated/);
    assert.notEqual(await version(), before);
  });
});
