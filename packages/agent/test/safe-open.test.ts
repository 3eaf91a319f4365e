// What the agent opens in a module's own directory (its home) may have been planted there by the
// module: a symlink to the node's keys, a FIFO that would block the agent, another user's file, a
// link to another module's control socket. The agent refuses each, with a reason naming the path.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chown, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { moduleHomePath } from "@mesh/manifest";
import { actionJournalPath, metricsUrlPath } from "@mesh/sdk/provider";
import { moduleControlPath } from "../src/module-launch.ts";
import { readModuleMetricsUrl } from "../src/module-metrics.ts";
import { checkModuleSocket, openModuleFile, UnsafeModuleFileError } from "../src/safe-open.ts";

const IS_ROOT = process.getuid?.() === 0;

void describe("what the agent opens in a module's home", () => {
  let dir: string;
  const servers: Server[] = [];
  const home = (module: string): string => moduleHomePath(dir, module);
  const listen = (path: string): Promise<void> =>
    new Promise((resolve, reject) => {
      const server = createServer();
      servers.push(server);
      server.once("error", reject);
      server.listen(path, () => resolve());
    });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-safe-open-"));
    for (const m of ["app", "other"]) await mkdir(home(m), { recursive: true });
    await writeFile(join(dir, "keys.json"), "http://127.0.0.1:1/metrics\n", { mode: 0o600 });
  });
  after(async () => {
    for (const server of servers) server.close();
    await rm(dir, { recursive: true, force: true });
  });

  void it("refuses a metrics URL file that is a symlink, even to a file holding a URL", async () => {
    await symlink(join(dir, "keys.json"), metricsUrlPath(dir, "app"));
    assert.equal(readModuleMetricsUrl(dir, "app"), undefined);
    await assert.rejects(
      openModuleFile(metricsUrlPath(dir, "app")),
      (err: unknown) => err instanceof UnsafeModuleFileError && /is a symlink/.test(err.message),
    );
  });

  void it("refuses an action journal that is a FIFO at once, without blocking", async () => {
    const journal = actionJournalPath(dir, "app");
    execFileSync("mkfifo", [journal]);
    await assert.rejects(
      openModuleFile(journal),
      (err: unknown) => err instanceof UnsafeModuleFileError && /not a regular file/.test(err.message),
    );
  });

  void it(
    "refuses a file owned by another user than the one that owns the module's home",
    { skip: IS_ROOT ? false : "needs root to give a file away" },
    async () => {
      const file = actionJournalPath(dir, "other");
      await writeFile(file, "{}\n");
      await chown(file, 12_345, 12_345);
      await assert.rejects(
        openModuleFile(file),
        (err: unknown) => err instanceof UnsafeModuleFileError && /owned by uid 12345/.test(err.message),
      );
    },
  );

  void it("refuses a control socket that is a symlink to another module's socket", async () => {
    await listen(moduleControlPath(dir, "other"));
    assert.equal(await checkModuleSocket(moduleControlPath(dir, "other")), "socket");
    await symlink(moduleControlPath(dir, "other"), moduleControlPath(dir, "app"));
    await assert.rejects(
      checkModuleSocket(moduleControlPath(dir, "app")),
      (err: unknown) => err instanceof UnsafeModuleFileError && /is a symlink/.test(err.message),
    );
  });

  void it("refuses a home that is itself a symlink", async () => {
    await mkdir(join(dir, "modules", "linked"), { recursive: true });
    await symlink(home("other"), home("linked"));
    await assert.rejects(
      openModuleFile(actionJournalPath(dir, "linked")),
      (err: unknown) => err instanceof UnsafeModuleFileError && /not a directory/.test(err.message),
    );
  });

  void it("opens the module's own regular file", async () => {
    await writeFile(metricsUrlPath(dir, "other"), "http://127.0.0.1:2/metrics\n");
    assert.equal(readModuleMetricsUrl(dir, "other"), "http://127.0.0.1:2/metrics");
  });
});
