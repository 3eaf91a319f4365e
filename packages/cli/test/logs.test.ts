// What an operator reads: the mesh's own lines start with an ISO timestamp (or are JSON objects with
// --log-format json), and `mesh logs MODULE` shows one module's log, following it across rotation.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, PassThrough } from "node:stream";
import { after, before, describe, it } from "node:test";
import { ModuleLog } from "@mesh/agent";
import type { CliIo } from "../src/io.ts";
import { agentLogOptions, logLinesIo, parseSize, prefixed } from "../src/log-lines.ts";
import { parseLogLine } from "../src/logs-command.ts";
import { cleanEnv, MESH_BIN, meshInProcess } from "./run-mesh.ts";

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z /;

function collecting(): { io: CliIo; text: () => string } {
  let text = "";
  const io: CliIo = { out: () => {}, err: (t) => (text += t), env: {}, stdin: Readable.from([]) };
  return { io, text: () => text };
}

describe("the mesh's own lines", () => {
  it("start with an ISO timestamp and who says them, a line each for a message of several lines", () => {
    const { io, text } = collecting();
    const lines = logLinesIo(io, "text");
    prefixed(lines, "controller").warn("first\nsecond");
    lines.err(`${"mesh up".padEnd(12)}│ 1/4 the bus\n`);
    prefixed(io, "node-a").info("said on a plain io");
    const out = text().trimEnd().split("\n");
    assert.equal(out.length, 4);
    for (const line of out) assert.match(line, ISO);
    assert.match(out[0] ?? "", /Z controller {2}│ warning: first$/);
    assert.match(out[1] ?? "", /Z controller {2}│ warning: second$/);
    assert.match(out[2] ?? "", /Z mesh up {5}│ 1\/4 the bus$/);
    assert.match(out[3] ?? "", /Z node-a {6}│ said on a plain io$/);
  });

  it("are one JSON object each with --log-format json (pino's), with level, ISO time, who and msg", () => {
    const { io, text } = collecting();
    const lines = logLinesIo(io, "json");
    prefixed(lines, "controller").error("the bus is gone");
    prefixed(lines, "node-a").info("applied delivery 3");
    lines.err(`${"mesh up".padEnd(12)}│ 4/4 the modules start\n`);
    const objects = text()
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as { level: string; time: string; who: string; msg: string });
    assert.deepEqual(
      objects.map((o) => [o.level, o.who, o.msg]),
      [
        ["error", "controller", "the bus is gone"],
        ["info", "node-a", "applied delivery 3"],
        ["info", "mesh up", "4/4 the modules start"],
      ],
    );
    for (const o of objects) assert.ok(!Number.isNaN(Date.parse(o.time)) && o.time.endsWith("Z"), o.time);
  });

  it("hand the module log flags to the agents, and refuse a size that is not one", () => {
    const { io } = collecting();
    assert.deepEqual(agentLogOptions(logLinesIo(io, "text", { maxBytes: 2048, keep: 2 })), {
      timings: { logMaxBytes: 2048, logKeep: 2, logFormat: "text" },
    });
    assert.deepEqual(agentLogOptions(io), {});
    assert.equal(parseSize("10MiB"), 10 * 1024 * 1024);
    assert.equal(parseSize("512KiB"), 512 * 1024);
    assert.equal(parseSize("1GB"), 1e9);
    assert.throws(() => parseSize("ten"), /--log-max-size is "ten": give a size/);
  });
});

