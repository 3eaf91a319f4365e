// A module's log as the agent writes it: every line starts with an ISO timestamp and its stream, the
// file rotates at its size keeping N old files, and a real module's output arrives that way.
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { after, before, describe, it } from "node:test";
import { until } from "@mesh/testkit";
import { ModuleProcess } from "../src/module-process.ts";
import { ModuleLog, rotatedLogPath } from "../src/module-log.ts";
import { recordingLogger } from "./test-mesh.ts";

const LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (out |err |mesh)\| /;

describe("a module's log file", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-module-log-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("starts each line with an ISO timestamp and its stream, joining lines split across chunks", async () => {
    const path = join(dir, "a", "log");
    const log = new ModuleLog(path, {}, () => new Date("2026-12-01T10:00:00.000Z"));
    const out = new PassThrough();
    const err = new PassThrough();
    log.follow(out, "out");
    log.follow(err, "err");
    log.say("mesh agent starts a");
    out.write("first li");
    out.write("ne\nsecond line\nthird ");
    // A character whose bytes arrive in two chunks.
    const e = Buffer.from("é");
    out.write(e.subarray(0, 1));
    out.write(e.subarray(1));
    err.write("oops\n");
    out.end("without newline");
    err.end();
    log.close();
    await until(
      "both streams to end",
      async () => ((await readFile(path, "utf8")).includes("oops") ? true : undefined),
      10,
    );
    await new Promise((r) => setImmediate(r));
    const lines = (await readFile(path, "utf8")).trimEnd().split("\n");
    for (const line of lines) assert.match(line, LINE);
    assert.deepEqual(
      lines.map((l) => l.slice(25)),
      [
        "mesh| mesh agent starts a",
        "out | first line",
        "out | second line",
        "err | oops",
        "out | third éwithout newline",
      ],
    );
    assert.equal(lines[0]?.slice(0, 24), "2026-12-01T10:00:00.000Z");
    assert.equal((await stat(path)).mode & 0o777, 0o600);
  });

  it("rotates at its size and keeps N old files, the newest as log.1", async () => {
    const path = join(dir, "b", "log");
    const log = new ModuleLog(path, { maxBytes: 1000, keep: 2 });
    const out = new PassThrough();
    log.follow(out, "out");
    // 60 lines of about 100 bytes each: six files' worth.
    for (let i = 0; i < 60; i++) out.write(`line ${String(i).padStart(2, "0")} ${"x".repeat(62)}\n`);
    out.end();
    log.close();
    await new Promise((r) => setImmediate(r));
    assert.deepEqual((await readdir(join(dir, "b"))).sort(), ["log", "log.1", "log.2"]);
    for (const file of [path, rotatedLogPath(path, 1), rotatedLogPath(path, 2)]) {
      assert.ok((await stat(file)).size <= 1000, `${file} is at most the size`);
    }
    const text = async (file: string) => (await readFile(file, "utf8")).trimEnd().split("\n");
    const newest = await text(path);
    assert.match(newest.at(-1) ?? "", /line 59 /);
    // log.1 ends just before log begins: nothing lost between the two.
    const previous = await text(rotatedLogPath(path, 1));
    const lastOf = (l: string | undefined) => Number(/line (\d+)/.exec(l ?? "")?.[1]);
    assert.equal(lastOf(previous.at(-1)) + 1, lastOf(newest[0]));
  });

  it("writes one JSON object a line in the json format, standard error at level warn", async () => {
    const path = join(dir, "notes", "log");
    const log = new ModuleLog(path, { format: "json" }, () => new Date("2026-12-01T10:00:00.000Z"));
    const err = new PassThrough();
    log.follow(err, "err");
    log.say("mesh agent starts notes");
    err.end('a "quoted" problem\n');
    log.close();
    await until(
      "the line",
      async () => ((await readFile(path, "utf8")).includes("quoted") ? true : undefined),
      10,
    );
    const objects = (await readFile(path, "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as unknown);
    assert.deepEqual(objects, [
      {
        level: "info",
        time: "2026-12-01T10:00:00.000Z",
        module: "notes",
        stream: "mesh",
        msg: "mesh agent starts notes",
      },
      {
        level: "warn",
        time: "2026-12-01T10:00:00.000Z",
        module: "notes",
        stream: "err",
        msg: 'a "quoted" problem',
      },
    ]);
  });

  it("holds what a real module writes on both streams, each line timestamped", async () => {
    const logFile = join(dir, "c", "log");
    const process1 = new ModuleProcess(
      {
        name: "talker",
        command: process.execPath,
        args: [
          "-e",
          "console.log('hello from', 'out'); console.error('hello from', 'err'); setInterval(() => {}, 1000)",
        ],
        cwd: dir,
        env: { PATH: process.env["PATH"] ?? "" },
        logFile,
      },
      recordingLogger(),
      {
        restartFirstMs: 100,
        restartMaxMs: 1000,
        stopGraceMs: 2000,
        crashWindowMs: 10_000,
        crashExits: 5,
      },
      () => {},
    );
    process1.start();
    try {
      const text = await until(
        "the module's lines",
        async () => {
          const t = await readFile(logFile, "utf8").catch(() => "");
          return t.includes("hello from out") && t.includes("hello from err") ? t : undefined;
        },
        30,
      );
      const lines = text.trimEnd().split("\n");
      for (const line of lines) assert.match(line, LINE);
      assert.ok(lines.some((l) => / out \| hello from out$/.test(l)));
      assert.ok(lines.some((l) => / err \| hello from err$/.test(l)));
      assert.ok(lines.some((l) => / mesh\| mesh agent starts talker: /.test(l)));
    } finally {
      await process1.stop();
    }
  });
});
