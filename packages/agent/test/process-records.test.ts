// What the mesh started is found and stopped by the next start: by its record (PID and start time)
// or, killed before its record was written, by its environment mark. A reused PID is never stopped.
import assert from "node:assert/strict";
import { quietLogger } from "@mesh/testkit";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  isRunning,
  processStartTime,
  ProcessRecords,
  stopLeftoverModules,
  stopLeftovers,
} from "../src/index.ts";

describe("process records", () => {
  let dir: string;
  const started: ChildProcess[] = [];
  const run = (command: string, args: string[], env: Record<string, string> = {}): ChildProcess => {
    const child = spawn(command, args, {
      detached: true,
      stdio: "ignore",
      env: { PATH: process.env["PATH"], ...env },
    });
    started.push(child);
    return child;
  };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-records-"));
  });
  after(async () => {
    for (const child of started) {
      try {
        process.kill(-child.pid!, "SIGKILL");
      } catch {
        // gone
      }
    }
    await rm(dir, { recursive: true, force: true });
  });

  void it("a start time is read from /proc, and a process that exited has none", async () => {
    assert.ok(Number.isInteger(processStartTime(process.pid)));
    const child = run("true", []);
    await new Promise((r) => child.once("exit", r));
    assert.equal(processStartTime(child.pid!), undefined);
  });

  void it("records are written whole, and read back by the next start", async () => {
    const state = join(dir, "whole");
    const records = new ProcessRecords(state);
    records.add({ kind: "module", name: "a", pid: 11, start: 5 });
    records.add({ kind: "bus", name: "nats-server", pid: 12, start: 6 });
    records.remove(11);
    assert.deepEqual(JSON.parse(await readFile(records.path, "utf8")), [
      { kind: "bus", name: "nats-server", pid: 12, start: 6 },
    ]);
    assert.deepEqual(new ProcessRecords(state).list(), [
      { kind: "bus", name: "nats-server", pid: 12, start: 6 },
    ]);
    assert.deepEqual(
      (await readdir(state)).filter((n) => n.startsWith(".")),
      [],
      "no temp file is left",
    );
  });

  void it("a recorded module still running is stopped with its group; a record whose PID is someone else's now is left alone", async () => {
    const state = join(dir, "recorded");
    const records = new ProcessRecords(state);
    // A module that started a child of its own: both go, as its group.
    const module = run("sh", ["-c", "sleep 300 & wait"]);
    const innocent = run("sleep", ["300"]);
    await new Promise((r) => setTimeout(r, 100));
    records.add({ kind: "module", name: "m", pid: module.pid!, start: processStartTime(module.pid!)! });
    records.add({
      kind: "module",
      name: "reused",
      pid: innocent.pid!,
      start: processStartTime(innocent.pid!)! - 1,
    });
    const stopped = await stopLeftovers({
      records,
      kind: "module",
      marked: () => false,
      graceMs: 5_000,
      logger: quietLogger,
      where: "test",
    });
    assert.deepEqual(
      stopped.map((p) => p.name),
      ["m"],
    );
    assert.equal(processStartTime(module.pid!), undefined);
    assert.ok(isRunning(innocent.pid!, processStartTime(innocent.pid!)!), "the reused PID's process runs on");
    assert.deepEqual(records.list(), [], "the records of the last run are cleared");
  });

  void it("a module killed before its record was written is found by MESH_STATE_DIR and MESH_MODULE", async () => {
    const state = join(dir, "marked");
    const other = join(dir, "other-node");
    const orphan = run("sleep", ["300"], { MESH_STATE_DIR: state, MESH_MODULE: "orphan" });
    const neighbour = run("sleep", ["300"], { MESH_STATE_DIR: other, MESH_MODULE: "neighbour" });
    const notAModule = run("sleep", ["300"], { MESH_STATE_DIR: state });
    await new Promise((r) => setTimeout(r, 100));
    const warned: string[] = [];
    await stopLeftoverModules(state, 5_000, { ...quietLogger, warn: (m) => warned.push(m) });
    assert.equal(processStartTime(orphan.pid!), undefined, "the orphan is stopped");
    assert.ok(processStartTime(neighbour.pid!) !== undefined, "another node's module runs on");
    assert.ok(processStartTime(notAModule.pid!) !== undefined, "a process that is no module runs on");
    assert.match(warned.join("\n"), new RegExp(`orphan \\(pid ${orphan.pid}\\)`));
  });

  void it("a leftover that ignores SIGTERM is killed after the grace period", async () => {
    const state = join(dir, "stubborn");
    const stubborn = run("sh", ["-c", "trap '' TERM; sleep 300 & wait; sleep 300"], {
      MESH_STATE_DIR: state,
      MESH_MODULE: "stubborn",
    });
    await new Promise((r) => setTimeout(r, 200));
    const warned: string[] = [];
    await stopLeftoverModules(state, 300, { ...quietLogger, warn: (m) => warned.push(m) });
    assert.equal(processStartTime(stubborn.pid!), undefined);
    assert.match(warned.join("\n"), /did not stop within 0.3 s of SIGTERM: killing it/);
  });
});
