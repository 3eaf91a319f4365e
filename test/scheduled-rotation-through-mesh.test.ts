// Scheduled rotation through a real `mesh up` against a real Redis: the fleet says `rotate: {
// redis-namespace: { every: 6s } }` for one app (accepted under MESH_ROTATE_MIN=1s, a test knob),
// and nobody runs mesh rotate. The provider applies new passwords by the schedule, the app (which
// re-reads its password before each login) logs in throughout, `mesh ledger` says the schedule
// asked, and `mesh status --json` says when the next is due.
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { callControl } from "@mesh/sdk/provider";
import { startRedis, type RedisServer, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const APP = join(root, "test", "fixtures", "rotation-app", "app.mjs");
const MODULE = "app";
const LOGIN = "app_redis";

describe("scheduled rotation through mesh up (Redis)", { timeout: 300_000 }, () => {
  let redis: RedisServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const home = (m: string) => join(state(), "nodes", "node-a", "modules", m, "home");
  const said = (err: unknown): never => {
    throw new Error(`${(err as Error).message}; mesh up said:\n${up.output().slice(-6000)}`);
  };
  const applied = async (): Promise<string | undefined> => {
    const status = await callControl(join(home("redis"), "control.sock"), {
      tool: "status",
      who: "test",
    }).catch(() => undefined);
    return status?.consumers.find((c) => c.login === LOGIN)?.applied;
  };
  const attempts = async (): Promise<{ ok?: boolean; why?: string }[]> =>
    (await readFile(join(home(MODULE), "attempts.jsonl"), "utf8").catch(() => ""))
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as { ok?: boolean; why?: string });

  before(async () => {
    redis = await startRedis();
    dir = await mkdtemp(join(tmpdir(), "mesh-scheduled-rotation-"));
    await chmod(dir, 0o755);
    await mkdir(join(dir, MODULE));
    await writeFile(
      join(dir, MODULE, "module.json"),
      JSON.stringify({
        name: MODULE,
        needs: { "redis-namespace": {} },
        run: {
          command: process.execPath,
          args: [APP],
          env: { ROTATION_APP_BACKEND: "redis", ROTATION_APP_MODE: "reread" },
        },
      }),
    );
    await writeFile(
      join(dir, "mesh.yaml"),
      `nodes:
  node-a: {}
modules:
  redis:
    manifest: ${JSON.stringify(join(root, "providers", "redis", "module.json"))}
    node: node-a
    endpoint: { host: ${redis.host}, port: ${redis.port} }
    admin: { env: MESH_REDIS_URL }
    env: { MESH_EVERY: 1s, MESH_ROTATION_GRACE: 2s }
  ${MODULE}:
    manifest: ./${MODULE}/module.json
    node: node-a
    rotate: { redis-namespace: { every: 6s } }
`,
    );
    up = startMesh(["up", join(dir, "mesh.yaml"), "--state", state(), "--isolation", "auto"], {
      MESH_REDIS_URL: redis.adminUrl,
      MESH_ROTATE_MIN: "1s",
    });
    await up.waitFor(/the modules start/);
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await redis?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("rotates the app's password on its schedule, recorded as the schedule's, with the app logging in throughout", async () => {
    const first = await until("the provider to apply the app's first password", applied, {
      seconds: 120,
      everyMs: 200,
    }).catch(said);
    const second = await until(
      "a password applied by the schedule",
      async () => {
        const now = await applied();
        return now !== undefined && now !== first ? now : undefined;
      },
      { seconds: 60, everyMs: 200 },
    ).catch(said);
    await until(
      "a second password applied by the schedule",
      async () => {
        const now = await applied();
        return now !== undefined && now !== first && now !== second ? now : undefined;
      },
      { seconds: 60, everyMs: 200 },
    ).catch(said);
    const ledger = await runMesh(["ledger", MODULE, "--state", state()]);
    assert.equal(ledger.code, 0, ledger.stderr);
    const scheduled = ledger.stdout
      .split("\n")
      .filter((l) => /schedule via mesh rotate\s+rotate app redis-namespace/.test(l));
    assert.ok(scheduled.length >= 2, ledger.stdout);
    const status = await runMesh(["status", "--json", "--state", state()]);
    assert.equal(status.code, 0, status.stderr);
    const app = (
      JSON.parse(status.stdout) as { consumers: { consumer: string; rotationDue?: string }[] }
    ).consumers.find((c) => c.consumer === MODULE);
    assert.ok(app?.rotationDue !== undefined && !Number.isNaN(Date.parse(app.rotationDue)), status.stdout);
    const text = await runMesh(["status", "--state", state()]);
    assert.match(
      text.stdout,
      /ROTATIONS DUE NEXT: 1 scheduled[\s\S]*app \(redis-namespace, login app_redis at redis\): rotation due /,
    );
    // Counted from its first login (before it, the login may not be made yet).
    const tried = await attempts();
    const since = tried.slice(tried.findIndex((a) => a.ok === true));
    assert.ok(since.filter((a) => a.ok === true).length > 10, "the app logs in throughout");
    assert.deepEqual(
      since.filter((a) => a.ok === false).map((a) => a.why),
      [],
      `no failed login once it logged in: the old password stays valid while the app moves (${tried.length} attempts)`,
    );
  });
});
