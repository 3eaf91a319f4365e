// Least privilege, end to end on one machine: `mesh up` as root runs each module as its own system
// user. Checked as those users (setpriv to their uid and gid, no other group): a module reads its
// own password copy, credential and bus credential, and nothing else of the mesh's: not another
// module's password, not its provider's copy, not the node's keys, node.creds, ledgers, its own
// keys.json, operator.creds, the operator and scrape tokens or anything under the controller's directory. Its environment holds
// the admin URL only when it is the provider its fleet entry gives it to, and nothing of mesh up's
// own. A module whose user cannot read its manifest directory is refused, naming that directory.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { removeStaleModuleUsers, until } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess } from "../packages/cli/test/run-mesh.ts";

const IS_ROOT = process.getuid?.() === 0;
const SKIP = IS_ROOT ? false : "needs root: the agent separates modules only when it runs as root";
const ADMIN_URL = "kv://kv_admin:admin-sekrit-7f3a@127.0.0.1:1/";
const LEAK = "postgres://mesh_admin:leaked-admin-pw@127.0.0.1:5432/postgres";

// A module that needs no node_modules: it says who it runs as and what its environment holds, in
// its own home, then stays up.
const PROBE = `#!/bin/sh
id -u > "$HOME/.uid.tmp" && mv "$HOME/.uid.tmp" "$HOME/uid"
env > "$HOME/.env.tmp" && mv "$HOME/.env.tmp" "$HOME/env"
trap 'exit 0' TERM
while :; do sleep 1; done
`;

interface StatusModule {
  readonly name: string;
  readonly state: string;
  readonly isolation?: { isolated: boolean; user: string; reason?: string };
}

// A module as `mesh status --json` shows it, once it is there.
async function statusOf(state: string, module: string): Promise<StatusModule | undefined> {
  const run = await runMesh(["status", "--json", "--state", state]);
  if (run.code !== 0) return undefined;
  const answer = JSON.parse(run.stdout) as { nodes: { modules?: StatusModule[] }[] };
  return answer.nodes.flatMap((n) => n.modules ?? []).find((m) => m.name === module);
}

const manifest = (name: string, extra: object): string =>
  JSON.stringify({ name, run: { command: "/bin/sh", args: ["./probe.sh"] }, ...extra }, null, 2);

// Module names of this test (their users, mesh-<id>-<module>, are removed once it is done).
const STORE = "iso-store";
const APP = "iso-app";
const PEER = "iso-peer";
const HIDDEN = "iso-hidden";

