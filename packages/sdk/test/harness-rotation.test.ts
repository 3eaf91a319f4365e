// A rotation's phases (add, deliver, drain, remove) on a backend that holds two passwords on one
// login, and the cut-over that stays for one that cannot. The backend is an OverlapMemoryAdapter and
// time is a FakeClock: these are the loop's own rules, not any server's.
import assert from "node:assert/strict";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { MemoryAdapter, OverlapMemoryAdapter } from "@mesh/testkit";
import { makeFixture, type Fixture } from "./harness-fixture.ts";

const GRACE = 60_000;

/** What the agent does on a rotation: the old password beside the new, then the entry naming both. */
async function rotate(f: Fixture, login: string, next: string): Promise<string> {
  const old = f.passwordOf(login);
  const retiring = join(f.dir, `${login}.retiring`);
  await writeFile(retiring, `${old}\n`, { mode: 0o600 });
  await f.writeSecret(login, next);
  await f.ask([login], { [login]: { retiring } });
  return old;
}

const rotationOf = (f: Fixture, login: string) =>
  f.handle.status().consumers.find((c) => c.login === login)?.rotation;

const phasesSaid = (f: Fixture, login: string) =>
  f.actions.filter((a) => a.login === login && a.action.startsWith("rotation-")).map((a) => a.action);

