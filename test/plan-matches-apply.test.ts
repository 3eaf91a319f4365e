// `mesh plan` says what applying a fleet change will do; this checks that it is what applying then
// does. A real one-machine mesh (`mesh up`: nats-server, the controller, two agents, the Postgres and
// Redis providers against real servers) serves a fleet; a changed copy adds a consumer, removes
// some (one retires on its own, a set past the bound waits for a person) and moves one to the other
// node. `mesh plan` is asked; then the copy is moved into place and each item of the plan is
// checked against the backends, the providers' own tools, the nodes' secret files and `mesh status`.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { runCli } from "../packages/cli/src/cli.ts";
import { askController } from "../packages/cli/src/controller-request.ts";
import type { PlanReport } from "../packages/cli/src/plan-command.ts";
import { runMesh, startMesh, type MeshProcess, type MeshRun } from "../packages/cli/test/run-mesh.ts";
import { canLoginAs } from "../providers/redis/test/conformance-target.ts";
import { SERVED_FLEET_SUBJECT, secretKey } from "@mesh/controller";
import { type RetireList, type StatusReport } from "@mesh/sdk";
import { callControl } from "@mesh/sdk/provider";
import { startPostgres, startRedis, type PostgresServer, type RedisServer, until } from "@mesh/testkit";

const root = fileURLToPath(new URL("..", import.meta.url));
const PG = "postgres-database";
const REDIS = "redis-namespace";

/** `mesh args…` run in this process (a spawned `mesh` costs seconds on a busy machine). */
async function mesh(...args: string[]): Promise<MeshRun> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    out: (t) => void (stdout += t),
    err: (t) => void (stderr += t),
    env: {},
    stdin: process.stdin,
  });
  return { code, signal: null, stdout, stderr };
}

interface Placed {
  readonly node: string;
  readonly manifest: string;
  readonly values?: string;
}

