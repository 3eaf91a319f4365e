// `mesh backup` of a running mesh with two consumers of a real Postgres, its whole state directory
// removed, `mesh restore` into it (the embedded bus comes back on another port), and `mesh up`
// again: every consumer logs in with the password it had, within 30 s, nothing minted; the
// ledgers' history is there. Then a backup of the stopped mesh (its bus started for the time of it).
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { runMesh } from "../packages/cli/test/run-mesh.ts";
import { BackupMesh, CONSUMERS } from "./backup-mesh.ts";

describe("backup and restore of a running mesh", { timeout: 420_000 }, () => {
  let mesh: BackupMesh;
  const busPort = async () => (await readFile(join(mesh.state, "bus", "port"), "utf8")).trim();
  const ledgerOf = async (module: string) =>
    JSON.parse((await runMesh(["ledger", module, "--json", "--state", mesh.state])).stdout) as {
      entries: { seq: number }[];
    };

  before(async () => {
    mesh = await BackupMesh.make("mesh-backup-");
    await mesh.start();
  });

  after(async () => {
    await mesh?.dispose();
  });

  it("restores onto another bus port, and every consumer logs in with its unchanged password within 30 s", async () => {
    const passwords = await mesh.everyConsumerLogsIn(120);
    // A ledger entry the restore must keep: a tool call recorded in postgres's history.
    const status = await runMesh(["tool", "postgres", "status", "--state", mesh.state]);
    assert.equal(status.code, 0, status.stderr);
    const ledgerBefore = await ledgerOf("postgres");
    assert.ok(ledgerBefore.entries.length > 0, "postgres's ledger has history before the backup");
    const oldPort = await busPort();

    const file = join(mesh.dir, "mesh.backup");
    const backup = await runMesh(["backup", "--out", file, "--state", mesh.state, "--json"]);
    assert.equal(backup.code, 0, backup.stderr);
    assert.match(backup.stderr, /runs: its bus at .* is read while it serves/);
    assert.equal((await stat(file)).mode & 0o777, 0o600, "the backup is 0600");
    const counts = JSON.parse(backup.stdout) as { streams: number; messages: number; files: number };
    assert.ok(counts.streams >= 4 && counts.messages > 0 && counts.files >= 2, backup.stdout);
    // The ledgers' layout: one history stream and one snapshots bucket every module shares, none of a module's own.
    assert.match(backup.stderr, /stream MESH_LEDGER: [1-9]\d* message/);
    assert.match(backup.stderr, /stream KV_mesh-ledgers: \d+ message/);
    assert.doesNotMatch(backup.stderr, /stream (LEDGER_|KV_mesh-ledger-)/);
    const raw = await readFile(file);
    for (const m of CONSUMERS)
      assert.ok(!raw.includes(passwords.get(m)!), `no password of ${m} in the clear`);

    await mesh.stop();
    await rm(mesh.state, { recursive: true, force: true });
    // The old port held by another, so the restored bus must come back on another one.
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(Number(oldPort), "127.0.0.1", () => r()));
    try {
      const restored = await runMesh(["restore", file, "--state", mesh.state]);
      assert.equal(restored.code, 0, `${restored.stdout}${restored.stderr}`);
      assert.match(restored.stdout, /restored into /);
      await mesh.start();
      assert.notEqual(await busPort(), oldPort, "the restored bus answers on another port");
      await mesh.everyConsumerLogsIn(30, passwords);
      assert.doesNotMatch(mesh.up!.output(), /is enrolling/, "the node kept its enrollment");
    } finally {
      holder.close();
    }
    const ledgerAfter = await ledgerOf("postgres");
    const seqs = new Set(ledgerAfter.entries.map((e) => e.seq));
    assert.ok(
      ledgerBefore.entries.every((e) => seqs.has(e.seq)),
      `the ledger's history is there (${ledgerAfter.entries.length} entries after, ${ledgerBefore.entries.length} before)`,
    );
  });

  it("backs up a stopped mesh by starting its bus for the time of it, and refuses to restore over a mesh", async () => {
    await mesh.stop();
    const file = join(mesh.dir, "stopped.backup");
    const backup = await runMesh(["backup", "--out", file, "--state", mesh.state]);
    assert.equal(backup.code, 0, backup.stderr);
    assert.match(backup.stderr, /is stopped: its nats-server runs for the time of this/);
    const over = await runMesh(["restore", file, "--state", mesh.state]);
    assert.equal(over.code, 1, over.stderr);
    assert.match(over.stderr, /already holds a mesh/);
    // A cut-off file is refused before anything is written.
    const raw = await readFile(file);
    await writeFile(join(mesh.dir, "cut.backup"), raw.subarray(0, Math.floor(raw.length / 2)));
    const cut = await runMesh(["restore", join(mesh.dir, "cut.backup"), "--state", join(mesh.dir, "other")]);
    assert.equal(cut.code, 2, cut.stderr);
    assert.match(cut.stderr, /cut off|cannot be read as a mesh backup/);
    const none = await stat(join(mesh.dir, "other", "controller")).then(
      () => true,
      () => false,
    );
    assert.equal(none, false, "nothing was written from a cut-off file");
  });

  it("a state of only controller/ and bus/jetstream/ (copied while stopped) comes up on another port: the node enrolls again through the bus that serves now", async () => {
    await mesh.stop();
    const passwords = new Map<string, string>();
    for (const m of CONSUMERS) passwords.set(m, (await mesh.passwordOf(m))!);
    const oldPort = await busPort();
    // What the docs once said to back up, and nothing else: the nodes' own state is lost.
    for (const name of await readdir(mesh.state))
      if (name !== "controller" && name !== "bus")
        await rm(join(mesh.state, name), { recursive: true, force: true });
    for (const name of await readdir(join(mesh.state, "bus")))
      if (name !== "jetstream") await rm(join(mesh.state, "bus", name), { recursive: true, force: true });
    const holder = createServer();
    await new Promise<void>((r) => holder.listen(Number(oldPort), "127.0.0.1", () => r()));
    try {
      await mesh.start();
      assert.notEqual(await busPort(), oldPort);
      await mesh.everyConsumerLogsIn(90, passwords);
      assert.match(mesh.up!.output(), /enrolls with a renewed join token/);
      assert.doesNotMatch(mesh.up!.output(), /the bus does not answer yet/);
    } finally {
      holder.close();
    }
  });
});
