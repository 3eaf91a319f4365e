// Secrets are files the mesh wrote: a consumer's secret is read only when it is a small regular file
// under the provider's secrets directory. Each hostile secret fails its own consumer, with class
// secret-unreadable and a reason that names the path and the rule, while the others are created.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type ProviderModule } from "@mesh/sdk";
import { ProviderSettingsError, resolveProviderSettings } from "@mesh/sdk/provider";
import { MAX_SECRET_BYTES, SecretUnreadableError, readSecret } from "../src/secret-file.ts";
import { MemoryAdapter } from "@mesh/testkit";
import { makeFixture, IFACE, type Fixture } from "./harness-fixture.ts";

async function withFixture(fn: (f: Fixture, outside: string) => Promise<void>): Promise<void> {
  const f = await makeFixture();
  const outside = await mkdtemp(join(tmpdir(), "mesh-outside-"));
  try {
    await fn(f, outside);
  } finally {
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
    await rm(outside, { recursive: true, force: true });
  }
}

/** Writes a contributions file naming `good` (with secrets the fixture wrote) and the hostile entries. */
async function askWith(f: Fixture, good: readonly string[], hostile: Record<string, string>): Promise<void> {
  for (const login of good) await f.writeSecret(login, `pw-${login}-${Math.random().toString(36).slice(2)}`);
  const given = [
    ...good.map((as) => ({ as, secret: join(f.dir, `${as}.secret`), node: "n1", values: {} })),
    ...Object.entries(hostile).map(([as, secret]) => ({ as, secret, node: "n1", values: {} })),
  ];
  await f.writeRaw(JSON.stringify({ requirement: IFACE, given }));
}

function failing(f: Fixture, login: string): { class: string | null; why: string } {
  const c = f.handle.status().consumers.find((s) => s.login === login);
  assert.ok(c, `${login} is in the status`);
  assert.equal(c.state, "failing", `${login}: ${c.why}`);
  return { class: c.class, why: c.why };
}