describe("a rotation on a backend that holds two passwords", () => {
  it("makes the new password valid beside the old one, then removes the old one at the grace bound", async () => {
    const adapter = new OverlapMemoryAdapter();
    const f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      const old = await rotate(f, "alpha", "second-password");
      await f.periodic();
      assert.ok(adapter.accepts("alpha", old), "the old password still logs in");
      assert.ok(adapter.accepts("alpha", "second-password"), "the new one logs in");
      assert.equal(rotationOf(f, "alpha")?.phase, "drain");
      assert.equal(adapter.backend.get("alpha")?.rotation?.phase, "drain", "the phase is in the mark");
      assert.deepEqual(phasesSaid(f, "alpha"), ["rotation-add", "rotation-deliver", "rotation-drain"]);
      assert.ok(
        f.actions.every((a) => !a.why.includes(old) && !a.why.includes("second-password")),
        "no password in the ledger",
      );

      await f.periodic(Math.floor(GRACE / 5_000) - 2);
      assert.ok(adapter.accepts("alpha", old), "the old password lasts until the grace bound");
      f.clock.advance(10_000);
      await f.handle.idle();
      await f.periodic();
      assert.equal(adapter.accepts("alpha", old), false, "the old password goes at the grace bound");
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.equal(rotationOf(f, "alpha"), undefined);
      assert.equal(adapter.backend.get("alpha")?.rotation, undefined, "the mark no longer records it");
      assert.deepEqual(phasesSaid(f, "alpha"), [
        "rotation-add",
        "rotation-deliver",
        "rotation-drain",
        "rotation-remove",
      ]);
    } finally {
      await f.close();
    }
  });

  it("a provider restarted during the drain keeps both passwords until the grace bound", async () => {
    const adapter = new OverlapMemoryAdapter();
    let f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      const old = await rotate(f, "alpha", "second-password");
      await f.periodic();
      f = await f.restart();
      await f.periodic();
      assert.ok(adapter.accepts("alpha", old), "the old password still logs in after the restart");
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.equal(rotationOf(f, "alpha")?.phase, "drain", "the phase was read back from the mark");
      f.clock.advance(GRACE);
      await f.periodic();
      assert.equal(adapter.accepts("alpha", old), false);
      assert.ok(adapter.accepts("alpha", "second-password"));
    } finally {
      await f.close();
      await rm(f.dir, { recursive: true, force: true });
    }
  });

  it("a provider restarted during the drain removes the old password at the grace bound, not at a later pass", async () => {
    const adapter = new OverlapMemoryAdapter();
    // Passes an hour apart: only the timer for the grace bound can end the drain in time.
    const HOUR = 3_600_000;
    let f = await makeFixture({ rotationGrace: GRACE, every: HOUR }, ["alpha"], undefined, adapter);
    try {
      const old = await rotate(f, "alpha", "second-password");
      await f.watchPass();
      await f.handle.idle();
      assert.equal(rotationOf(f, "alpha")?.phase, "drain");
      f = await f.restart();
      await f.watchPass();
      await f.handle.idle();
      assert.ok(adapter.accepts("alpha", old), "the old password still logs in after the restart");
      f.clock.advance(GRACE / 2);
      await f.handle.idle();
      assert.ok(adapter.accepts("alpha", old), "and until the grace bound");
      f.clock.advance(GRACE / 2 + 1_000);
      await f.handle.idle();
      assert.equal(adapter.accepts("alpha", old), false, "the old password goes at the grace bound");
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.equal(rotationOf(f, "alpha"), undefined);
    } finally {
      await f.close();
      await rm(f.dir, { recursive: true, force: true });
    }
  });

  it("a provider restarted after the rotation never makes the removed password valid again", async () => {
    const adapter = new OverlapMemoryAdapter();
    let f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      const old = await rotate(f, "alpha", "second-password");
      await f.periodic();
      f.clock.advance(GRACE);
      await f.periodic();
      assert.equal(adapter.accepts("alpha", old), false);
      // The entry still names the retired password's file: it is not a new rotation.
      f = await f.restart();
      await f.periodic(2);
      assert.equal(adapter.accepts("alpha", old), false, "the removed password stays removed");
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.equal(adapter.count("overlap", "alpha"), 1, "one overlap, for the one rotation");
    } finally {
      await f.close();
      await rm(f.dir, { recursive: true, force: true });
    }
  });

  it("a second rotation after the first one finished overlaps again", async () => {
    const adapter = new OverlapMemoryAdapter();
    const f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      await rotate(f, "alpha", "second-password");
      await f.periodic();
      f.clock.advance(GRACE);
      await f.periodic();
      await rotate(f, "alpha", "third-password");
      await f.periodic();
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.ok(adapter.accepts("alpha", "third-password"));
      assert.equal(rotationOf(f, "alpha")?.phase, "drain");
    } finally {
      await f.close();
    }
  });

  it("a password replaced at once (mesh rotate --now) during a drain: both older passwords go, the sessions end once", async () => {
    const adapter = new OverlapMemoryAdapter();
    let f = await makeFixture({ rotationGrace: GRACE }, ["alpha", "beta"], undefined, adapter);
    try {
      const first = await rotate(f, "alpha", "second-password");
      await f.periodic();
      assert.equal(rotationOf(f, "alpha")?.phase, "drain");
      // The agent keeps no password being retired for a cut, and says `cut` on the entry.
      await rm(join(f.dir, "alpha.retiring"), { force: true });
      await f.writeSecret("alpha", "third-password");
      await f.ask(["alpha", "beta"], { alpha: { cut: true } });
      await f.periodic();
      assert.equal(adapter.accepts("alpha", first), false, "the first password is refused");
      assert.equal(adapter.accepts("alpha", "second-password"), false, "the leaked one is refused");
      assert.ok(adapter.accepts("alpha", "third-password"));
      assert.equal(rotationOf(f, "alpha"), undefined, "no rotation under way any more");
      assert.equal(adapter.count("endSessions", "alpha"), 1, "its sessions were ended");
      assert.equal(adapter.count("endSessions", "beta"), 0, "nobody else's");
      assert.deepEqual(
        f.actions.filter((a) => a.action === "sessions-ended").map((a) => a.login),
        ["alpha"],
      );
      // The entry still says cut: a later pass, or a restarted provider, ends nothing again.
      await f.periodic(2);
      f = await f.restart();
      await f.periodic(2);
      assert.equal(adapter.count("endSessions", "alpha"), 1, "once, for the one replacement");
    } finally {
      await f.close();
      await rm(f.dir, { recursive: true, force: true });
    }
  });

  it("a password replaced at once on a backend that cuts over: the sessions end once it is applied", async () => {
    const adapter = new MemoryAdapter();
    const f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      const leaked = f.passwordOf("alpha");
      await f.writeSecret("alpha", "new-password");
      await f.ask(["alpha"], { alpha: { cut: true } });
      await f.periodic();
      assert.equal(adapter.accepts("alpha", leaked), false);
      assert.ok(adapter.accepts("alpha", "new-password"));
      assert.equal(adapter.count("endSessions", "alpha"), 1);
    } finally {
      await f.close();
    }
  });

  it("the rotation of one consumer never touches another", async () => {
    const adapter = new OverlapMemoryAdapter();
    const f = await makeFixture({ rotationGrace: GRACE }, ["alpha", "beta"], undefined, adapter);
    try {
      const betaPassword = f.passwordOf("beta");
      await rotate(f, "alpha", "second-password");
      await f.ask(["alpha", "beta"], { alpha: { retiring: join(f.dir, "alpha.retiring") } });
      await f.periodic();
      assert.equal(rotationOf(f, "beta"), undefined);
      assert.equal(adapter.count("overlap", "beta"), 0);
      assert.ok(adapter.accepts("beta", betaPassword));
    } finally {
      await f.close();
    }
  });
});

describe("a rotation on a backend that holds one password", () => {
  it("cuts over as before: the old password is refused at once", async () => {
    const adapter = new MemoryAdapter();
    const f = await makeFixture({ rotationGrace: GRACE }, ["alpha"], undefined, adapter);
    try {
      const old = await rotate(f, "alpha", "second-password");
      await f.periodic();
      assert.equal(adapter.accepts("alpha", old), false);
      assert.ok(adapter.accepts("alpha", "second-password"));
      assert.equal(rotationOf(f, "alpha"), undefined);
      assert.deepEqual(phasesSaid(f, "alpha"), []);
    } finally {
      await f.close();
    }
  });
});
