// `npm start` as a newcomer runs it: the whole one-machine demonstration (its own PostgreSQL, Redis,
// Ceph and Glewlwyd, `mesh up` with no security flag, the example apps), which prints the dashboard's
// address with a one-time login code, from `mesh up` and again from `mesh dashboard`. The printed
// link is used while the demonstration runs: it logs a browser in, once.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { until } from "@mesh/testkit";
import { cleanEnv } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

describe("npm start", { timeout: 420_000 }, () => {
  it("prints the dashboard's address with a login code that logs in once, and ends cleanly", async () => {
    // What npm start runs; the backends are its own (no MESH_*_URL is passed on).
    const child = spawn(process.execPath, [join(root, "scripts", "start.mjs")], {
      cwd: root,
      env: cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
      // A group of its own: start.mjs runs the demonstration with spawnSync, so a stop is sent to all.
      detached: true,
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    const ended = new Promise<number | null>((resolve) => child.on("close", resolve));
    try {
      const fromUp = await until(
        "mesh up's login link",
        () => Promise.resolve(/the dashboard: (http:\/\/127\.0\.0\.1:\d+\/\?code=[\w-]+) /.exec(output)?.[1]),
        { seconds: 240, everyMs: 200 },
      );
      // The demonstration's own step, from mesh dashboard, while the mesh still runs.
      const fromCommand = await until(
        "the demonstration's dashboard step",
        () =>
          Promise.resolve(
            /\$ mesh dashboard --state \S+\n\s+(http:\/\/127\.0\.0\.1:\d+\/\?code=[\w-]+)\n/.exec(
              output,
            )?.[1],
          ),
        { seconds: 240, everyMs: 100 },
      );
      assert.equal(new URL(fromCommand).origin, new URL(fromUp).origin, "the same dashboard");
      assert.notEqual(fromCommand, fromUp, "a code of its own");
      const logIn = () =>
        fetch(new URL("/api/login", fromCommand), {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ code: new URL(fromCommand).searchParams.get("code") }),
        });
      const first = await logIn();
      assert.equal(first.status, 200, await first.clone().text());
      assert.match(first.headers.get("set-cookie") ?? "", /HttpOnly; SameSite=Strict/);
      assert.equal((await logIn()).status, 401, "once");
      assert.equal((await fetch(new URL("/api/state", fromCommand))).status, 401, "nothing without it");
      const code = await ended;
      assert.equal(code, 0, output.slice(-4000));
      assert.match(output, /Done\./);
    } finally {
      if (child.exitCode === null && child.pid !== undefined) {
        process.kill(-child.pid, "SIGINT");
        await ended;
      }
    }
  });
});
