// `mesh explain` in this process (a spawned mesh costs seconds to start); once through the real
// `mesh`, run from the repository with the fleet file's path as an operator would type it.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { meshInProcess, runMesh, type InProcessRun } from "./run-mesh.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const FLEET = join(root, "examples", "fleet", "mesh.yaml");

const mesh = (...args: string[]): Promise<InProcessRun> => meshInProcess(args);

describe("mesh explain", { timeout: 120_000 }, () => {
  const dirs: string[] = [];
  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it("says allowed, with the emits line, and exits 0 for a declared event", async () => {
    const run = await mesh("explain", "notes", "publish", "mesh.events.notes.note.created", "--fleet", FLEET);
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stdout, /^allowed: notes emits note\.created/);
    assert.match(run.stdout, /examples\/fleet\/notes\/module\.json:7\n$/);
  });

  it("the real mesh says denied, with the line to change, and exits 1 for an undeclared event", async () => {
    const run = await runMesh(
      [
        "explain",
        "notes",
        "publish",
        "mesh.events.notes.note.deleted",
        "--fleet",
        "examples/fleet/mesh.yaml",
      ],
      {},
      root,
    );
    assert.equal(run.code, 1, run.stderr);
    assert.match(run.stdout, /^denied: notes does not declare note\.deleted in "emits"/);
    assert.match(run.stdout, /examples\/fleet\/notes\/module\.json:\d+\n$/);
    assert.equal(run.stderr, "");
  });

  it("denies publishing under another module's name", async () => {
    const run = await mesh(
      "explain",
      "counter",
      "publish",
      "mesh.events.notes.note.created",
      "--fleet",
      FLEET,
    );
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^denied: mesh\.events\.notes\.note\.created is in notes's namespace/);
  });

  it("allows a declared subscription and denies a wider one", async () => {
    const allowed = await mesh(
      "explain",
      "counter",
      "subscribe",
      "mesh.events.notes.note.created",
      "--fleet",
      FLEET,
    );
    assert.equal(allowed.code, 0, allowed.stderr);
    assert.match(allowed.stdout, /^allowed: counter subscribes to notes\.note\.created/);
    const denied = await mesh("explain", "counter", "subscribe", "mesh.events.>", "--fleet", FLEET);
    assert.equal(denied.code, 1);
    assert.match(denied.stdout, /^denied: counter subscribes to nothing that covers mesh\.events\.>/);
  });

  it("answers in JSON with --json", async () => {
    const run = await mesh(
      "explain",
      "notes",
      "publish",
      "mesh.events.notes.note.created",
      "--fleet",
      FLEET,
      "--json",
    );
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as Record<string, unknown>;
    assert.equal(answer["allowed"], true);
    assert.equal(answer["field"], "emits[0]");
    assert.equal(answer["line"], 7);
    const denied = await mesh(
      "explain",
      "ghost",
      "publish",
      "mesh.events.ghost.x",
      "--fleet",
      FLEET,
      "--json",
    );
    assert.equal(denied.code, 1);
    assert.equal((JSON.parse(denied.stdout) as Record<string, unknown>)["allowed"], false);
  });

  it("exits 2 for a bad action, a missing argument or a fleet file that cannot be read", async () => {
    const action = await mesh("explain", "notes", "frob", "mesh.events.notes.x", "--fleet", FLEET);
    assert.equal(action.code, 2);
    assert.match(action.stderr, /"publish" or "subscribe"/);
    assert.equal((await mesh("explain", "notes")).code, 2);
    const dir = await mkdtemp(join(tmpdir(), "mesh-explain-"));
    dirs.push(dir);
    const missing = await mesh(
      "explain",
      "notes",
      "publish",
      "mesh.events.notes.x",
      "--fleet",
      join(dir, "mesh.yaml"),
    );
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /does not exist/);
    await writeFile(join(dir, "bad.yaml"), "nodes: [\n");
    assert.equal((await mesh("explain", "notes", "publish", "x", "--fleet", join(dir, "bad.yaml"))).code, 2);
  });
});
