// A pass does only what changed: the watcher's word says which secrets to read, a watch pass reads
// the contributions file only when it changed, and each verification reads every secret again, so
// a change the watcher never reported is still applied (rule 2). Verification asks the backend
// outside the lock: a change meanwhile is applied at once, and a check whose consumer changed while
// it ran is dropped (rule 10).
import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import type { Provision } from "@mesh/sdk";
import { until } from "@mesh/testkit";
import { watchKey, type FileWatch } from "../src/watcher.ts";
import { makeFixture, type Fixture } from "./harness-fixture.ts";

const MINUTE = 60_000;

/** A watcher that reports only what the test tells it: a change it is not told of is a lost event. */
class ToldWatch implements FileWatch {
  watched = new Set<string>();
  constructor(private readonly onChange: (path: string) => void) {}
  watchFiles(paths: Iterable<string>): void {
    this.watched = new Set([...paths].map(watchKey));
  }
  watching(path: string): boolean {
    return this.watched.has(watchKey(path));
  }
  reopen(): string[] {
    return [];
  }
  unwatched(): string[] {
    return [];
  }
  close(): void {}
  tell(path: string): void {
    this.onChange(watchKey(path));
  }
}

async function withWatched(
  initial: readonly string[],
  fn: (f: Fixture, told: ToldWatch) => Promise<void>,
  options: Parameters<typeof makeFixture>[0] = {},
): Promise<void> {
  let told: ToldWatch | undefined;
  const f = await makeFixture(
    {
      watch: true,
      verifyEvery: MINUTE,
      watcher: (onChange) => (told = new ToldWatch(onChange)),
      ...options,
    },
    initial,
  );
  try {
    assert.ok(told);
    await fn(f, told);
  } finally {
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
  }
}

/**
 * The actions the harness reported, as `action:login`. The first `madeAtOnce` are applied
 * concurrently by the first pass and may finish in any order, so they are sorted.
 */
function actionsSaid(f: Fixture, madeAtOnce: number): string[] {
  const said = f.actions.map((a) => `${a.action}:${a.login}`);
  return [...said.slice(0, madeAtOnce).sort(), ...said.slice(madeAtOnce)];
}

/** Lets the pass a change set off start, then waits for it. */
async function settled(f: Fixture): Promise<void> {
  await new Promise((r) => setImmediate(r));
  await f.handle.idle();
}

describe("a pass does only what changed", () => {
  it("a secret changed without a word from the watcher is applied by the next verification (rule 2)", async () => {
    await withWatched(["alpha", "beta"], async (f) => {
      const first = f.adapter.backend.get("alpha")?.password;
      await f.writeSecret("alpha", "changed-behind-the-watcher");
      await f.periodic(11); // 55 s: plain passes read no secret the watcher did not name
      assert.equal(f.adapter.backend.get("alpha")?.password, first);
      assert.equal(f.adapter.count("create", "alpha"), 1);
      await f.periodic(1); // a minute: the verification reads every secret again
      assert.equal(f.adapter.backend.get("alpha")?.password, "changed-behind-the-watcher");
      assert.deepEqual(actionsSaid(f, 2), ["created:alpha", "created:beta", "re-applied:alpha"]);
      assert.equal(f.adapter.count("create", "beta"), 1, "beta, unchanged, is not applied again");
    });
  });

  it("a secret the watcher names is read and applied at once", async () => {
    await withWatched(["alpha", "beta"], async (f, told) => {
      await f.writeSecret("beta", "rotated");
      told.tell(join(f.dir, "beta.secret"));
      await settled(f);
      assert.equal(f.adapter.backend.get("beta")?.password, "rotated");
      assert.equal(f.adapter.count("create", "alpha"), 1);
    });
  });

  it("a watch pass reads the file only when the watcher names it; a periodic pass reads it anyway", async () => {
    await withWatched(["alpha"], async (f, told) => {
      await f.ask(["alpha", "beta"]);
      await f.watchPass();
      assert.equal(f.adapter.backend.has("beta"), false, "nobody said the file changed");
      told.tell(f.receives);
      await settled(f);
      assert.equal(f.adapter.backend.has("beta"), true);
      await f.ask(["alpha", "beta", "gamma"]);
      await f.periodic();
      assert.equal(f.adapter.backend.has("gamma"), true, "a periodic pass catches a lost event");
    });
  });

  it("unwatched, every pass reads everything, as before", async () => {
    const f = await makeFixture({ watch: false }, ["alpha"]);
    try {
      await f.writeSecret("alpha", "second");
      await f.periodic();
      assert.equal(f.adapter.backend.get("alpha")?.password, "second");
    } finally {
      await f.close();
    }
  });
});

describe("a watcher that reports at once", () => {
  it("a change reported while the provisioner is still being made is kept for the first watch pass", async () => {
    let told: ToldWatch | undefined;
    const f = await makeFixture(
      {
        watch: true,
        verifyEvery: MINUTE,
        watcher: (onChange) => {
          told = new ToldWatch(onChange);
          onChange(watchKey(join(tmpdir(), "reported-before-the-stages")));
          return told;
        },
      },
      ["alpha"],
    );
    try {
      assert.ok(told);
      await f.handle.idle();
      assert.equal(f.stateOf("alpha"), "active", "the first pass ran as ever");
    } finally {
      await f.close();
    }
  });
});

