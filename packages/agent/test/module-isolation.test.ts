// Who a module runs as, decided before its files are written: here, an agent that cannot separate
// modules (it does not run as root) says so once and runs each as itself; and the user names.
import assert from "node:assert/strict";
import { chmod, chown, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Delivery } from "@mesh/manifest";
import { ModuleIsolations, ownerOf } from "../src/module-isolation.ts";
import { ModuleUsers, moduleUserName, ShellsAsUsers, type ModuleUser } from "../src/module-users.ts";
import { removeStaleModuleUsers } from "@mesh/testkit";
import { recordingLogger } from "./test-mesh.ts";

void describe("who a module runs as", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-isolation-unit-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  void it("is the agent itself when the agent cannot separate modules, said once for all", async () => {
    const logger = recordingLogger();
    const isolations = new ModuleIsolations({
      stateDir: dir,
      meshId: "abcdef",
      mode: "strict",
      logger,
      env: {},
      separate: false,
    });
    const delivery: Delivery = {
      node: "n1",
      generation: 1,
      fleetFile: join(dir, "mesh.yaml"),
      modules: ["app", "store"].map((name) => ({ name, manifest: join(dir, name, "module.json") })),
      plan: { instances: [] },
      secrets: {},
    };
    for (let i = 0; i < 2; i++) {
      const identities = await isolations.resolve(delivery);
      for (const name of ["app", "store"]) {
        const identity = identities.get(name);
        assert.equal(identity?.kind, "agent-user");
        assert.equal(identity?.isolation.isolated, false);
        assert.match(identity?.isolation.reason ?? "", /does not run as root/);
        assert.equal(ownerOf(identity), undefined, "its files keep the agent's owner");
      }
    }
    assert.equal(logger.lines.filter((l) => /cannot separate its modules/.test(l)).length, 1);
  });

  void it("is named mesh-<id>-<module>, cut to 32 characters with a stable hash when longer", () => {
    assert.equal(moduleUserName("abcdef", "notes"), "mesh-abcdef-notes");
    const long = moduleUserName("abcdef", "a-module-with-a-long-name");
    assert.equal(long.length, 32);
    assert.equal(long, moduleUserName("abcdef", "a-module-with-a-long-name"));
    assert.notEqual(long, moduleUserName("abcdef", "a-module-with-a-long-namf"));
    assert.match(long, /^mesh-abcdef-a-module-wi-[0-9a-f]{8}$/);
  });

  void it("differs between two meshes for the same module, even when cut", () => {
    assert.notEqual(moduleUserName("abcdef", "postgres"), moduleUserName("ghijkl", "postgres"));
    const module = "a-module-with-a-rather-long-name-indeed";
    assert.notEqual(moduleUserName("abcdef", module), moduleUserName("ghijkl", module));
  });
});

