// `mesh controller --bus`: the controller as a daemon of its own against an existing 3-server NATS
// cluster that trusts the mesh's operator (as `mesh bus-config` writes it), with no agent and no
// nats-server of its own. The CLI's reads find it from the state directory, or from `--bus`.
import assert from "node:assert/strict";
import { access, mkdtemp, readFile, rm } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { decodeJoinToken } from "@mesh/bus";
import { loadOrCreateAuthority } from "@mesh/controller";
import { meshClusterConfigs, startNatsCluster, until, type NatsCluster } from "@mesh/testkit";
import { meshInProcess as mesh, runMesh, startMesh, type MeshProcess } from "./run-mesh.ts";

const FLEET = fileURLToPath(new URL("../../../examples/fleet/mesh.yaml", import.meta.url));

describe("mesh controller against a NATS cluster", { timeout: 240_000 }, () => {
  let state: string;
  let cluster: NatsCluster | undefined;
  let controller: MeshProcess | undefined;

  before(async () => {
    state = await mkdtemp(join(tmpdir(), "mesh-controller-"));
    // The cluster trusts the authority of this state directory, as `mesh bus-config --state` makes it.
    cluster = await startNatsCluster({
      configure: meshClusterConfigs(await loadOrCreateAuthority(join(state, "controller"))),
    });
    controller = startMesh(["controller", FLEET, "--state", state, "--bus", cluster.urls.join(",")]);
    controller.child.stdin?.end();
    await controller.waitFor(/3\/3 the controller serves/);
  });

  after(async () => {
    if (controller !== undefined && controller.child.exitCode === null) {
      controller.child.kill("SIGKILL");
      await controller.done.catch(() => {});
    }
    await cluster?.stop();
    await rm(state, { recursive: true, force: true });
  });

  it("serves mesh status from the state directory and from --bus, with no nats-server of its own", async () => {
    const fromState = await mesh(["status", "--json", "--state", state]);
    assert.equal(fromState.code, 0, fromState.stderr);
    const answer = JSON.parse(fromState.stdout) as { nodes: { name: string }[] };
    assert.deepEqual(
      answer.nodes.map((n) => n.name),
      ["node-1"],
    );
    const bus = JSON.parse(await readFile(join(state, "bus.json"), "utf8")) as { servers: string[] };
    assert.deepEqual(bus.servers, cluster?.urls, "bus.json names the cluster");
    const fromFlag = await mesh(["status", "--json", "--state", state, "--bus", cluster?.urls[2] ?? ""]);
    assert.equal(fromFlag.code, 0, fromFlag.stderr);
    await assert.rejects(access(join(state, "bus", "nats.pid")), "no embedded nats-server was started");
    assert.match(controller?.output() ?? "", /no nats-server is started here/);
  });

  it("writes a join token for every node, naming the cluster's servers", async () => {
    const token = decodeJoinToken((await readFile(join(state, "join", "node-1.token"), "utf8")).trim());
    assert.deepEqual(token.servers, cluster?.urls);
    assert.match(controller?.output() ?? "", /node node-1 joins with: mesh agent --node node-1 --join /);
  });

  it("refuses a bad --bus (exit 2) and a second daemon on the same state directory (exit 1)", async () => {
    const bad = await mesh(["controller", FLEET, "--state", state, "--bus", "http://x:1"]);
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /--bus "http:\/\/x:1" is not a bus URL/);
    const second = await runMesh(["controller", FLEET, "--state", state, "--bus", cluster?.urls[0] ?? ""]);
    assert.equal(second.code, 1, second.stderr);
    assert.match(second.stderr, /mesh controller/, "it names the process that holds the state");
  });

  it("stops on SIGTERM with exit 0 and says so", async () => {
    controller?.child.kill("SIGTERM");
    const run = await controller?.done;
    assert.equal(run?.code, 0, run?.stderr);
    assert.match(run?.stderr ?? "", /stopping the controller\n[\s\S]*stopped/);
  });
  it("a second controller started with --standby-of stands by, names the leader, and leads once the leader is killed", async () => {
    // The leader again (the test before stopped it), on the same state and cluster.
    controller = startMesh(["controller", FLEET, "--state", state, "--bus", cluster?.urls.join(",") ?? ""]);
    controller.child.stdin?.end();
    await controller.waitFor(/3\/3 the controller serves/);
    const standbyState = await mkdtemp(join(tmpdir(), "mesh-standby-"));
    const standby = startMesh([
      "controller",
      FLEET,
      "--state",
      standbyState,
      "--standby-of",
      state,
      "--bus",
      cluster?.urls.join(",") ?? "",
    ]);
    standby.child.stdin?.end();
    try {
      await standby.waitFor(/3\/3 the controller serves/);
      // Both controllers answer `mesh status` on the bus, whichever is first: pick the standby's own
      // answer by its id (its host and controller state directory).
      type Lead = { controller?: { self: string; leading: boolean; leader?: string | null } };
      const standbyId = `${hostname()}:${join(standbyState, "controller")}`;
      const standbyAnswer = async (): Promise<Lead["controller"]> => {
        for (let i = 0; i < 20; i++) {
          const run = await mesh(["status", "--json", "--state", standbyState]);
          const answer = run.code === 0 ? (JSON.parse(run.stdout) as Lead).controller : undefined;
          if (answer?.self === standbyId) return answer;
        }
        return undefined;
      };
      const before = await until("the standby's own status answer", standbyAnswer, 30);
      assert.equal(before.leading, false, "the standby does not lead while the leader holds the lease");
      assert.ok(before.leader !== undefined && before.leader !== standbyId, "it names the other as leader");
      const began = Date.now();
      controller?.child.kill("SIGKILL");
      await controller?.done.catch(() => {});
      const after = await until(
        "the standby to lead",
        async () => ((await standbyAnswer())?.leading === true ? true : undefined),
        { seconds: 60, everyMs: 500 },
      );
      assert.equal(after, true);
      // It took the leader's tokens: the operator's scripts and Prometheus are answered the same.
      const tokenOf = (dir: string, name: string) => readFile(join(dir, "controller", name), "utf8");
      for (const name of ["operator.token", "scrape.token"])
        assert.equal(await tokenOf(standbyState, name), await tokenOf(state, name), name);
      const link = await mesh(["dashboard", "--state", standbyState]);
      assert.equal(link.code, 0, link.stderr);
      const standbyUrl = new URL(link.stdout.trim()).origin;
      const read = await fetch(`${standbyUrl}/api/session`, {
        headers: { authorization: `Bearer ${(await tokenOf(state, "operator.token")).trim()}` },
      });
      assert.equal(read.status, 200, "the leader's operator token opens the standby's API");
      console.log(
        `the standby led ${((Date.now() - began) / 1000).toFixed(1)} s after the leader was killed (goal 20 s)`,
      );
    } finally {
      standby.child.kill("SIGKILL");
      await standby.done.catch(() => {});
      await rm(standbyState, { recursive: true, force: true });
    }
  });
});