describe("a module kept to its own files", { timeout: 240_000, skip: SKIP }, () => {
  let dir: string;
  let up: MeshProcess | undefined;
  const state = (): string => join(dir, "state");
  const node = (): string => join(state(), "nodes", "node-1");
  const mod = (m: string, ...rest: string[]): string => join(node(), "modules", m, ...rest);

  // Module users are named with the mesh id the node's state keeps: mesh-<id>-<module>.
  const userName = (module: string): string =>
    `mesh-${readFileSync(join(node(), "mesh-id"), "utf8").trim()}-${module}`;
  const userOf = (module: string): { uid: number; gid: number } => {
    const line = execFileSync("getent", ["passwd", userName(module)], { encoding: "utf8" });
    const [, , uid, gid] = line.trim().split(":");
    return { uid: Number(uid), gid: Number(gid) };
  };
  // Whether `module`'s user can read `path`: `cat` run as that user, with no other group.
  const canRead = (module: string, path: string): boolean => {
    const { uid, gid } = userOf(module);
    const run = spawnSync(
      "setpriv",
      [`--reuid=${uid}`, `--regid=${gid}`, "--clear-groups", "cat", "--", path],
      { stdio: "ignore" },
    );
    return run.status === 0;
  };
  const envOf = async (module: string): Promise<Map<string, string>> => {
    const text = await until(`${module} to write its environment`, async () =>
      readFile(mod(module, "home", "env"), "utf8").catch(() => undefined),
    );
    return new Map(
      text
        .split("\n")
        .filter((l) => l.includes("="))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
    );
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-isolation-"));
    // Where module users can read the fleet: the temp dir itself is traversable by all.
    await chmod(dir, 0o755);
    const fleet = join(dir, "fleet");
    const modules: Record<string, object> = {
      [STORE]: {
        provides: {
          "kv-store": {
            receives: "/run/mesh/kv-store.json",
            spec: { name: { type: "string", default: "{login}" } },
          },
        },
      },
      [APP]: { needs: { "kv-store": {} } },
      [PEER]: { needs: { "kv-store": {} } },
      [HIDDEN]: {},
    };
    for (const [name, extra] of Object.entries(modules)) {
      await mkdir(join(fleet, name), { recursive: true, mode: 0o755 });
      await writeFile(join(fleet, name, "module.json"), manifest(name, extra), { mode: 0o644 });
      await writeFile(join(fleet, name, "probe.sh"), PROBE, { mode: 0o755 });
    }
    // A checkout no module user can read, as one under /root would be.
    await chmod(join(fleet, HIDDEN), 0o700);
    await writeFile(
      join(fleet, "mesh.yaml"),
      `nodes:
  node-1: {}
modules:
  ${STORE}:
    manifest: ./${STORE}/module.json
    node: node-1
    admin: { env: ISO_ADMIN_URL }
    env: { ISO_GREETING: hello }
  ${APP}: { manifest: ./${APP}/module.json, node: node-1 }
  ${PEER}: { manifest: ./${PEER}/module.json, node: node-1 }
  ${HIDDEN}: { manifest: ./${HIDDEN}/module.json, node: node-1 }
`,
      { mode: 0o644 },
    );
    up = startMesh(["up", join(fleet, "mesh.yaml"), "--state", state()], {
      ISO_ADMIN_URL: ADMIN_URL,
      MESH_POSTGRES_URL: LEAK,
      ISO_AGENT_ONLY: "of the agent",
    });
    up.child.stdin?.end();
    await until(
      "every module to run and its files to be written",
      async () => {
        const there = await Promise.all([
          stat(mod(APP, "bus.creds")),
          stat(mod(PEER, "passwords", "kv-store")),
          stat(mod(STORE, "secrets", `${APP}.kv-store`)),
          stat(mod(STORE, "home", "env")),
          stat(mod(APP, "home", "env")),
        ]).catch(() => undefined);
        return there;
      },
      { seconds: 120 },
    );
  });

  after(async () => {
    if (up !== undefined && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    if (process.env["MESH_TEST_LOG"]) console.log(up?.output());
    if (dir) await rm(dir, { recursive: true, force: true });
    removeStaleModuleUsers();
  });

  it("runs each module as its own system user, with its home under the node's state", async () => {
    for (const module of [STORE, APP, PEER]) {
      const uid = (await readFile(mod(module, "home", "uid"), "utf8")).trim();
      assert.equal(Number(uid), userOf(module).uid, `${module} runs as ${userName(module)}`);
      assert.equal((await envOf(module)).get("HOME"), mod(module, "home"));
    }
    assert.equal((await stat(node())).mode & 0o777, 0o711);
    assert.equal((await stat(join(node(), "modules"))).mode & 0o777, 0o711);
    const own = await stat(mod(APP));
    assert.deepEqual([own.uid, own.gid, own.mode & 0o777], [0, userOf(APP).gid, 0o750]);
    const shown = await until("mesh status to show iso-app isolated", async () => {
      const m = await statusOf(state(), APP);
      return m?.isolation !== undefined ? m : undefined;
    });
    assert.deepEqual(shown.isolation, { isolated: true, user: userName(APP) });
  });

  it("gives each reader its own copy of a password, 0600 and owned by it", async () => {
    const consumer = await stat(mod(APP, "passwords", "kv-store"));
    const provider = await stat(mod(STORE, "secrets", `${APP}.kv-store`));
    assert.deepEqual([consumer.uid, consumer.mode & 0o777], [userOf(APP).uid, 0o600]);
    assert.deepEqual([provider.uid, provider.mode & 0o777], [userOf(STORE).uid, 0o600]);
    assert.equal(
      await readFile(mod(APP, "passwords", "kv-store"), "utf8"),
      await readFile(mod(STORE, "secrets", `${APP}.kv-store`), "utf8"),
    );
    const contributions = JSON.parse(await readFile(mod(STORE, "receives", "kv-store.json"), "utf8")) as {
      given: { secret: string }[];
    };
    assert.ok(contributions.given.every((g) => g.secret.startsWith(mod(STORE, "secrets") + "/")));
  });

  it("lets a module read its own files and nothing else of the mesh's", async () => {
    for (const path of [
      mod(APP, "passwords", "kv-store"),
      mod(APP, "credentials", "kv-store.json"),
      mod(APP, "bus.creds"),
    ]) {
      assert.equal(canRead(APP, path), true, `${APP} reads its own ${path}`);
    }
    assert.equal(canRead(STORE, mod(STORE, "secrets", `${APP}.kv-store`)), true);

    const controllerFiles = (await readdir(join(state(), "controller"), { recursive: true })).map((f) =>
      join(state(), "controller", f),
    );
    assert.ok(controllerFiles.length > 0, "the controller keeps files");
    const refused = [
      mod(PEER, "passwords", "kv-store"),
      mod(STORE, "secrets", `${APP}.kv-store`),
      mod(STORE, "secrets", `${PEER}.kv-store`),
      join(node(), "keys.json"),
      join(node(), "node.creds"),
      join(node(), "ledgers"),
      mod(APP, "keys.json"),
      mod(PEER, "bus.creds"),
      mod(PEER, "home", "env"),
      join(state(), "operator.creds"),
      // The dashboard's and /metrics' tokens, and where the HTTP server answers.
      join(state(), "controller", "operator.token"),
      join(state(), "controller", "scrape.token"),
      join(state(), "http.json"),
      ...controllerFiles,
    ];
    for (const path of refused) {
      await stat(path); // it is there, and still not readable by the module
      assert.equal(canRead(APP, path), false, `${APP} must not read ${path}`);
    }
    assert.equal(canRead(STORE, mod(APP, "passwords", "kv-store")), false);
    assert.equal(canRead(STORE, mod(APP, "keys.json")), false);

    // And every other file of the mesh's state, for each module: the bus's store, the node's files,
    // the other modules'. Its own directory it reads, but for its keys and its log.
    const everything = (await readdir(state(), { recursive: true, withFileTypes: true }))
      .filter((e) => e.isFile() && !e.name.startsWith("."))
      .map((e) => join(e.parentPath, e.name));
    assert.ok(everything.length > refused.length);
    for (const module of [STORE, APP, PEER]) {
      const own = (path: string): boolean =>
        path.startsWith(`${mod(module)}/`) &&
        path !== mod(module, "keys.json") &&
        path !== mod(module, "log");
      for (const path of everything) {
        const readable = canRead(module, path);
        if (readable !== own(path) && (await stat(path).catch(() => undefined)) !== undefined) {
          assert.equal(readable, own(path), `${module} ${own(path) ? "must" : "must not"} read ${path}`);
        }
      }
    }
  });

  it("builds each environment from nothing: the admin URL reaches its provider alone", async () => {
    const store = await envOf(STORE);
    assert.equal(store.get("ISO_ADMIN_URL"), ADMIN_URL);
    assert.equal(store.get("ISO_GREETING"), "hello");
    assert.equal(store.get("MESH_SECRETS_DIR"), mod(STORE, "secrets"));
    for (const module of [STORE, APP, PEER]) {
      const env = await envOf(module);
      assert.equal(env.get("MESH_POSTGRES_URL"), undefined, `${module} gets none of mesh up's admin URLs`);
      assert.equal(env.get("ISO_AGENT_ONLY"), undefined, `${module} inherits nothing of the agent's`);
      if (module !== STORE) assert.equal(env.get("ISO_ADMIN_URL"), undefined, `${module} is a consumer`);
      const text = [...env.values()].join("\n");
      assert.equal(text.includes("leaked-admin-pw"), false);
      if (module !== STORE) assert.equal(text.includes("admin-sekrit"), false);
    }
  });

  it("refuses a module whose user cannot read its manifest directory, naming the directory", async () => {
    await up?.waitFor(new RegExp(`cannot read its manifest directory [^ ]*${HIDDEN}`));
    await assert.rejects(stat(mod(HIDDEN, "home", "env")), { code: "ENOENT" });
    const shown = await until("mesh status to say why iso-hidden is not started", async () => {
      const m = await statusOf(state(), HIDDEN);
      return m?.isolation?.reason !== undefined ? m : undefined;
    });
    assert.equal(shown.state, "stopped");
    assert.deepEqual(shown.isolation?.isolated, false);
    assert.match(shown.isolation?.reason ?? "", /cannot read its manifest directory .*not started/);
    assert.equal(up?.output().includes("admin-sekrit"), false, "no admin password in mesh up's output");
  });
});