void describe(
  "a module that ran as another user before",
  { skip: process.getuid?.() !== 0 ? "needs root" : false },
  () => {
    let dir: string;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), "mesh-handover-"));
      await chmod(dir, 0o755);
    });
    after(async () => {
      await rm(dir, { recursive: true, force: true });
      removeStaleModuleUsers();
    });

    void it("finds its files handed to its user of this mesh, and what root owned in its home stays root's", async () => {
      const stateDir = join(dir, "state");
      const home = join(stateDir, "modules", "app", "home");
      await mkdir(join(home, "sub"), { recursive: true, mode: 0o700 });
      await chmod(stateDir, 0o711);
      // What a module user of before the mesh id (mesh-app, say, uid 54321) left in its home.
      for (const path of [home, join(home, "sub"), join(home, "data"), join(home, "sub", "more")]) {
        if (!path.endsWith("sub") && path !== home) await writeFile(path, "kept\n", { mode: 0o600 });
        await chown(path, 54321, 54321);
      }
      await writeFile(join(home, "root-owned"), "", { mode: 0o600 });
      await mkdir(join(dir, "app"), { mode: 0o755 });
      await writeFile(
        join(dir, "app", "module.json"),
        JSON.stringify({ name: "app", run: { command: "/bin/sh" } }),
        {
          mode: 0o644,
        },
      );
      const logger = recordingLogger();
      const isolations = new ModuleIsolations({
        stateDir,
        meshId: "hndovr",
        mode: "strict",
        logger,
        env: process.env,
      });
      const identity = (
        await isolations.resolve({
          node: "n1",
          generation: 1,
          fleetFile: join(dir, "mesh.yaml"),
          modules: [{ name: "app", manifest: join(dir, "app", "module.json") }],
          plan: { instances: [] },
          secrets: {},
        })
      ).get("app");
      assert.equal(identity?.kind, "own-user", JSON.stringify(identity));
      const user = identity?.kind === "own-user" ? identity.user : undefined;
      assert.equal(user?.name, "mesh-hndovr-app");
      for (const path of [home, join(home, "sub"), join(home, "data"), join(home, "sub", "more")]) {
        const st = await stat(path);
        assert.deepEqual([st.uid, st.gid], [user?.uid, user?.gid], path);
      }
      assert.equal((await stat(join(home, "root-owned"))).uid, 0);
      assert.ok(
        logger.lines.some((l) =>
          /app now runs as mesh-hndovr-app: 4 of its files .* are handed to it/.test(l),
        ),
      );
    });

    void it("runs the checks asked together as each one's user, each with its own answer", async () => {
      const stateDir = join(dir, "shells");
      await mkdir(stateDir, { mode: 0o711 });
      const users = await new ModuleUsers("shells", stateDir).ensureAll(["one", "two", "three"]);
      const [one, two, three] = ["one", "two", "three"].map((m) => {
        const user = users.get(m);
        assert.ok(user !== undefined && !(user instanceof Error), `${m}: ${String(user)}`);
        return user;
      }) as [ModuleUser, ModuleUser, ModuleUser];
      const shells = new ShellsAsUsers();
      const ran = await Promise.all([
        shells.run(one, 'id -u; id -G; echo "$1|$2"', ["it's a path", "b c"]),
        shells.run(two, "echo oops >&2; exit 3", []),
        shells.run(three, 'test -w "$1" || echo cannot', ["/root"]),
      ]);
      assert.deepEqual(ran[0], {
        code: 0,
        stdout: `${one.uid}\n${one.gid}\nit's a path|b c`,
        stderr: "",
      });
      assert.deepEqual(ran[1], { code: 3, stdout: "", stderr: "oops\n" });
      assert.deepEqual(ran[2], { code: 0, stdout: "cannot", stderr: "" });
    });

    void it("makes the users of a whole delivery at once, each with its own uid, and none again on the next", async () => {
      const stateDir = join(dir, "many");
      await mkdir(stateDir, { mode: 0o711 });
      const names = Array.from({ length: 12 }, (_, i) => `app${i}`);
      for (const name of names) {
        await mkdir(join(dir, name), { mode: 0o755 });
        await writeFile(
          join(dir, name, "module.json"),
          JSON.stringify({ name, run: { command: "/bin/sh" } }),
          {
            mode: 0o644,
          },
        );
      }
      const isolations = new ModuleIsolations({
        stateDir,
        meshId: "batchu",
        mode: "strict",
        logger: recordingLogger(),
        env: process.env,
      });
      const delivery: Delivery = {
        node: "n1",
        generation: 1,
        fleetFile: join(dir, "mesh.yaml"),
        modules: names.map((name) => ({ name, manifest: join(dir, name, "module.json") })),
        plan: { instances: [] },
        secrets: {},
      };
      const first = await isolations.resolve(delivery);
      assert.deepEqual([...first.keys()], names, "kept in the delivery's order");
      const uids = new Set<number>();
      for (const name of names) {
        const identity = first.get(name);
        assert.equal(identity?.kind, "own-user", `${name}: ${JSON.stringify(identity)}`);
        if (identity?.kind !== "own-user") continue;
        assert.equal(identity.user.name, `mesh-batchu-${name}`);
        uids.add(identity.user.uid);
        assert.equal((await stat(join(stateDir, "modules", name, "home"))).uid, identity.user.uid);
      }
      assert.equal(uids.size, names.length, "each module a uid of its own");
      const passwd = await readFile("/etc/passwd", "utf8");
      assert.equal(passwd.split("\n").filter((l) => l.startsWith("mesh-batchu-")).length, names.length);
      const again = await isolations.resolve(delivery);
      for (const name of names) assert.deepEqual(again.get(name), first.get(name));
      assert.equal(
        (await readFile("/etc/passwd", "utf8")).split("\n").filter((l) => l.startsWith("mesh-batchu-"))
          .length,
        names.length,
      );
    });
  },
);
