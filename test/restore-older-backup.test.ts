// A backup older than the backend: `mesh backup` of a running mesh, then `mesh rotate` of one
// consumer (applied by real Postgres), then the mesh stopped, its state removed and the older backup
// restored. At `mesh up` the provider finds its backend holding a password minted after the one the
// restored state asks for: it never puts the older one back (it may have been rotated away because
// it leaked), says why, and the controller rotates that consumer once, to a password newer than
// both; the consumer logs in with it. A consumer not rotated since the backup keeps its password.
import assert from "node:assert/strict";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import { runMesh } from "../packages/cli/test/run-mesh.ts";
import { BackupMesh } from "./backup-mesh.ts";

describe("restore of a backup older than the backend", { timeout: 420_000 }, () => {
  let mesh: BackupMesh;

  before(async () => {
    mesh = await BackupMesh.make("mesh-older-backup-");
    await mesh.start();
  });

  after(async () => {
    await mesh?.dispose();
  });

  it("rotates what it cannot vouch for, never puts an older password back, and keeps the others", async () => {
    const before = await mesh.everyConsumerLogsIn(120);
    const backedUp = before.get("notes")!;
    const backedUpLogin = (await mesh.loginOf("notes"))!;
    const file = join(mesh.dir, "older.backup");
    const backup = await runMesh(["backup", "--out", file, "--state", mesh.state]);
    assert.equal(backup.code, 0, backup.stderr);

    const rotate = await runMesh([
      "rotate",
      "notes",
      "postgres-database",
      "--state",
      mesh.state,
      // Rotated because it leaked: refused at once, with no drain in which it still works.
      "--now",
      "--wait",
      "60s",
    ]);
    assert.equal(rotate.code, 0, `${rotate.stdout}${rotate.stderr}`);
    const rotated = await until(
      "notes to log in with its rotated password",
      async () => {
        const password = await mesh.passwordOf("notes");
        return password !== undefined && password !== backedUp && (await mesh.logsIn("notes", password))
          ? password
          : undefined;
      },
      { seconds: 60, everyMs: 250 },
    );
    assert.equal(
      await until(
        "the old password refused",
        async () => !(await mesh.logsIn("notes", backedUp, backedUpLogin)),
        {
          seconds: 30,
        },
      ),
      true,
      "the rotation took the old password away",
    );

    await mesh.stop();
    await rm(mesh.state, { recursive: true, force: true });
    const restored = await runMesh(["restore", file, "--state", mesh.state]);
    assert.equal(restored.code, 0, `${restored.stdout}${restored.stderr}`);

    // From here to the end the backup's password of notes never logs in again: it is not put back.
    let watching = true;
    let cameBack = false;
    const statuses: string[] = [];
    const watcher = (async () => {
      while (watching) {
        if (await mesh.logsIn("notes", backedUp, backedUpLogin)) cameBack = true;
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    const statusWatcher = (async () => {
      while (watching) {
        const run = await runMesh(["status", "--state", mesh.state]).catch(() => undefined);
        if (run !== undefined) statuses.push(run.stdout);
      }
    })();
    let newest: string;
    try {
      await mesh.start();
      newest = await until(
        "notes to log in with a password newer than both",
        async () => {
          const password = await mesh.passwordOf("notes");
          if (password === undefined || password === backedUp || password === rotated) return undefined;
          return (await mesh.logsIn("notes", password)) ? password : undefined;
        },
        { seconds: 90, everyMs: 250 },
      ).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${mesh.up?.output().slice(-6000)}`);
      });
      // The one not rotated since the backup keeps its password, unchanged.
      await mesh.everyConsumerLogsIn(
        30,
        new Map([...before].map(([m, p]) => [m, m === "notes" ? newest : p])),
      );
    } finally {
      watching = false;
      await watcher;
      await statusWatcher;
    }
    if (cameBack) {
      const providerLog = await readFile(
        join(mesh.state, "nodes", "node-a", "modules", "postgres", "log"),
        "utf8",
      ).catch(() => "");
      assert.fail(
        "the backup's password of notes logged in after the restore; the provider said:\n" +
          providerLog
            .split("\n")
            .filter((l) => l.includes("notes"))
            .slice(-40)
            .join("\n"),
      );
    }
    assert.notEqual(newest, rotated);

    // Said: by the controller as it rotates, by mesh status while it lasted, and in the ledger.
    assert.match(mesh.up!.output(), /newer than the mesh's \(its state is older than the backend/);
    assert.ok(
      statuses.some((s) => /older-than-backend/.test(s)),
      `mesh status named the reason while it lasted; it said:\n${statuses.slice(-3).join("\n---\n")}`,
    );
    const ledger = await runMesh(["ledger", "notes", "--json", "--state", mesh.state]);
    assert.equal(ledger.code, 0, ledger.stderr);
    const rotations = (JSON.parse(ledger.stdout) as { entries: unknown[] }).entries.filter((e) =>
      /state is older than the backend/.test(JSON.stringify(e)),
    );
    assert.equal(
      rotations.length,
      1,
      `one rotation by the mesh, in notes's ledger:\n${ledger.stdout.slice(-3000)}`,
    );
    // The consumer not rotated since keeps its password, and nothing rotated it.
    const wiki = await runMesh(["ledger", "wiki", "--json", "--state", mesh.state]);
    assert.doesNotMatch(wiki.stdout, /state is older than the backend/);
  });
});