/** Makes `holds` for `login` wait until the returned function is called. */
function gateHolds(f: Fixture, login: string): { reached: () => boolean; open: () => void } {
  let open: () => void = () => {};
  const gate = new Promise<void>((r) => (open = r));
  let reached = false;
  const holds = f.adapter.holds.bind(f.adapter);
  Object.assign(f.adapter, {
    holds: async (p: Provision) => {
      if (p.as === login) {
        reached = true;
        await gate;
      }
      return holds(p);
    },
  });
  return { reached: () => reached, open };
}

describe("verification never blocks a change", () => {
  it("a consumer added while a check hangs is created before the check returns", async () => {
    await withWatched(["alpha", "beta"], async (f, told) => {
      const gate = gateHolds(f, "alpha");
      f.clock.advance(MINUTE); // the periodic pass is due to verify
      await until("alpha's check began", gate.reached);
      await f.ask(["alpha", "beta", "gamma"]);
      told.tell(f.receives);
      await until("gamma created", () => f.adapter.backend.has("gamma"));
      gate.open();
      await f.handle.idle();
      assert.equal(f.stateOf("gamma"), "active");
    });
  });

  it("a change waits behind one slice of a verification's answers at most, not the whole batch", async () => {
    const many = Array.from({ length: 600 }, (_, i) => `c${String(i).padStart(3, "0")}`);
    await withWatched(
      many,
      async (f, told) => {
        // The backend loses every consumer: the verification re-applies all 600, under the lock,
        // a slice at a time; the first re-apply waits until the change below is queued.
        for (const login of many) f.adapter.backend.delete(login);
        let open: () => void = () => {};
        const gate = new Promise<void>((r) => (open = r));
        const order: string[] = [];
        let reached = false;
        const create = f.adapter.create.bind(f.adapter);
        f.adapter.create = async (p: Provision) => {
          reached = true;
          if (order.length === 0) await gate;
          order.push(p.as);
          return create(p);
        };
        f.clock.advance(MINUTE); // the periodic pass is due to verify
        await until("the first re-apply waits at the gate", () => reached);
        await f.ask([...many, "newbie"]);
        told.tell(f.receives);
        await new Promise((r) => setTimeout(r, 20)); // the change's pass is queued on the lock
        open();
        await until("newbie created", () => f.adapter.backend.has("newbie"));
        const at = order.indexOf("newbie");
        assert.ok(at >= 0 && at < many.length, `newbie was created after ${at} of the 600 re-applies`);
        assert.ok(at <= 256 + 8, `newbie waited behind ${at} re-applies: more than one slice`);
        await f.handle.idle();
        assert.equal(f.stateOf("newbie"), "active");
        assert.ok(
          many.every((login) => f.adapter.backend.has(login)),
          "every lost consumer re-applied",
        );
      },
      { verifyBatch: 1000 },
    );
  });

  it("a check whose consumer is deleted while it runs is dropped, never acted on", async () => {
    await withWatched(
      ["alpha", "beta"],
      async (f) => {
        const gate = gateHolds(f, "alpha");
        f.clock.advance(MINUTE);
        await until("alpha's check began", gate.reached);
        // While the check runs: alpha is no longer asked for, retired, and deleted by a person.
        await f.ask(["beta"]);
        f.clock.advance(5_000);
        await f.handle.pass("periodic");
        assert.equal(f.stateOf("alpha"), "retired");
        const deleted = await f.handle.cleanupDelete("alpha", "ana");
        assert.equal(deleted.login, "alpha");
        gate.open(); // alpha's check answers "not held": it is gone
        await f.handle.idle();
        assert.equal(f.adapter.backend.has("alpha"), false, "not made again");
        assert.equal(f.adapter.count("create", "alpha"), 1);
        assert.equal(f.stateOf("alpha"), undefined);
        assert.ok(!f.lines.some((l) => l.includes("alpha: the backend no longer holds it")));
        assert.deepEqual(actionsSaid(f, 2), [
          "created:alpha",
          "created:beta",
          "retired:alpha",
          "deleted:alpha",
        ]);
      },
      { stablePasses: 1 },
    );
  });

  it("a check whose consumer is applied again while it runs is dropped", async () => {
    await withWatched(["alpha"], async (f, told) => {
      const gate = gateHolds(f, "alpha");
      f.clock.advance(MINUTE);
      await until("alpha's check began", gate.reached);
      // The password changes behind the check: the new one is applied, the old check is stale.
      f.adapter.backend.get("alpha")!.password = "changed-by-hand";
      await f.writeSecret("alpha", "new-one");
      told.tell(join(f.dir, "alpha.secret"));
      await until("alpha re-applied", () => f.adapter.backend.get("alpha")?.password === "new-one");
      gate.open();
      await f.handle.idle();
      assert.equal(
        f.adapter.count("create", "alpha"),
        2,
        "created, then re-applied once; the check did nothing",
      );
      assert.ok(!f.lines.some((l) => l.includes("no longer holds it")));
    });
  });
});
