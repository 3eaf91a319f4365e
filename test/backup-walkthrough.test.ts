// docs/operating.md's backup-and-restore walk-through, run as written: each line of its shell block
// in a shell whose `mesh` is this checkout's, with $FLEET, $STATE and $BACKUP set, against a real
// mesh with two consumers of a real Postgres. Its `systemctl stop/start mesh-up` lines stop and
// start that mesh (what the service would do). A line that fails fails the test, naming it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { until } from "@mesh/testkit";
import { cleanEnv, MESH_BIN, runMesh } from "../packages/cli/test/run-mesh.ts";
import { BackupMesh } from "./backup-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const HEADING = "### Walk-through: back up, lose the state, restore";

/** The lines of the first `sh` block under the walk-through's heading. */
async function walkthrough(): Promise<string[]> {
  const text = await readFile(join(root, "docs", "operating.md"), "utf8");
  const at = text.indexOf(`\n${HEADING}\n`);
  assert.ok(at >= 0, `docs/operating.md has "${HEADING}"`);
  const block = /\n```sh\n([\s\S]*?)\n```/.exec(text.slice(at));
  assert.ok(block?.[1] !== undefined, "the walk-through has a sh block");
  return block[1]
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
}

/** Runs `line` with `sh -c` in `env` (without blocking this process: its mesh up keeps talking). */
function shell(
  line: string,
  env: NodeJS.ProcessEnv,
): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("sh", ["-c", line], { env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString("utf8")));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString("utf8")));
    const timer = setTimeout(() => child.kill("SIGKILL"), 180_000);
    child.on("error", reject);
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

describe("docs/operating.md's backup-and-restore walk-through", { timeout: 420_000 }, () => {
  let mesh: BackupMesh;

  before(async () => {
    mesh = await BackupMesh.make("mesh-walkthrough-");
    await mesh.start();
  });

  after(async () => {
    await mesh?.dispose();
  });

  it("runs as written, and every consumer logs in with its unchanged password afterwards", async () => {
    const lines = await walkthrough();
    assert.ok(
      lines.some((l) => l.startsWith("mesh backup")) && lines.some((l) => l.startsWith("mesh restore")),
    );
    const passwords = await mesh.everyConsumerLogsIn(120);
    // The provider's first entries in its ledger (the walkthrough shows them after the restore): the
    // agent appends its journal on its own time, after the shared ledger is made, not before a login.
    const state = mesh.state;
    await until(
      "postgres's first ledger entry",
      async () => /^#1 /m.test((await runMesh(["ledger", "postgres", "--state", state])).stdout),
      { seconds: 60, everyMs: 500 },
    );
    // `mesh` on the PATH: this checkout's.
    const bin = join(mesh.dir, "bin");
    await mkdir(bin, { recursive: true });
    await writeFile(
      join(bin, "mesh"),
      `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(MESH_BIN)} "$@"\n`,
    );
    await chmod(join(bin, "mesh"), 0o755);
    const env = cleanEnv({
      FLEET: mesh.fleet,
      STATE: mesh.state,
      BACKUP: join(mesh.dir, "mesh.backup"),
      PATH: `${bin}:${process.env["PATH"] ?? "/usr/bin:/bin"}`,
    });
    const said: string[] = [];
    for (const line of lines) {
      if (/^systemctl stop mesh-up\b/.test(line)) {
        await mesh.stop();
        continue;
      }
      if (/^systemctl start mesh-up\b/.test(line)) {
        await mesh.start();
        await mesh.everyConsumerLogsIn(30, passwords);
        continue;
      }
      assert.doesNotMatch(line, /^systemctl/, `a systemctl line the test does not know: ${line}`);
      const run = await shell(line, env);
      said.push(`$ ${line}\n${run.stdout}${run.stderr}`);
      assert.equal(run.status, 0, `\`${line}\` failed:\n${said.join("\n")}`);
    }
    const all = said.join("\n");
    assert.match(all, /backed up to /);
    assert.match(all, /restored into /);
    // mesh status shows the restored fleet; mesh ledger the history from before the backup.
    assert.match(all, /\$ mesh status[^\n]*\n[\s\S]*\bnotes\b[\s\S]*\bwiki\b/);
    assert.match(all, /\$ mesh ledger postgres[^\n]*\n[\s\S]*#1 /);
    await mesh.everyConsumerLogsIn(30, passwords);
  });
});
