// A fleet change while the bus cannot store it: on a real 3-server cluster with two servers killed,
// JetStream has no quorum while plain requests still reach the controller. The change is accepted,
// `mesh status` says it waits and since when, and it is stored once the servers are back — never
// kept in memory alone and forgotten.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import {
  connectBus,
  createAuthority,
  credsFor,
  DESIRED_STATE_BUCKET,
  newUserKeys,
  openState,
} from "@mesh/bus";
import { loadStoredFleet, startController, WriteWaitsError, type Controller } from "@mesh/controller";
import { meshClusterConfigs, startNatsCluster, until, type NatsCluster } from "@mesh/testkit";
import type { BusAuthority } from "@mesh/bus";
import { meshInProcess as mesh, writeOperatorState } from "./run-mesh.ts";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
// MESH_CLUSTER_TEST_LOG=1 prints what the controller says, with the time.
const say = (level: string) => (message: string) => {
  if (process.env["MESH_CLUSTER_TEST_LOG"] === "1")
    process.stderr.write(`${new Date().toISOString()} ${level} ${message}\n`);
};
const logger = { info: say("info"), warn: say("warn"), error: say("error") };

function fleet(apps: readonly string[]): string {
  const notes = JSON.stringify(join(ROOT, "examples", "fleet", "notes", "module.json"));
  return (
    `nodes:\n  node-1: {}\nmodules:\n` +
    `  postgres:\n    manifest: ${JSON.stringify(join(ROOT, "providers", "postgres", "module.json"))}\n` +
    `    node: node-1\n    admin: { env: MESH_POSTGRES_URL }\n` +
    apps
      .map(
        (a) =>
          `  ${a}:\n    manifest: ${notes}\n    node: node-1\n    needs: { postgres-database: { values: { name: ${a} } } }\n`,
      )
      .join("")
  );
}

describe("a fleet change the bus cannot store now", { timeout: 240_000 }, () => {
  let authority: BusAuthority;
  let cluster: NatsCluster;
  let controller: Controller | undefined;
  let state: string;
  let fleetFile: string;

  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-fleet-unstored-"));
    fleetFile = join(state, "mesh.yaml");
    await writeFile(fleetFile, fleet(["notes"]));
    authority = await createAuthority();
    cluster = await startNatsCluster({ configure: meshClusterConfigs(authority) });
    controller = await until(
      "the controller to start on the cluster",
      () =>
        startController({
          stateDir: join(state, "controller"),
          fleetFile,
          servers: cluster.urls,
          authority,
          logger,
          watch: false,
        }),
      90,
    );
    await writeOperatorState(authority, state, cluster.urls[0] ?? "");
  });

  after(async () => {
    await controller?.stop();
    await cluster?.stop();
    await rm(state, { recursive: true, force: true });
  });

  // What each server answers alone: said when a wait fails.
  const perServer = async (): Promise<string> => {
    const lines: string[] = [];
    for (const url of cluster.urls) {
      lines.push(`${url}: ${JSON.stringify(await storedApps([url]).catch((e: Error) => e.message))}`);
    }
    return lines.join("\n");
  };

  const storedApps = async (servers: readonly string[] = cluster.urls): Promise<string[] | undefined> => {
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "reader",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    const nc = await connectBus({ servers, creds: credsFor(jwt, keys.seed), name: "reader" });
    try {
      const stored = await loadStoredFleet(await openState(nc, DESIRED_STATE_BUCKET));
      return stored?.modules.map((m) => m.name).sort();
    } finally {
      await nc.close();
    }
  };

  it("waits, is listed by mesh status with since when, and is stored once the bus can", async () => {
    assert.deepEqual(await until("the first fleet stored", () => storedApps(), 30), ["notes", "postgres"]);
    await cluster.kill(1);
    await cluster.kill(2);
    await writeFile(fleetFile, fleet(["notes", "blog"]));
    await assert.rejects(controller?.reload() ?? Promise.reject(new Error("no controller")), WriteWaitsError);
    const fleetWaits = (w: { what: string }) => /^the fleet read at /.test(w.what);
    const waits = controller?.status().waiting ?? [];
    assert.equal(waits.filter(fleetWaits).length, 1, JSON.stringify(waits));

    const shown = await until(
      "mesh status to answer on the one server left",
      async () => {
        const run = await mesh(["status", "--state", state]);
        return run.code === 0 ? run : undefined;
      },
      60,
    );
    assert.match(
      shown.stdout,
      /WAITS the fleet read at .*: the bus cannot store it now, since .*\d attempt\(s\)/,
    );
    const json = JSON.parse((await mesh(["status", "--json", "--state", state])).stdout) as {
      waiting: { what: string; since: string; attempts: number }[];
    };
    const listed = json.waiting.find(fleetWaits);
    assert.ok(listed !== undefined, JSON.stringify(json.waiting));
    assert.ok(!Number.isNaN(Date.parse(listed.since)));

    // Its lease cannot be renewed either: it stands by, and the accepted fleet still waits (for it
    // to lead again), never dropped for the one stored before.
    await until("the controller to stand by", () => (controller?.leading() === false ? true : undefined), 60);
    const stillWaits = controller?.status().waiting ?? [];
    assert.equal(stillWaits.filter(fleetWaits).length, 1, JSON.stringify(stillWaits));

    await cluster.start(1);
    await cluster.start(2);
    await until(
      "the waiting fleet stored",
      () => (controller?.status().waiting?.length === 0 ? true : undefined),
      90,
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; waiting: ${JSON.stringify(controller?.status().waiting)}`);
    });
    // Read until the change shows: a server just back may answer from before it (it catches up).
    const stored = await until(
      "the stored fleet to hold the change",
      async () => {
        const apps = await storedApps();
        return apps?.includes("blog") === true ? apps : undefined;
      },
      // As long as the controller had to store it: servers just restarted may answer "temporarily
      // unavailable" to a new connection for a while on a loaded machine.
      90,
    ).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; each server answers:\n${await perServer()}`);
    });
    assert.deepEqual(stored, ["blog", "notes", "postgres"]);
    // Servers just back may still lapse the lease once more: in the end nothing waits.
    await until(
      "mesh status to list nothing waiting",
      async () => {
        const after = await mesh(["status", "--json", "--state", state]);
        return after.code === 0 && (JSON.parse(after.stdout) as { waiting: unknown[] }).waiting.length === 0
          ? true
          : undefined;
      },
      90,
    );
  });
});
