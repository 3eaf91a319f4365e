// `npm start` as a newcomer runs it: the whole one-machine demonstration (its own PostgreSQL, Redis,
// Ceph and Glewlwyd, `mesh up` with no security flag, the example apps), which prints the dashboard's
// address with a one-time login code, from `mesh up` and again from `mesh dashboard`. The printed
// link is used while the demonstration runs: it logs a browser in, once. With standard input not a
// terminal (CI, here) it ends after its tour; on a terminal (a pseudo-terminal, through util-linux's
// `script`) it stays up with the dashboard's link and three commands until Ctrl-C. It installs only
// what its tour runs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { until } from "@mesh/testkit";
import { cleanEnv } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

// What a terminal shows, as plain text: no colours, no carriage returns.
const plain = (s: string): string => s.replace(/\x1b\[[0-9;]*m/g, "").replace(/\r/g, "");

interface Ensure {
  packagesOf(groups?: readonly string[]): string[];
}

describe("npm start", { timeout: 840_000 }, () => {
  it("installs only what its tour runs: no chromium, no Prometheus, no MariaDB", async () => {
    const ensure = (await import(join(root, "scripts", "ensure.mjs"))) as Ensure;
    const forStart = ensure.packagesOf(["start"]);
    for (const pkg of ["postgresql", "redis-server", "nats-server", "radosgw", "glewlwyd", "sqlite3"])
      assert.ok(forStart.includes(pkg), `${pkg} is run by the tour`);
    for (const pkg of ["chromium", "prometheus", "prometheus-alertmanager", "mariadb-server"]) {
      assert.ok(!forStart.includes(pkg), `${pkg} is not run by the tour`);
      assert.ok(ensure.packagesOf().includes(pkg), `npm test still installs ${pkg}`);
    }
  });

  it("on a terminal, stays up after its tour with the dashboard's link and three commands, until Ctrl-C", async (t) => {
    if (spawnSync("sh", ["-c", "command -v script"]).status !== 0)
      return t.skip("util-linux's script (for a pseudo-terminal) is not installed here");
    // script gives npm start a pseudo-terminal; a Ctrl-C typed into it reaches its foreground group.
    // The shell between (script's, then npm's) is Debian's dash when SHELL is unset, as in CI: it
    // dies of the Ctrl-C unless it has handed its place to the command (exec), and npm then ends
    // with 130 while the demonstration is still stopping.
    const child = spawn("script", ["-qfec", "exec npm start", "/dev/null"], {
      cwd: root,
      env: cleanEnv({ SHELL: "/bin/sh" }),
      stdio: ["pipe", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    const ended = new Promise<number | null>((resolve) => child.on("close", resolve));
    try {
      const stay = await until(
        "the tour's end and the stay",
        () => {
          const text = plain(output);
          const at = text.indexOf("Yours to look around");
          return Promise.resolve(at >= 0 && /Ctrl-C stops the mesh/.test(text) ? text.slice(at) : undefined);
        },
        { seconds: 420, everyMs: 500 },
      );
      const link = /\$ mesh dashboard --state \S+\n\s+(http:\/\/127\.0\.0\.1:\d+\/\?code=[\w-]+)\n/.exec(
        stay,
      )?.[1];
      assert.ok(link, stay);
      const commands = stay.split("\n").filter((l) => /^\s+npx mesh \w+ .*--state \S+/.test(l));
      assert.equal(commands.length, 3, stay);
      // Still up a while after the tour: the link logs a browser in, and the state answers.
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      assert.equal(child.exitCode, null, "still running");
      const login = await fetch(new URL("/api/login", link), {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code: new URL(link).searchParams.get("code") }),
      });
      assert.equal(login.status, 200, await login.clone().text());
      child.stdin.write("\x03");
      const code = await ended;
      assert.equal(code, 0, plain(output).slice(-4000));
      assert.match(plain(output), /Done\./);
    } finally {
      if (child.exitCode === null && child.pid !== undefined) {
        process.kill(-child.pid, "SIGINT");
        await ended;
      }
    }
  });

  it("prints the dashboard's address with a login code that logs in once, and ends after its tour without a terminal", async () => {
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
      assert.doesNotMatch(output, /Yours to look around/, "no stay without a terminal");
      // The tour asks status once the apps work: by then every provider has been heard.
      assert.doesNotMatch(output, /not heard from/, "every provider heard by the tour's status");
    } finally {
      if (child.exitCode === null && child.pid !== undefined) {
        process.kill(-child.pid, "SIGINT");
        await ended;
      }
    }
  });
});