describe("mesh logs", { timeout: 120_000 }, () => {
  let dir: string;
  let up: string;
  let agentState: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-logs-"));
    up = join(dir, "up");
    agentState = join(dir, "agent");
    for (const node of ["node-a", "node-b"])
      await mkdir(join(up, "nodes", node, "modules", "notes"), { recursive: true });
    await mkdir(join(up, "nodes", "node-b", "modules", "redis"), { recursive: true });
    await writeFile(
      join(up, "nodes", "node-a", "modules", "notes", "log"),
      "2026-12-01T10:00:00.000Z mesh| mesh agent starts notes\n2026-12-01T10:00:01.000Z out | listening\n2026-12-01T10:00:02.000Z err | slow query\n",
    );
    await writeFile(
      join(up, "nodes", "node-b", "modules", "notes", "log"),
      "2026-12-01T10:00:00.000Z out | on b\n",
    );
    await writeFile(
      join(up, "nodes", "node-b", "modules", "redis", "log"),
      "2026-12-01T10:00:00.000Z out | ready\n",
    );
    await mkdir(join(agentState, "modules", "worker"), { recursive: true });
    await writeFile(join(agentState, "modules", "worker", "log"), "2026-12-01T10:00:00.000Z out | working\n");
  });
  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("shows a module's log from mesh up's state, from mesh agent's, and the last lines with -n", async () => {
    const redis = await meshInProcess(["logs", "redis", "--state", up]);
    assert.equal(redis.code, 0, redis.stderr);
    assert.equal(redis.stdout, "2026-12-01T10:00:00.000Z out | ready\n");
    const notes = await meshInProcess(["logs", "notes", "--state", up, "--node", "node-a", "-n", "2"]);
    assert.equal(notes.code, 0, notes.stderr);
    assert.equal(
      notes.stdout,
      "2026-12-01T10:00:01.000Z out | listening\n2026-12-01T10:00:02.000Z err | slow query\n",
    );
    const worker = await meshInProcess(["logs", "worker", "--state", agentState]);
    assert.equal(worker.stdout, "2026-12-01T10:00:00.000Z out | working\n");
    const json = await meshInProcess(["logs", "notes", "--state", up, "--node", "node-a", "--json"]);
    assert.deepEqual(
      json.stdout
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as unknown),
      [
        { time: "2026-12-01T10:00:00.000Z", stream: "mesh", msg: "mesh agent starts notes" },
        { time: "2026-12-01T10:00:01.000Z", stream: "out", msg: "listening" },
        { time: "2026-12-01T10:00:02.000Z", stream: "err", msg: "slow query" },
      ],
    );
    assert.deepEqual(parseLogLine("an old line"), { time: null, stream: null, msg: "an old line" });
    assert.deepEqual(
      parseLogLine(
        '{"level":"warn","time":"2026-12-01T10:00:00.000Z","module":"notes","stream":"err","msg":"x"}',
      ),
      { time: "2026-12-01T10:00:00.000Z", stream: "err", msg: "x" },
    );
  });

  it("names the module and the fix when there is no log, and asks for --node when several nodes have one", async () => {
    const none = await meshInProcess(["logs", "wiki", "--state", up]);
    assert.equal(none.code, 1);
    assert.match(
      none.stderr,
      /no log of module wiki under .*: none of its nodes \(node-a, node-b\) has run it/,
    );
    assert.match(none.stderr, /mesh status/);
    assert.match(none.stderr, /--state/);
    const two = await meshInProcess(["logs", "notes", "--state", up]);
    assert.equal(two.code, 2);
    assert.match(two.stderr, /notes has a log on node node-a and node node-b: say which with --node/);
    const node = await meshInProcess(["logs", "notes", "--state", up, "--node", "node-z"]);
    assert.equal(node.code, 1);
    assert.match(node.stderr, /no node node-z under .* \(its nodes: node-a, node-b\)/);
  });

  it("-f follows the log as the module writes, across rotation, and stops at SIGTERM with exit 0", async () => {
    const path = join(agentState, "modules", "follow", "log");
    const log = new ModuleLog(path, { maxBytes: 2048, keep: 2 });
    const out = new PassThrough();
    log.follow(out, "out");
    out.write("before follow\n");
    const child = spawn(process.execPath, [MESH_BIN, "logs", "follow", "-f", "--state", agentState], {
      env: cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let seen = "";
    child.stdout.on("data", (c: Buffer) => (seen += c.toString()));
    child.stderr.on("data", (c: Buffer) => (seen += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const waitFor = async (what: string, pattern: RegExp): Promise<void> => {
      const deadline = Date.now() + 60_000;
      while (!pattern.test(seen)) {
        if (Date.now() > deadline)
          throw new Error(`mesh logs -f did not print ${what}; it printed:\n${seen}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    try {
      await waitFor("what was there", /before follow/);
      // About 100 bytes a line, 60 lines: the file rotates several times while it is followed.
      for (let i = 0; i < 60; i++) {
        out.write(`line ${String(i).padStart(2, "0")} ${"y".repeat(60)}\n`);
        if (i % 10 === 9) await new Promise((r) => setTimeout(r, 300));
      }
      await waitFor("every line", /line 59 /);
      const numbers = [...seen.matchAll(/line (\d\d) /g)].map((m) => Number(m[1]));
      assert.deepEqual(
        numbers,
        Array.from({ length: 60 }, (_, i) => i),
        "each line once, in order",
      );
      for (const line of seen.trimEnd().split("\n")) assert.match(line, ISO);
      child.kill("SIGTERM");
      assert.equal(await exited, 0, seen);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
      out.end();
      log.close();
    }
  });
});
