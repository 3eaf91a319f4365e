// A test process ended by a signal stops the servers it started: the runner's bound on a file
// sends SIGTERM, and a signal's default action would leave them running on a shared machine.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { until } from "../src/until.ts";

const serverProcess = fileURLToPath(new URL("../src/server-process.ts", import.meta.url));

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

void describe("a test process ended by a signal", () => {
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    void it(`stops the servers it started on ${signal}, after its own handler, and exits with 128 + the signal's number`, async () => {
      // A stand-in for a server: a process the launcher started, as it starts nats-server or redis.
      const script =
        `import { writeSync } from "node:fs";` +
        `import { spawnServer } from ${JSON.stringify(serverProcess)};` +
        // The test's own cleanup on the signal, registered after the testkit's, as the cluster
        // test removes its network namespaces: it runs too.
        `process.once(${JSON.stringify(signal)}, () => writeSync(1, "own cleanup ran\\n"));` +
        `const s = spawnServer("sleep", ["600"]);` +
        `s.child.once("spawn", () => console.log("server " + s.child.pid));` +
        `setInterval(() => {}, 1000);`;
      const test = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      let out = "";
      test.stdout.on("data", (d: Buffer) => (out += d.toString()));
      let server: number | undefined;
      try {
        server = await until(
          "the server to start",
          () => {
            const m = /server (\d+)/.exec(out);
            return m ? Number(m[1]) : undefined;
          },
          30,
        );
        assert.ok(alive(server));
        const exited = once(test, "exit");
        test.kill(signal);
        const [code] = (await exited) as [number | null];
        assert.equal(code, signal === "SIGTERM" ? 143 : 130);
        assert.match(out, /own cleanup ran/, "the test's own handler of the signal ran");
        const left = server;
        await until("the server to be stopped", () => (alive(left) ? undefined : true), 10);
      } finally {
        test.kill("SIGKILL");
        if (server !== undefined && alive(server)) process.kill(server, "SIGKILL");
      }
    });
  }
});
