// Reading a fleet again when nothing changed gives the fleet read before (parsing it again is most
// of a reload's cost at thousands of modules); any change to the fleet file or to one manifest,
// and any file that cannot be read, is read in full.
import assert from "node:assert/strict";
import { readFile, rm, stat, symlink, unlink, utimes, writeFile } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { loadFleetPlan } from "@mesh/controller";
import { FleetRefusedError } from "../src/fleet-plan.ts";
import { ManifestError } from "@mesh/manifest";
import { FLEET_YAML, makeFleetDir, WITH_APP4, type FleetDir } from "./fleet-dir.ts";

void describe("reading the fleet again", () => {
  let fleet: FleetDir;
  before(async () => {
    fleet = await makeFleetDir();
    await fleet.writeFleet(WITH_APP4);
  });
  after(async () => {
    await rm(fleet.dir, { recursive: true, force: true });
  });
  const withoutReadAt = ({ readAt: _, ...rest }: Awaited<ReturnType<typeof loadFleetPlan>>) => rest;
  const consumersOf = (read: Awaited<ReturnType<typeof loadFleetPlan>>, instance: string) =>
    read.plan.instances.find((i) => i.provider === instance)?.consumers.map((c) => c.consumer);

  void it("gives the same fleet, read at the new time, when no file changed", async () => {
    const first = await loadFleetPlan(fleet.fleetFile);
    await new Promise((r) => setTimeout(r, 5));
    const again = await loadFleetPlan(fleet.fleetFile);
    assert.deepEqual(withoutReadAt(again), withoutReadAt(first));
    assert.notEqual(again.readAt, first.readAt);
  });

  void it("reads a manifest changed since, and what it changes shows", async () => {
    const path = join(fleet.dir, "app4", "module.json");
    const before = await readFile(path, "utf8");
    assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2", "app4"]);
    const manifest = JSON.parse(before) as { needs: Record<string, unknown> };
    manifest.needs = { "redis-namespace": { values: {} } };
    await writeFile(path, JSON.stringify(manifest));
    try {
      const read = await loadFleetPlan(fleet.fleetFile);
      assert.deepEqual(consumersOf(read, "postgres"), ["app1", "app2"]);
      assert.deepEqual(consumersOf(read, "redis"), ["app2", "app3", "app4"]);
    } finally {
      await writeFile(path, before);
    }
    assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2", "app4"]);
  });

  void it("reads a changed fleet file", async () => {
    await loadFleetPlan(fleet.fleetFile);
    await fleet.writeFleet(FLEET_YAML);
    try {
      assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2"]);
    } finally {
      await fleet.writeFleet(WITH_APP4);
    }
  });

  void it("sees a manifest changed long after it was read, even at the same size with its mtime put back", async () => {
    const path = join(fleet.dir, "app4", "module.json");
    const before = await readFile(path, "utf8");
    // A whole second, which utimes sets back exactly, to the nanosecond.
    const mtime = new Date(Math.floor(Date.now() / 1000) * 1000 - 10_000);
    await utimes(path, mtime, mtime);
    // Long enough for every file's stamp to be taken well after its last change, so it is trusted.
    await sleep(2_200);
    await loadFleetPlan(fleet.fleetFile);
    await loadFleetPlan(fleet.fleetFile);
    // The same length, another interface: only the text (and the inode's ctime) tells.
    const changed = before.replace('"postgres-database"', '"redis-namespace"  ');
    assert.equal(changed.length, before.length);
    assert.notEqual(changed, before);
    await writeFile(path, changed);
    await utimes(path, mtime, mtime);
    assert.equal((await stat(path, { bigint: true })).mtimeNs, BigInt(mtime.getTime()) * 1_000_000n);
    try {
      assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2"]);
    } finally {
      await writeFile(path, before);
    }
    assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2", "app4"]);
  });

  void it("sees a manifest replaced by another file, or by a link to one, with the same text length", async () => {
    const path = join(fleet.dir, "app4", "module.json");
    const before = await readFile(path, "utf8");
    await sleep(2_200);
    await loadFleetPlan(fleet.fleetFile);
    const other = join(fleet.dir, "app4", "other.json");
    await writeFile(other, before.replace('"postgres-database"', '"redis-namespace"  '));
    try {
      await unlink(path);
      await symlink(other, path);
      assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2"]);
    } finally {
      await unlink(path);
      await writeFile(path, before);
      await unlink(other);
    }
    assert.deepEqual(consumersOf(await loadFleetPlan(fleet.fleetFile), "postgres"), ["app1", "app2", "app4"]);
  });

  void it("refuses the fleet when a manifest read before is gone, naming it", async () => {
    await loadFleetPlan(fleet.fleetFile);
    const path = join(fleet.dir, "app4", "module.json");
    const text = await readFile(path, "utf8");
    await unlink(path);
    try {
      await assert.rejects(loadFleetPlan(fleet.fleetFile), (err: unknown) => {
        assert.ok(err instanceof ManifestError || err instanceof FleetRefusedError, String(err));
        assert.match((err as Error).message, /app4/);
        return true;
      });
    } finally {
      await writeFile(path, text);
    }
    assert.ok((await loadFleetPlan(fleet.fleetFile)).modules.some((m) => m.name === "app4"));
  });
});
