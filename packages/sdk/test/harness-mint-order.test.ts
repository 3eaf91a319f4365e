// The harness never puts back a password older than the one its backend holds (as after a restore
// of a backup taken before a rotation): the backend's mark records when the applied password was
// minted, and an asked entry minted before it fails, named, instead of being applied.
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { describe, it } from "node:test";
import { heldMintOf, OLDER_THAN_BACKEND, olderThanHeld } from "@mesh/manifest";
import { makeFixture, type Fixture } from "./harness-fixture.ts";

const T1 = "2026-11-01T10:00:00.000Z";
const T2 = "2026-11-02T10:00:00.000Z";
const T3 = "2026-11-03T10:00:00.000Z";

async function withFixture(fn: (f: Fixture) => Promise<void>): Promise<void> {
  const f = await makeFixture();
  try {
    await fn(f);
  } finally {
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
  }
}

/** Asks for `alpha` with `password`, minted at `minted` (none when undefined). */
async function askAlpha(f: Fixture, password: string, minted: string | undefined): Promise<void> {
  await f.writeSecret("alpha", password);
  await f.ask(["alpha"], { alpha: minted === undefined ? {} : { minted } });
}

const statusOf = (f: Fixture) => f.handle.status().consumers.find((c) => c.login === "alpha");

describe("a password older than the backend's", () => {
  it("is not applied after a restart: the consumer fails as older-than-backend, naming both mint times, said once", async () => {
    await withFixture(async (first) => {
      await askAlpha(first, "rotated-password", T2);
      await first.periodic();
      assert.equal(first.adapter.backend.get("alpha")?.minted, T2, "the mark records the mint time");
      const f = await first.restart();
      try {
        await askAlpha(f, "backed-up-password", T1);
        await f.periodic(4);
        assert.equal(
          f.adapter.backend.get("alpha")?.password,
          "rotated-password",
          "the older one is not put back",
        );
        const c = statusOf(f);
        assert.equal(c?.state, "failing");
        assert.equal(c?.class, OLDER_THAN_BACKEND);
        assert.match(c?.why ?? "", new RegExp(`minted at ${T2}, newer than the asked one \\(${T1}\\)`));
        assert.equal(heldMintOf(c?.why ?? ""), T2, "the controller reads the held mint time back");
        assert.equal(f.lines.filter((l) => l.includes("newer than the asked one")).length, 1);
        assert.equal(f.actions.filter((a) => a.login === "alpha").length, 0, "nothing recorded as applied");

        // The mesh rotates it: a password minted after the held one is applied as any new one.
        await askAlpha(f, "newest-password", T3);
        await f.periodic();
        assert.equal(f.adapter.backend.get("alpha")?.password, "newest-password");
        assert.equal(f.adapter.backend.get("alpha")?.minted, T3);
        assert.equal(statusOf(f)?.state, "active");
      } finally {
        await f.handle.stop();
      }
    });
  });

  it("is not applied over what this process applied either", async () => {
    await withFixture(async (f) => {
      await askAlpha(f, "rotated-password", T2);
      await f.periodic();
      await askAlpha(f, "backed-up-password", T1);
      await f.periodic(2);
      assert.equal(f.adapter.backend.get("alpha")?.password, "rotated-password");
      assert.equal(statusOf(f)?.class, OLDER_THAN_BACKEND);
    });
  });

  it("the same mint time, or a newer one, is applied", async () => {
    await withFixture(async (f) => {
      await askAlpha(f, "first-password", T2);
      await f.periodic();
      await askAlpha(f, "same-time-password", T2);
      await f.periodic();
      assert.equal(f.adapter.backend.get("alpha")?.password, "same-time-password");
      assert.equal(statusOf(f)?.state, "active");
    });
  });

  it("a mark without a mint time, or an entry without one (a mesh of 0.1.0), is applied as before", async () => {
    await withFixture(async (first) => {
      await askAlpha(first, "old-mesh-password", undefined);
      await first.periodic();
      assert.equal(first.adapter.backend.get("alpha")?.minted, undefined);
      const f = await first.restart();
      try {
        await askAlpha(f, "upgraded-password", T1);
        await f.periodic();
        assert.equal(f.adapter.backend.get("alpha")?.password, "upgraded-password");
        assert.equal(f.adapter.backend.get("alpha")?.minted, T1);
        await askAlpha(f, "unstamped-password", undefined);
        await f.periodic();
        assert.equal(f.adapter.backend.get("alpha")?.password, "unstamped-password");
        assert.equal(statusOf(f)?.state, "active");
      } finally {
        await f.handle.stop();
      }
    });
  });
});

describe("olderThanHeld", () => {
  it("answers words only when both times are known and the asked one is older", () => {
    assert.equal(olderThanHeld(undefined, T2), undefined);
    assert.equal(olderThanHeld(T1, undefined), undefined);
    assert.equal(olderThanHeld(T2, T2), undefined);
    assert.equal(olderThanHeld(T3, T2), undefined);
    assert.equal(olderThanHeld("not a time", T2), undefined);
    assert.match(olderThanHeld(T1, T2) ?? "", /restore of an older backup/);
  });
});