describe("with --isolation auto, a module its user cannot run", { timeout: 240_000, skip: SKIP }, () => {
  let dir: string;
  let up: MeshProcess | undefined;
  const state = (): string => join(dir, "state");

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-isolation-auto-"));
    await chmod(dir, 0o755);
    const fleet = join(dir, "fleet");
    await mkdir(join(fleet, HIDDEN), { recursive: true, mode: 0o755 });
    await writeFile(join(fleet, HIDDEN, "module.json"), manifest(HIDDEN, {}), { mode: 0o644 });
    await writeFile(join(fleet, HIDDEN, "probe.sh"), PROBE, { mode: 0o755 });
    await chmod(join(fleet, HIDDEN), 0o700);
    await writeFile(
      join(fleet, "mesh.yaml"),
      `nodes: { node-1: {} }\nmodules:\n  ${HIDDEN}: { manifest: ./${HIDDEN}/module.json, node: node-1 }\n`,
    );
    up = startMesh(["up", join(fleet, "mesh.yaml"), "--state", state(), "--isolation", "auto"]);
    up.child.stdin?.end();
  });
  after(async () => {
    if (up !== undefined && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    if (process.env["MESH_TEST_LOG"]) console.log(up?.output());
    if (dir) await rm(dir, { recursive: true, force: true });
    removeStaleModuleUsers();
  });

  it("runs as the agent's user, and mesh status shows it not isolated, with the reason", async () => {
    const shown = await until("mesh status to show iso-hidden running", async () => {
      const m = await statusOf(state(), HIDDEN);
      return m?.state === "running" && m.isolation !== undefined ? m : undefined;
    });
    assert.equal(shown.isolation?.isolated, false);
    assert.equal(shown.isolation?.user, "root");
    assert.match(
      shown.isolation?.reason ?? "",
      new RegExp(`cannot read its manifest directory [^ ]*${HIDDEN}`),
    );
    const uid = await readFile(join(state(), "nodes", "node-1", "modules", HIDDEN, "home", "uid"), "utf8");
    assert.equal(uid.trim(), "0");
  });
});
