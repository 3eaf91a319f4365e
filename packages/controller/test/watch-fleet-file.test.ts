// The fleet file's watch reads a file renamed into place at once, and never reads a file that is
// still being written in place: such a file raises "change" events, and the watch waits for them to
// stop before it says the file changed.
import assert from "node:assert/strict";
import { closeSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { watchFleetFile } from "../src/watch-fleet-file.ts";

const silent = { info() {}, warn() {}, error() {} };

void describe("watching the fleet file", () => {
  let dir: string;
  let file: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-watch-fleet-"));
    file = join(dir, "mesh.yaml");
    writeFileSync(file, "nodes: {}\n");
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Runs `act` under a watch and gives what the file held each time the watch said it changed. */
  async function readsDuring(act: () => Promise<void>): Promise<string[]> {
    const reads: string[] = [];
    const watch = watchFleetFile(file, () => reads.push(readFileSync(file, "utf8")), silent);
    try {
      await act();
      // Well past the longest quiet spell the watch waits for.
      await sleep(600);
    } finally {
      watch.close();
    }
    return reads;
  }

  void it("reads a file renamed over it once, whole, and folds renames in a row into one reading", async () => {
    const reads = await readsDuring(async () => {
      for (const n of [1, 2, 3]) {
        writeFileSync(join(dir, ".mesh.yaml.tmp"), `nodes: { node-${n}: {} }\n`);
        renameSync(join(dir, ".mesh.yaml.tmp"), file);
      }
    });
    assert.deepEqual(reads, ["nodes: { node-3: {} }\n"]);
  });

  void it("waits for a file written in place in two steps, and reads it only once it is whole", async () => {
    const whole = "nodes:\n  node-1: {}\n  node-2: {}\n";
    const reads = await readsDuring(async () => {
      const fd = openSync(file, "w");
      try {
        writeSync(fd, whole.slice(0, 10));
        await sleep(60);
        writeSync(fd, whole.slice(10));
      } finally {
        closeSync(fd);
      }
    });
    assert.deepEqual(reads, [whole]);
  });

  void it("waits for a file created in its place and then written", async () => {
    const whole = "nodes:\n  node-9: {}\n";
    await rm(file);
    await sleep(300);
    const reads = await readsDuring(async () => {
      const fd = openSync(file, "wx");
      try {
        await sleep(5);
        writeSync(fd, whole.slice(0, 7));
        await sleep(60);
        writeSync(fd, whole.slice(7));
      } finally {
        closeSync(fd);
      }
    });
    assert.deepEqual(reads, [whole]);
  });

  void it("does not wake for other files in the directory", async () => {
    const reads = await readsDuring(async () => {
      writeFileSync(join(dir, "notes.txt"), "not the fleet\n");
      renameSync(join(dir, "notes.txt"), join(dir, "notes.old"));
    });
    assert.deepEqual(reads, []);
  });
});