describe("secrets are files the mesh wrote", () => {
  it("/etc/shadow, a symlink out, a FIFO, /dev/zero, a 5 KiB file and a directory each fail their consumer alone", async () => {
    await withFixture(async (f, outside) => {
      const secretOutside = join(outside, "elsewhere.secret");
      await writeFile(secretOutside, "a password written by someone else\n", { mode: 0o600 });
      await symlink(secretOutside, join(f.dir, "link.secret"));
      execFileSync("mkfifo", [join(f.dir, "fifo.secret")]);
      await writeFile(join(f.dir, "big.secret"), "x".repeat(5 * 1024), { mode: 0o600 });
      await mkdir(join(f.dir, "dir.secret"));
      const hostile = {
        shadow: "/etc/shadow",
        symlinked: join(f.dir, "link.secret"),
        fifo: join(f.dir, "fifo.secret"),
        zero: "/dev/zero",
        big: join(f.dir, "big.secret"),
        directory: join(f.dir, "dir.secret"),
        outsider: secretOutside,
      };
      await askWith(f, ["good_one", "good_two"], hostile);
      // A FIFO that blocked the read would hold this pass for ever: the test would time out here.
      await f.watchPass();

      assert.equal(f.stateOf("good_one"), "active");
      assert.equal(f.stateOf("good_two"), "active");
      assert.equal(f.adapter.backend.get("good_one")?.password, f.passwordOf("good_one"));
      const rules: Record<keyof typeof hostile, RegExp> = {
        shadow: /outside the secrets directory/,
        symlinked: /is a symbolic link/,
        fifo: /is a FIFO, not a regular file/,
        zero: /outside the secrets directory/,
        big: /5120 bytes, larger than 4096/,
        directory: /is a directory, not a regular file/,
        outsider: /outside the secrets directory/,
      };
      for (const [login, rule] of Object.entries(rules)) {
        const { class: cls, why } = failing(f, login);
        assert.equal(cls, "secret-unreadable", `${login}: ${why}`);
        const path = hostile[login as keyof typeof hostile];
        assert.ok(why.includes(path), `${login}: the reason names ${path}: ${why}`);
        assert.match(why, rule, `${login}: ${why}`);
        assert.match(why, /a secret is read only from a regular file of at most 4096 bytes under /, why);
        assert.equal(f.adapter.backend.has(login), false, `${login} was never created`);
      }
      // Said loudly at once: no race will fix a file that breaks the rule.
      assert.ok(f.lines.some((l) => l.startsWith("error ") && l.includes("shadow: its secret is REFUSED")));
      assert.ok(
        !f.lines.some((l) => l.includes("written by someone else")),
        "the outside password is never said",
      );
    });
  });

  it("a device node inside the secrets directory is refused without being read", async (t) => {
    await withFixture(async (f) => {
      const device = join(f.dir, "zero.secret");
      try {
        execFileSync("mknod", [device, "c", "1", "5"], { stdio: "ignore" });
      } catch {
        t.skip("mknod needs root");
        return;
      }
      await askWith(f, ["good_one"], { device_one: device });
      await f.watchPass();
      assert.equal(f.stateOf("good_one"), "active");
      const { class: cls, why } = failing(f, "device_one");
      assert.equal(cls, "secret-unreadable");
      assert.match(why, /is a character device, not a regular file/);
    });
  });

  it("a directory inside the secrets directory that is a symlink out is judged by its real path", async () => {
    await withFixture(async (f, outside) => {
      await writeFile(join(outside, "p.secret"), "outside-password\n", { mode: 0o600 });
      await symlink(outside, join(f.dir, "sub"));
      await askWith(f, ["good_one"], { through_dir: join(f.dir, "sub", "p.secret") });
      await f.watchPass();
      assert.equal(f.stateOf("good_one"), "active");
      const { class: cls, why } = failing(f, "through_dir");
      assert.equal(cls, "secret-unreadable");
      assert.match(why, /outside the secrets directory \(its directory is really /);
    });
  });

  it("a secret in a subdirectory of the secrets directory is read", async () => {
    await withFixture(async (f) => {
      await mkdir(join(f.dir, "nested", "deeper"), { recursive: true });
      await writeFile(join(f.dir, "nested", "deeper", "s"), "nested-password\n", { mode: 0o600 });
      await askWith(f, [], { nested_one: join(f.dir, "nested", "deeper", "s") });
      await f.watchPass();
      assert.equal(f.stateOf("nested_one"), "active");
      assert.equal(f.adapter.backend.get("nested_one")?.password, "nested-password");
    });
  });

  it("a secret outside the contributions file's directory is read when the secrets directory is set to hold it", async () => {
    const secrets = await mkdtemp(join(tmpdir(), "mesh-secrets-"));
    const f = await makeFixture({ secretsDir: secrets });
    try {
      await writeFile(join(secrets, "a"), "elsewhere-password\n", { mode: 0o600 });
      await f.writeSecret("beside_one", "beside-password");
      const given = [
        { as: "set_one", secret: join(secrets, "a"), values: {} },
        { as: "beside_one", secret: join(f.dir, "beside_one.secret"), values: {} },
      ];
      await f.writeRaw(JSON.stringify({ requirement: IFACE, given }));
      await f.watchPass();
      assert.equal(f.adapter.backend.get("set_one")?.password, "elsewhere-password");
      // Beside the contributions file is no longer under the directory it was given.
      assert.match(failing(f, "beside_one").why, /outside the secrets directory/);
    } finally {
      await f.handle.stop();
      await rm(f.dir, { recursive: true, force: true });
      await rm(secrets, { recursive: true, force: true });
    }
  });

  it("readSecret refuses a relative path, reads a file of exactly 4 KiB, and says a missing file is missing", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-readsecret-"));
    try {
      await writeFile(join(dir, "max"), "y".repeat(MAX_SECRET_BYTES), { mode: 0o600 });
      assert.equal((await readSecret(join(dir, "max"), dir)).length, MAX_SECRET_BYTES);
      await assert.rejects(readSecret("relative/secret", dir), (err: unknown) => {
        assert.ok(err instanceof SecretUnreadableError);
        assert.equal(err.breaksRule, true);
        assert.match(err.message, /is not an absolute path/);
        return true;
      });
      await assert.rejects(readSecret(join(dir, "absent"), dir), (err: unknown) => {
        assert.ok(err instanceof SecretUnreadableError);
        assert.equal(err.breaksRule, false, "a missing file may be a race");
        assert.match(err.message, /does not exist/);
        return true;
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a provider process takes its secrets directory from --secrets-dir, else MESH_SECRETS_DIR, and refuses a relative one", () => {
    const provider: ProviderModule = {
      name: "memory",
      interface: IFACE,
      adminUrlEnv: "MESH_MEMORY_URL",
      adminUrlExample: "memory://mesh_admin:<password>@127.0.0.1:1/store",
      createAdapter: () => new MemoryAdapter(),
    };
    const env = { MESH_RECEIVES: "/r/c.json", MESH_MEMORY_URL: "memory://mesh_admin:pw@127.0.0.1:1/store" };
    assert.equal(resolveProviderSettings(provider, env).secretsDir, undefined, "the harness defaults to /r");
    assert.equal(resolveProviderSettings(provider, { ...env, MESH_SECRETS_DIR: "/s" }).secretsDir, "/s");
    assert.equal(
      resolveProviderSettings(provider, { ...env, MESH_SECRETS_DIR: "/s" }, { secretsDir: "/flag" })
        .secretsDir,
      "/flag",
    );
    assert.throws(
      () => resolveProviderSettings(provider, env, { secretsDir: "relative" }),
      (err: unknown) =>
        err instanceof ProviderSettingsError && /--secrets-dir DIR or set MESH_SECRETS_DIR/.test(err.message),
    );
  });
});
