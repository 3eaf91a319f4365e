// Watching: a change to the contributions file or a secret is applied at once, not at the next
// periodic pass, and such passes never advance the retirement count.
import assert from "node:assert/strict";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { runProvisioner, type ActionEntry } from "@mesh/sdk";
import { MemoryAdapter, until, quietLogger } from "@mesh/testkit";

const HOUR = 3_600_000;

async function writeAtomic(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFile(tmp, text, { mode: 0o600 });
  await rename(tmp, path);
}

describe("watching the contributions file and the secrets", () => {
  it("a consumer added to the file is created without waiting for the periodic pass", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-watch-"));
    const receives = join(dir, "contributions.json");
    const adapter = new MemoryAdapter();
    const actions: ActionEntry[] = [];
    await writeAtomic(receives, JSON.stringify({ requirement: "x", given: [] }));
    const handle = runProvisioner("x", adapter, {
      receives,
      every: HOUR, // the periodic pass never comes during this test
      logger: quietLogger,
      actions: { append: (e) => actions.push(e) },
    });
    try {
      await handle.ready;
      for (const login of ["alpha", "beta", "gamma"]) {
        await writeAtomic(join(dir, `${login}.secret`), `pw-${login}\n`);
        const given = ["alpha", "beta", "gamma"]
          .slice(0, ["alpha", "beta", "gamma"].indexOf(login) + 1)
          .map((as) => ({ as, secret: join(dir, `${as}.secret`) }));
        await writeAtomic(receives, JSON.stringify({ requirement: "x", given }));
        await until(`${login} created`, () => adapter.backend.get(login)?.password === `pw-${login}`);
      }
      // A new password in a secret file alone is applied too.
      await writeAtomic(join(dir, "beta.secret"), "rotated\n");
      await until("beta's new password applied", () => adapter.backend.get("beta")?.password === "rotated");
      assert.deepEqual(
        actions.map((a) => `${a.action}:${a.login}`),
        ["created:alpha", "created:beta", "created:gamma", "re-applied:beta"],
      );
      // Dropping a consumer by file changes alone never retires it: only periodic passes count.
      await writeAtomic(receives, JSON.stringify({ requirement: "x", given: [] }));
      for (let i = 0; i < 10; i++) {
        await writeAtomic(receives, JSON.stringify({ requirement: "x", given: [], touch: i }));
        await new Promise((r) => setTimeout(r, 30));
      }
      await handle.idle();
      assert.equal(adapter.count("retire"), 0);
      assert.equal(handle.status().consumers.find((c) => c.login === "alpha")?.state, "unasked");
    } finally {
      await handle.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