describe("mesh plan says what applying the fleet change then does", { timeout: 180_000 }, () => {
  let postgres: PostgresServer;
  let redis: RedisServer;
  let dir: string;
  let up: MeshProcess;
  const state = () => join(dir, "state");
  const fleetFile = () => join(dir, "mesh.yaml");
  const nextFile = () => join(dir, "mesh.next.yaml");
  const control = (provider: string) =>
    join(state(), "nodes", "node-1", "modules", provider, "home", "control.sock");
  const secretOf = (node: string, consumer: string, iface: string) =>
    readFile(join(state(), "nodes", node, "modules", consumer, "passwords", iface), "utf8").then((s) =>
      s.trim(),
    );
  const status = (provider: string) =>
    callControl(control(provider), { tool: "status", args: [], who: "test" }) as Promise<StatusReport>;
  const retireList = (provider: string) =>
    callControl(control(provider), { tool: "retire list", args: [], who: "test" }) as Promise<RetireList>;
  const served = () =>
    askController<{ fleet: { readAt: string }; keptPasswords: string[] }>(
      state(),
      SERVED_FLEET_SUBJECT,
      "{}",
    );
  const kept = async () => (await served()).keptPasswords;
  const stateOf = async (provider: string, login: string) =>
    (await status(provider)).consumers.find((c) => c.login === login)?.state;

  /** Whether `login` logs in to the backend of `iface` with `password`. */
  const canLogin = (iface: string, login: string, password: string): Promise<boolean> =>
    iface === REDIS ? canLoginAs(redis, login, password) : postgres.canLogin(login, password);

  const fleetYaml = (modules: Record<string, Placed>): string => {
    const provider = (name: string, at: { host: string; port: number }) =>
      `  ${name}:\n    manifest: ${JSON.stringify(join(root, "providers", name, "module.json"))}\n` +
      `    node: node-1\n    endpoint: { host: ${at.host}, port: ${at.port} }\n` +
      `    admin: { env: MESH_${name.toUpperCase()}_URL }\n    env: { MESH_EVERY: 250ms }\n`;
    return [
      "nodes:\n  node-1: {}\n  node-2: {}\nmodules:\n",
      provider("postgres", postgres),
      provider("redis", redis),
      ...Object.entries(modules).map(
        ([name, m]) =>
          `  ${name}:\n    manifest: ${JSON.stringify(m.manifest)}\n    node: ${m.node}\n` +
          (m.values ? `    needs: { ${PG}: { values: ${m.values} } }\n` : ""),
      ),
    ].join("");
  };
  const pgApp = () => join(dir, "pg-app", "module.json");
  const redisApp = () => join(dir, "redis-app", "module.json");

  before(async () => {
    [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
    const adminUrl = await postgres.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-plan-apply-"));
    // Consumers the agents do not run (no `run`): their files are written all the same, and they
    // start nothing that would slow the test.
    for (const [name, iface] of [
      ["pg-app", PG],
      ["redis-app", REDIS],
    ] as const) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify({ name, needs: { [iface]: {} } }));
    }
    await writeFile(
      fleetFile(),
      fleetYaml({
        notes: { node: "node-1", manifest: pgApp() },
        blog: { node: "node-1", manifest: pgApp() },
        counter: { node: "node-1", manifest: redisApp() },
        tally: { node: "node-1", manifest: redisApp() },
      }),
    );
    up = startMesh(["up", fleetFile(), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
      MESH_REDIS_URL: redis.adminUrl,
      MESH_EVERY: "250ms",
    });
    for (const [provider, logins] of [
      ["postgres", ["blog_postgres", "notes_postgres"]],
      ["redis", ["counter_redis", "tally_redis"]],
    ] as const) {
      await until(`${provider} holding ${logins.join(", ")}`, async () => {
        const s = await status(provider);
        const held = s.consumers.filter((c) => c.state === "active" && c.why === "held as asked");
        return held
          .map((c) => c.login)
          .sort()
          .join() === logins.join()
          ? true
          : undefined;
      });
    }
  });

  after(async () => {
    if (up?.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done.catch(() => undefined);
    }
    await postgres?.stop();
    await redis?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("plans add, remove and move against the running mesh, then each planned item happens and nothing else", async () => {
    const notesPassword = await secretOf("node-1", "notes", PG);
    await writeFile(
      nextFile(),
      fleetYaml({
        notes: { node: "node-2", manifest: pgApp() }, // moves
        wiki: { node: "node-1", manifest: pgApp() }, // new
        // blog, counter and tally are gone: blog retires on its own (1 of 3 held), counter and tally
        // are all that redis holds (2 of 2): that waits for a person.
      }),
    );

    const asked = await runMesh(["plan", nextFile(), "--state", state(), "--json", "--detailed-exitcode"]);
    assert.equal(asked.code, 4, `changes are planned (exit 4): ${asked.stderr}`);
    const plan = JSON.parse(asked.stdout) as PlanReport;
    assert.ok(plan.against.kind === "mesh", "compared with the running mesh, not an empty one");
    const servedAt = plan.against.readAt;
    const text = await mesh("plan", nextFile(), "--state", state());
    assert.equal(text.code, 0, "without --detailed-exitcode a plan exits 0");
    assert.match(text.stdout, /Plan: .*1 consumer to create \(1 password to mint\)/);

    const byProvider = Object.fromEntries(plan.providers.map((p) => [p.provider, p]));
    const pg = byProvider.postgres;
    const rd = byProvider.redis;
    assert.ok(pg && rd, "both providers have something to do");
    assert.deepEqual(
      pg.creates.map((c) => `${c.login}:${c.password}`),
      ["wiki_postgres:mint"],
    );
    assert.deepEqual(
      pg.changes.map((c) => [c.login, c.changes.map((f) => `${f.what} ${String(f.from)}->${String(f.to)}`)]),
      [["notes_postgres", ["node node-1->node-2"]]],
    );
    assert.deepEqual(
      pg.retires.map((r) => r.login),
      ["blog_postgres"],
    );
    assert.equal(pg.retirement?.needsApproval, false);
    assert.deepEqual(
      rd.retires.map((r) => r.login),
      ["counter_redis", "tally_redis"],
    );
    assert.equal(rd.retirement?.needsApproval, true);
    assert.deepEqual(
      plan.modules.map((m) => `${m.change} ${m.module} ${m.previousNode ?? ""}${m.node}`),
      [
        "stop blog node-1",
        "stop counter node-1",
        "move notes node-1node-2",
        "stop tally node-1",
        "start wiki node-1",
      ],
    );
    assert.deepEqual(plan.nodes, []);

    const keptBefore = await kept();
    // Apply: move the planned file into place; the controller reads it at once.
    await rename(nextFile(), fleetFile());

    // Passwords: the controller keeps a new one for exactly the creates the plan says are minted.
    const keptAfter = await until("the controller serving the new fleet", async () => {
      const answer = await served();
      return answer.fleet.readAt !== servedAt ? answer.keptPasswords : undefined;
    });
    assert.deepEqual(
      keptAfter.filter((k) => !keptBefore.includes(k)).sort(),
      plan.providers
        .flatMap((p) => p.creates.filter((c) => c.password === "mint"))
        .map((c) => secretKey(c.consumer, c.interface))
        .sort(),
    );

    for (const p of plan.providers) {
      // Each create: the login now logs in with the password its node was given; a minted one is new.
      for (const c of p.creates) {
        const password = await until(`${c.consumer}'s secret on ${c.node}`, () =>
          secretOf(c.node, c.consumer, c.interface).catch(() => undefined),
        );
        await until(`${c.login} logging in`, async () =>
          (await canLogin(c.interface, c.login, password)) ? true : undefined,
        );
        if (c.password === "mint") assert.notEqual(password, notesPassword);
        await until(`${p.provider} showing ${c.login} active`, async () =>
          (await stateOf(p.provider, c.login)) === "active" ? true : undefined,
        );
      }
      // Each change: a consumer moved to another node finds its same password there, still working.
      for (const c of p.changes) {
        const moved = c.changes.find((f) => f.what === "node");
        if (moved === undefined) continue;
        const there = await until(`${c.consumer}'s secret on ${String(moved.to)}`, () =>
          secretOf(String(moved.to), c.consumer, c.interface).catch(() => undefined),
        );
        assert.equal(there, notesPassword, "the password moves with it, not minted again");
        assert.equal(c.reapplied, false);
        assert.ok(await canLogin(c.interface, c.login, there), "the backend still takes it");
      }
      // Retirements: on its own when the plan says so, else a waiting set of exactly those logins.
      const r = p.retirement;
      if (r === null) continue;
      const provider = p.provider;
      if (r.needsApproval) {
        const waiting = await until(`${provider}'s retirement waiting for a person`, async () => {
          const list = await retireList(provider);
          return list.id !== null ? list : undefined;
        });
        assert.deepEqual([...waiting.logins].sort(), [...r.logins].sort());
        assert.equal(waiting.held, r.held, "the harness counts the same held as the plan");
        for (const login of r.logins) assert.equal(await stateOf(provider, login), "awaiting-approval");
      } else {
        for (const login of r.logins) {
          await until(`${login} retired by ${provider}`, async () =>
            (await stateOf(provider, login)) === "retired" ? true : undefined,
          );
        }
      }
    }

    // Nothing the plan did not name was retired.
    for (const provider of ["postgres", "redis"]) {
      const planned = new Set(
        plan.providers.flatMap((p) => (p.provider === provider ? p.retires : [])).map((r) => r.login),
      );
      for (const c of (await status(provider)).consumers) {
        if (!planned.has(c.login)) assert.equal(c.state, "active", `${provider}: ${c.login} is ${c.state}`);
      }
    }
    const blogPassword = await secretOf("node-1", "blog", PG).catch(() => undefined);
    if (blogPassword !== undefined)
      assert.equal(await canLogin(PG, "blog_postgres", blogPassword), false, "a retired login is refused");

    // Modules: each starts, stops or moves where the plan says, as the agents report it.
    await until("the nodes reporting the planned modules", async () => {
      const s = await mesh("status", "--json", "--state", state());
      const answer = JSON.parse(s.stdout) as { nodes: { name: string; modules: { name: string }[] }[] };
      const on = (node: string) =>
        answer.nodes.find((n) => n.name === node)?.modules.map((m) => m.name) ?? [];
      for (const m of plan.modules) {
        const everywhere = [...on("node-1"), ...on("node-2")];
        if (m.change === "stop" && everywhere.includes(m.module)) return undefined;
        if (m.change !== "stop" && !on(m.node).includes(m.module)) return undefined;
        if (m.change === "move" && on(m.previousNode ?? "").includes(m.module)) return undefined;
      }
      return true;
    });

    // And once applied, planning the same file again finds nothing to do.
    const again = await mesh("plan", fleetFile(), "--state", state(), "--detailed-exitcode");
    assert.equal(again.code, 0, again.stdout + again.stderr);
    assert.match(again.stdout, /No changes: the mesh already serves this file/);
  });

  it("a refused fleet file prints its problems and exits 2; a mesh that has run but does not answer exits 3", async () => {
    await writeFile(nextFile(), "nodes: {}\nmodules:\n  notes: { node: node-9 }\n");
    const refused = await mesh("plan", nextFile(), "--state", state());
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /is refused/);
    assert.match(refused.stderr, /manifest/);

    up.child.kill("SIGINT");
    await up.done;
    const gone = await mesh("plan", fleetFile(), "--state", state());
    assert.equal(gone.code, 3, gone.stderr);
    assert.match(gone.stderr, /--empty/);
    const empty = await mesh("plan", fleetFile(), "--state", state(), "--empty", "--json");
    assert.equal(empty.code, 0, empty.stderr);
    const report = JSON.parse(empty.stdout) as PlanReport;
    assert.equal(report.against.kind, "empty");
    assert.equal(report.summary.create, 2, "against an empty mesh, every consumer is new");
  });
});
