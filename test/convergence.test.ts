// The harness and each real adapter together, through what happens to a backend in its life: a
// password changed by hand, a login dropped, the server down and back, the server restarted and
// emptied. Every consumer converges without restarting the provider. One suite, looped over the
// providers as the conformance kit is.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runProvisioner, type ProvisionerHandle, type Provision } from "@mesh/sdk";
import type { ConformanceTarget, TargetServer } from "@mesh/testkit";
import { target as postgres } from "../providers/postgres/test/conformance-target.ts";
import { target as redis } from "../providers/redis/test/conformance-target.ts";
import { target as mariadb } from "../providers/mariadb/test/conformance-target.ts";
import { until } from "@mesh/testkit";

const LOGINS = ["conv_one", "conv_two", "conv_three"];
const said: string[] = [];

function suite(target: ConformanceTarget): void {
  describe(`${target.name}: the harness converges through the backend's faults`, { timeout: 600_000 }, () => {
    let server: TargetServer;
    let handle: ProvisionerHandle;
    let dir: string;
    const consumers: Provision[] = [];

    const allHeld = async (): Promise<boolean> => {
      for (const p of consumers) if (!(await server.canLogin(p))) return false;
      return handle.status().consumers.every((c) => c.state === "active");
    };

    before(async () => {
      server = await target.start();
      dir = await mkdtemp(join(tmpdir(), `mesh-conv-${target.name}-`));
      const receives = join(dir, "contributions.json");
      for (const as of LOGINS) {
        const password = `${randomBytes(18).toString("base64url")}'"\\`;
        await writeFile(join(dir, `${as}.secret`), password, { mode: 0o600 });
        consumers.push({ as, password, values: server.plainValues, derived: {} });
      }
      const given = LOGINS.map((as) => ({
        as,
        secret: join(dir, `${as}.secret`),
        values: server.plainValues,
      }));
      await writeFile(`${receives}.tmp`, JSON.stringify({ requirement: target.interface, given }));
      await rename(`${receives}.tmp`, receives);
      handle = runProvisioner(target.interface, server.makeAdapter("convergence"), {
        receives,
        every: 200,
        verifyEvery: 1_000,
        holdsTimeout: 5_000,
        logger: { info: (m) => said.push(m), warn: (m) => said.push(m), error: (m) => said.push(m) },
      });
      await handle.ready;
      await until("every consumer created", allHeld);
    });

    after(async () => {
      await handle?.stop();
      await server?.stop();
      if (dir) await rm(dir, { recursive: true, force: true });
      const text = said.join("\n");
      for (const p of consumers)
        assert.ok(!text.includes(p.password), "no password in what the harness said");
    });

    it("finds a password changed by hand and applies the minted one again", async () => {
      const [p] = consumers;
      assert.ok(p);
      await server.changePassword(p.as, "changed-by-hand");
      assert.equal(await server.canLogin(p), false);
      await until("the minted password works again", () => server.canLogin(p));
      await until("all active", allHeld);
    });

    it("finds a dropped login and makes it again", async () => {
      const p = consumers[1];
      assert.ok(p);
      // The harness may be making it again between the target's own steps: try until the drop lands.
      await until("the login dropped", async () => {
        await server.dropLogin(p.as);
        return true;
      });
      await until("the login is back", () => server.canLogin(p));
      await until("all active", allHeld);
    });

    it("rides out the server going down and coming back, without a restart", async (t) => {
      if (!server.halt || !server.resume) return t.skip("this target cannot halt its server");
      await server.halt();
      await until("every consumer failing while the server is down", () =>
        handle.status().consumers.every((c) => c.state === "failing"),
      );
      for (const c of handle.status().consumers) assert.equal(c.class, "unreachable", `${c.login}: ${c.why}`);
      await server.resume();
      await until("all active again", allHeld, 120);
    });

    it("makes everything again after the server restarts emptied", async (t) => {
      if (!server.restartEmpty) return t.skip("this server keeps what it holds across a restart");
      await server.restartEmpty();
      await until("all made again", allHeld, 120);
    });
  });
}

for (const target of [postgres, redis, mariadb]) if (target) suite(target);
