// Every rule of DESIGN §3, each with a test that fails when the rule is broken. The backend is a
// MemoryAdapter and time is a FakeClock: these are the loop's own rules, not any server's.
import assert from "node:assert/strict";
import { rm, unlink } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import type { Provision, ToolError } from "@mesh/sdk";
import { makeFixture, IFACE, type Fixture } from "./harness-fixture.ts";

const MINUTE = 60_000;

async function withFixture(
  initial: readonly string[],
  fn: (f: Fixture) => Promise<void>,
  options: Parameters<typeof makeFixture>[0] = {},
): Promise<void> {
  const f = await makeFixture(options, initial);
  try {
    await fn(f);
  } finally {
    await f.handle.stop();
    await rm(f.dir, { recursive: true, force: true });
  }
}

describe("rule 1: nothing read is not nobody asking", () => {
  const bad: [string, string][] = [
    ["empty", ""],
    ["truncated", '{"requirement":"postgres-database","given":[{"as":"a'],
    ["not JSON", "hello"],
    ["for another requirement", JSON.stringify({ requirement: "redis-namespace", given: [] })],
    ["given null", JSON.stringify({ requirement: IFACE, given: null })],
    ["given not a list", JSON.stringify({ requirement: IFACE, given: { as: "x" } })],
    ["an entry of the wrong type", JSON.stringify({ requirement: IFACE, given: [{ as: 5, secret: "/x" }] })],
  ];
  for (const [what, text] of bad) {
    it(`a contributions file that is ${what} retires nothing and is said once`, async () => {
      await withFixture(["alpha", "beta"], async (f) => {
        assert.equal(f.stateOf("alpha"), "active");
        await f.writeRaw(text);
        await f.periodic(12);
        assert.equal(f.adapter.count("retire"), 0);
        assert.equal(f.stateOf("alpha"), "active");
        const said = f.lines.filter((l) => l.includes("nothing is applied or retired"));
        assert.equal(said.length, 1, said.join("\n"));
        assert.ok(f.handle.status().contributionsProblem);
        await f.ask(["alpha", "beta"]);
        await f.periodic();
        assert.equal(f.lines.filter((l) => l.includes("readable again")).length, 1);
        assert.equal(f.handle.status().contributionsProblem, null);
      });
    });
  }

  it("a missing contributions file applies nothing", async () => {
    await withFixture([], async (f) => {
      await f.periodic(3);
      assert.equal(f.adapter.count("create"), 0);
      assert.match(f.handle.status().contributionsProblem ?? "", /does not exist/);
    });
  });

  it("a failed read starts the retirement count again", async () => {
    await withFixture(["alpha", "beta", "gamma"], async (f) => {
      await f.ask(["alpha", "beta"]);
      await f.periodic(4);
      await f.writeRaw("{broken");
      await f.periodic();
      await f.ask(["alpha", "beta"]);
      await f.periodic(4);
      assert.equal(f.stateOf("gamma"), "unasked", "four passes after a failed read are not five");
      await f.periodic();
      assert.equal(f.stateOf("gamma"), "retired");
    });
  });

  it("entries without as or secret are skipped, a duplicated login refuses the whole file", async () => {
    await withFixture(["alpha"], async (f) => {
      const secret = join(f.dir, "alpha.secret");
      await f.writeRaw(
        JSON.stringify({
          requirement: IFACE,
          given: [{ as: "alpha", secret }, { secret }, { as: "nosecret" }],
        }),
      );
      await f.periodic();
      assert.deepEqual(
        f.handle.status().consumers.map((c) => c.login),
        ["alpha"],
      );
      await f.writeRaw(
        JSON.stringify({
          requirement: IFACE,
          given: [
            { as: "alpha", secret },
            { as: "alpha", secret },
          ],
        }),
      );
      await f.periodic(8);
      assert.match(f.handle.status().contributionsProblem ?? "", /twice/);
      assert.equal(f.adapter.count("retire"), 0);
    });
  });
});

describe("rule 2: create what changed, and re-enable what was retired", () => {
  it("an unchanged consumer is not created again on every pass", async () => {
    await withFixture(["alpha"], async (f) => {
      await f.periodic(5);
      assert.equal(f.adapter.count("create", "alpha"), 1);
    });
  });

  it("a new password is applied at the next pass and recorded as re-applied", async () => {
    await withFixture(["alpha"], async (f) => {
      await f.writeSecret("alpha", "second-password");
      await f.periodic();
      assert.equal(f.adapter.count("create", "alpha"), 2);
      assert.equal(f.adapter.backend.get("alpha")?.password, "second-password");
      assert.deepEqual(
        f.actions.map((a) => a.action),
        ["created", "re-applied"],
      );
    });
  });

  it("a retired consumer asked for again comes back as it was", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      f.adapter.backend.get("beta")!.bytes = 12345;
      await f.ask(["alpha"]);
      await f.periodic(5);
      assert.equal(f.stateOf("beta"), "retired");
      await f.ask(["alpha", "beta"]);
      await f.watchPass();
      assert.equal(f.stateOf("beta"), "active");
      assert.equal(f.adapter.backend.get("beta")?.state, "active");
      assert.equal(f.adapter.backend.get("beta")?.bytes, 12345, "its data is kept");
    });
  });
});

describe("rule 3: an unreadable secret is never no password", () => {
  it("waits, says it plainly, then loudly once after a minute, and never retires the consumer", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await unlink(join(f.dir, "beta.secret"));
      await f.ask(["alpha", "beta"]);
      await f.periodic();
      assert.equal(f.stateOf("beta"), "failing", "status says failing from the first failure");
      assert.equal(f.adapter.backend.get("beta")?.state, "active", "what was made is not undone");
      await f.periodic(30); // 2.5 minutes
      assert.equal(f.adapter.count("retire"), 0);
      assert.equal(f.stateOf("beta"), "failing");
      assert.equal(f.handle.status().consumers.find((c) => c.login === "beta")?.class, "secret-unreadable");
      assert.equal(f.lines.filter((l) => l.includes("beta: secret not readable yet")).length, 1);
      assert.equal(f.lines.filter((l) => l.includes("beta: CANNOT READ")).length, 1);
      await f.periodic(60); // 5 more minutes: not said again yet
      assert.equal(f.lines.filter((l) => l.includes("beta: CANNOT READ")).length, 1);
      await f.periodic(200);
      assert.equal(f.lines.filter((l) => l.includes("beta: CANNOT READ")).length, 2, "said again, rarely");
    });
  });

  it("a consumer whose secret is not there yet is created once it appears", async () => {
    await withFixture([], async (f) => {
      await f.ask(["alpha"]);
      await unlink(join(f.dir, "alpha.secret"));
      await f.periodic();
      assert.equal(f.adapter.count("create"), 0);
      await f.writeSecret("alpha", "now-here");
      await f.periodic();
      assert.equal(f.adapter.backend.get("alpha")?.password, "now-here");
      assert.equal(f.stateOf("alpha"), "active");
    });
  });
});

describe("rule 4: verify about once a minute, re-apply what is lost, with a brake", () => {
  it("checks each consumer once a minute, not every pass", async () => {
    await withFixture(["alpha"], async (f) => {
      const first = f.adapter.count("holds");
      await f.periodic(11); // 55 s
      assert.equal(f.adapter.count("holds"), first);
      await f.periodic(1);
      assert.equal(f.adapter.count("holds"), first + 1);
    });
  });

  it("a password changed behind the mesh's back is found and applied again", async () => {
    await withFixture(["alpha"], async (f) => {
      f.adapter.backend.get("alpha")!.password = "changed-by-hand";
      await f.periodic(12);
      assert.equal(f.adapter.backend.get("alpha")?.password, f.passwordOf("alpha"));
      assert.equal(f.actions.at(-1)?.action, "re-applied");
    });
  });

  it("being unable to ask is not evidence of loss", async () => {
    await withFixture(["alpha"], async (f) => {
      const creates = f.adapter.count("create");
      f.adapter.down = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
      await f.periodic(12);
      assert.equal(
        f.adapter.count("create"),
        creates,
        "nothing re-applied while the backend cannot be asked",
      );
      assert.equal(f.stateOf("alpha"), "failing");
      assert.equal(f.handle.status().consumers[0]?.class, "unreachable");
      f.adapter.down = undefined;
      await f.periodic(12);
      assert.equal(f.stateOf("alpha"), "active");
    });
  });

  it("a check that times out skips the rest of that pass's checks", async () => {
    await withFixture(
      ["alpha", "beta", "gamma"],
      async (f) => {
        // The backend answers nobody: whichever check comes first times out, and no other is asked.
        for (const login of ["alpha", "beta", "gamma"]) f.adapter.hang.add(login);
        f.adapter.calls.length = 0;
        f.clock.advance(60_000);
        while (f.adapter.count("holds") === 0) await new Promise((r) => setTimeout(r, 5));
        f.clock.advance(30_000); // the holds timeout
        await f.handle.idle();
        assert.equal(f.adapter.count("holds"), 1, "the rest wait for the next pass");
        assert.equal(f.adapter.count("create"), 0, "a timeout is not evidence of loss");
        assert.equal(f.handle.status().consumers.filter((c) => c.class === "unreachable").length, 1);
        f.adapter.release();
      },
      { concurrency: 1, verifyEvery: 60_000, every: 60_000 },
    );
  });

  it("batched checks go in batches, each with its own timeout, and a timeout skips the later batches", async () => {
    const many = Array.from({ length: 250 }, (_, i) => `c${i}`);
    await withFixture(
      many,
      async (f) => {
        const sizes: number[] = [];
        let hangNext = false;
        Object.assign(f.adapter, {
          holdsMany: async (ps: readonly Provision[]) => {
            sizes.push(ps.length);
            if (hangNext) await new Promise(() => {});
            return new Map(ps.map((p) => [p.as, f.adapter.backend.get(p.as)?.password === p.password]));
          },
        });
        await f.periodic(12);
        assert.deepEqual(sizes, [100, 100, 50]);
        sizes.length = 0;
        hangNext = true;
        f.clock.advance(60_000);
        while (sizes.length === 0) await new Promise((r) => setTimeout(r, 5));
        f.clock.advance(30_000);
        await f.handle.idle();
        assert.deepEqual(sizes, [100], "after a timeout the later batches wait for the next pass");
        assert.equal(f.adapter.count("create"), 250, "nothing re-applied on a timeout");
      },
      { verifyEvery: 60_000, every: 5_000 },
    );
  });

  it("a create that never satisfies holds is re-applied with a doubling brake capped at an hour", async () => {
    await withFixture(["alpha"], async (f) => {
      f.adapter.createIsNoop = true;
      f.adapter.backend.delete("alpha");
      const checkTimes: number[] = [];
      const start = f.clock.now();
      let seen = f.adapter.count("holds");
      for (let i = 0; i < 12 * 60 * 4; i++) {
        await f.periodic();
        const n = f.adapter.count("holds");
        if (n !== seen) checkTimes.push(Math.round((f.clock.now() - start) / MINUTE));
        seen = n;
      }
      const gaps = checkTimes.slice(1).map((t, i) => t - (checkTimes[i] ?? 0));
      assert.deepEqual(
        gaps.slice(0, 7),
        [1, 2, 4, 8, 16, 32, 60],
        `checks at minutes ${checkTimes.join(",")}`,
      );
      assert.ok(
        gaps.slice(6).every((g) => g === 60),
        "capped at one hour",
      );
      assert.ok(f.lines.some((l) => l.includes("create does not produce what holds checks")));
    });
  });
});

describe("rule 5: one consumer's failure never stops the others", () => {
  it("a failing create leaves the others created, and its error is scrubbed and classed", async () => {
    await withFixture([], async (f) => {
      await f.writeSecret("beta", "s3cr3t pass/word?&=");
      const pw = f.passwordOf("beta");
      f.adapter.failCreate.set(
        "beta",
        new Error(
          `password authentication failed for "beta" using ${pw} or ${encodeURIComponent(pw)} ` +
            `or ${new URLSearchParams({ p: pw }).toString().slice(2)} ${"x".repeat(500)}`,
        ),
      );
      await f.ask(["alpha", "beta", "gamma"]);
      await f.periodic();
      assert.equal(f.stateOf("alpha"), "active");
      assert.equal(f.stateOf("gamma"), "active");
      const beta = f.handle.status().consumers.find((c) => c.login === "beta");
      assert.equal(beta?.state, "failing");
      assert.equal(beta?.class, "credentials-rejected");
      assert.ok(beta && beta.why.length <= 301, "clipped");
      const everything = JSON.stringify([f.lines, f.handle.status(), f.events, f.actions]);
      assert.ok(!everything.includes(pw), "the raw password appears nowhere");
      assert.ok(!everything.includes(encodeURIComponent(pw)), "nor path-escaped");
      assert.ok(
        !everything.includes(new URLSearchParams({ p: pw }).toString().slice(2)),
        "nor query-escaped",
      );
    });
  });

  it("an adapter's own class wins over the guess from the text", async () => {
    await withFixture([], async (f) => {
      f.adapter.failCreate.set("alpha", new Error("something odd"));
      (f.adapter as { classify?: (e: unknown) => string }).classify = () => "quota-exceeded";
      await f.ask(["alpha"]);
      await f.periodic();
      assert.equal(f.handle.status().consumers[0]?.class, "quota-exceeded");
    });
  });

  it("a slow consumer does not hold up the others' creates", async () => {
    await withFixture([], async (f) => {
      f.adapter.hang.add("slow");
      await f.ask(["slow", "alpha", "beta"]);
      f.clock.advance(5_000);
      // Others are made while slow hangs.
      while (!(f.adapter.backend.has("alpha") && f.adapter.backend.has("beta"))) {
        await new Promise((r) => setTimeout(r, 5));
      }
      assert.equal(f.adapter.backend.has("slow"), false);
      while (f.adapter.count("create", "slow") === 0) await new Promise((r) => setTimeout(r, 5));
      f.clock.advance(60_000); // the create timeout
      await f.handle.idle();
      assert.equal(f.stateOf("slow"), "failing");
      assert.equal(f.handle.status().consumers.find((c) => c.login === "slow")?.class, "unreachable");
      f.adapter.release();
    });
  });
});

describe("rule 6: standings", () => {
  it("a failure is announced after five minutes, again every fifteen, and recovered at the first success", async () => {
    await withFixture([], async (f) => {
      f.adapter.failCreate.set("alpha", new Error("connect ECONNREFUSED"));
      await f.ask(["alpha"]);
      await f.periodic();
      assert.equal(f.stateOf("alpha"), "failing", "status says failing from the first failure");
      await f.periodic(58); // 4 min 50 s after the first failure
      assert.equal(f.events.filter((e) => e.event === "provisioner.failing").length, 0);
      await f.periodic(2);
      const failing = f.events.filter((e) => e.event === "provisioner.failing");
      assert.equal(failing.length, 1);
      assert.equal(failing[0]?.body.consumer, "alpha");
      assert.equal(failing[0]?.body.class, "unreachable");
      assert.equal(failing[0]?.body.node, "n1");
      assert.ok(Number(failing[0]?.body.attempts) >= 60);
      await f.periodic(179);
      assert.equal(f.events.filter((e) => e.event === "provisioner.failing").length, 1);
      await f.periodic(1);
      assert.equal(f.events.filter((e) => e.event === "provisioner.failing").length, 2);
      f.adapter.failCreate.delete("alpha");
      await f.periodic();
      assert.equal(f.events.at(-1)?.event, "provisioner.recovered");
      assert.equal(f.events.at(-1)?.body.consumer, "alpha");
    });
  });

  it("the first success after a restart is announced, so no stale failure is kept", async () => {
    await withFixture(["alpha"], async (f) => {
      const first = f.events.filter(
        (e) => e.event === "provisioner.recovered" && e.body.consumer === "alpha",
      );
      assert.equal(first.length, 1);
      assert.equal(first[0]?.body.why, "first-success");
      const again = await f.restart();
      assert.equal(again.events.filter((e) => e.event === "provisioner.recovered").length, 1);
      await again.handle.stop();
    });
  });

  it("an announced failure of a consumer no longer asked for and not held is cleared", async () => {
    await withFixture([], async (f) => {
      f.adapter.failCreate.set("alpha", new Error("boom"));
      await f.ask(["alpha"]);
      await f.periodic(70);
      assert.equal(f.events.filter((e) => e.event === "provisioner.failing").length, 1);
      await f.ask([]);
      await f.periodic();
      const last = f.events.at(-1);
      assert.equal(last?.event, "provisioner.recovered");
      assert.equal(last?.body.why, "no longer asked for");
    });
  });
});

describe("rule 7: retirement, never withdrawal", () => {
  it("a consumer no longer asked for stays active until five periodic passes have seen it", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(4);
      assert.equal(f.stateOf("beta"), "unasked");
      assert.equal(f.adapter.backend.get("beta")?.state, "active");
      await f.periodic();
      assert.equal(f.stateOf("beta"), "retired");
      const c = f.adapter.backend.get("beta");
      assert.equal(c?.state, "retired", "the mark is in the backend");
      assert.match(c?.why ?? "", /no longer asked for/);
      assert.equal(f.actions.at(-1)?.action, "retired");
    });
  });

  it("passes set off by file changes never advance the count", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      for (let i = 0; i < 20; i++) await f.watchPass();
      await f.periodic(4);
      assert.equal(f.stateOf("beta"), "unasked");
      await f.periodic();
      assert.equal(f.stateOf("beta"), "retired");
    });
  });

  it("periodic passes closer together than `every` count once", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      for (let i = 0; i < 10; i++) await f.handle.pass("periodic");
      await f.periodic(3);
      assert.equal(f.stateOf("beta"), "unasked");
    });
  });

  it("a different unasked set starts the count again", async () => {
    await withFixture(["alpha", "beta", "gamma", "delta", "eps"], async (f) => {
      await f.ask(["alpha", "beta", "gamma", "delta"]);
      await f.periodic(4);
      await f.ask(["alpha", "beta", "gamma"]);
      await f.periodic(4);
      assert.equal(f.stateOf("eps"), "unasked");
      assert.equal(f.stateOf("delta"), "unasked");
      await f.periodic();
      assert.equal(f.stateOf("eps"), "retired");
      assert.equal(f.stateOf("delta"), "retired");
    });
  });

  it("one of two retires on its own", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      assert.equal(f.stateOf("beta"), "retired");
    });
  });

  it("two of three wait for a person", async () => {
    await withFixture(["alpha", "beta", "gamma"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(10);
      assert.equal(f.stateOf("beta"), "awaiting-approval");
      assert.equal(f.stateOf("gamma"), "awaiting-approval");
      assert.equal(f.adapter.count("retire"), 0);
      const list = f.handle.retireList();
      assert.deepEqual(list.logins, ["beta", "gamma"]);
      assert.equal(list.held, 3);
      assert.ok(list.id);
    });
  });

  it("any four wait for a person, even of a hundred", async () => {
    const many = Array.from({ length: 100 }, (_, i) => `c${i}`);
    await withFixture(many, async (f) => {
      await f.ask(many.slice(4));
      await f.periodic(10);
      assert.equal(f.adapter.count("retire"), 0);
      assert.equal(f.handle.retireList().logins.length, 4);
      await f.ask(many.slice(3));
      await f.periodic(5);
      assert.equal(f.adapter.count("retire"), 3, "three of a hundred retire on their own");
    });
  });

  it("approve retires exactly the waiting set; a wrong id is refused", async () => {
    await withFixture(["alpha", "beta", "gamma"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      const { id } = f.handle.retireList();
      await assert.rejects(
        f.handle.retireApprove("000000000000", "ana"),
        (e: ToolError) => e.code === "set-changed",
      );
      assert.equal(f.adapter.count("retire"), 0);
      const done = await f.handle.retireApprove(id ?? undefined, "ana");
      assert.deepEqual(done.retired, ["beta", "gamma"]);
      assert.equal(f.stateOf("beta"), "retired");
      const approved = f.actions.filter((a) => a.action === "approved");
      assert.deepEqual(
        approved.map((a) => [a.login, a.who]),
        [
          ["beta", "ana"],
          ["gamma", "ana"],
        ],
      );
      assert.equal(f.actions.filter((a) => a.action === "retired" && a.who === "ana").length, 2);
    });
  });

  it("a change of the set cancels what was waiting, and approving it is refused", async () => {
    await withFixture(["alpha", "beta", "gamma", "delta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      const { id } = f.handle.retireList();
      assert.ok(id, "three of four wait");
      await f.ask(["alpha", "beta"]); // the file changes before anyone approves
      await assert.rejects(f.handle.retireApprove(id, "ana"), (e: ToolError) => e.code === "set-changed");
      await f.periodic();
      assert.equal(f.handle.retireList().id, null, "the waiting set was cancelled");
      assert.equal(f.adapter.count("retire"), 0);
    });
  });

  it("approving with nothing waiting is refused", async () => {
    await withFixture(["alpha"], async (f) => {
      await assert.rejects(
        f.handle.retireApprove(undefined, "ana"),
        (e: ToolError) => e.code === "nothing-waiting",
      );
    });
  });

  it("a restart forgets the waiting set: it is counted again from the start", async () => {
    await withFixture(["alpha", "beta", "gamma"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      assert.ok(f.handle.retireList().id);
      const again = await f.restart();
      assert.equal(again.handle.retireList().id, null);
      await again.periodic(3);
      assert.equal(again.stateOf("beta"), "unasked");
      await again.handle.stop();
    });
  });
});

describe("rule 8: delete only by a person", () => {
  it("cleanup delete refuses unknown, foreign, still asked and not retired logins, each in its own words", async () => {
    await withFixture(["alpha", "beta", "gamma"], async (f) => {
      f.adapter.backend.set("stranger", {
        password: "x",
        values: {},
        instance: "someone-else",
        state: "retired",
        bytes: 1,
      });
      await f.ask(["alpha", "beta"]);
      const code = async (login: string) =>
        f.handle.cleanupDelete(login, "ana").then(
          () => "deleted",
          (e: ToolError) => e.code,
        );
      assert.equal(await code("nobody"), "unknown-login");
      assert.equal(await code("Robert'); DROP"), "unknown-login");
      assert.equal(await code("stranger"), "not-made-here");
      assert.equal(await code("alpha"), "still-asked");
      assert.equal(await code("gamma"), "not-retired");
      await f.periodic(5);
      assert.equal(f.stateOf("gamma"), "retired");
      const done = await f.handle.cleanupDelete("gamma", "ana");
      assert.equal(done.freedBytes, 8192);
      assert.ok(!f.adapter.backend.has("gamma"));
      assert.ok(f.adapter.backend.has("stranger"), "what the mesh did not make is untouched");
      assert.deepEqual(
        f.actions.filter((a) => a.action === "deleted").map((a) => [a.login, a.who, a.freedBytes]),
        [["gamma", "ana", 8192]],
      );
    });
  });

  it("passes never delete, however long a consumer stays retired", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(500);
      assert.equal(f.adapter.count("delete"), 0);
      assert.equal(f.adapter.backend.get("beta")?.state, "retired");
      assert.deepEqual(
        f.handle.cleanupList().map((c) => c.login),
        ["beta"],
      );
    });
  });
});

describe("rule 9: memory is the backend's", () => {
  it("a restart finds what was retired before and can still delete it", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      const again = await f.restart();
      assert.deepEqual(
        again.handle.cleanupList().map((c) => c.login),
        ["beta"],
      );
      assert.equal(again.stateOf("beta"), "retired");
      assert.equal((await again.handle.cleanupDelete("beta", "ana")).freedBytes, 8192);
      await again.handle.stop();
    });
  });

  it("a restart can still retire a consumer nobody asks for any more", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.handle.stop();
      await f.ask(["alpha"]);
      const again = await f.restart();
      await again.periodic(5);
      assert.equal(again.adapter.backend.get("beta")?.state, "retired");
      await again.handle.stop();
    });
  });

  it("two providers sharing one backend never retire each other's consumers", async () => {
    await withFixture(["alpha"], async (f) => {
      const { MemoryAdapter } = await import("@mesh/testkit");
      const other = new MemoryAdapter("other", f.adapter.backend);
      f.adapter.backend.set("theirs", {
        password: "p",
        values: {},
        instance: "other",
        state: "active",
        bytes: 1,
      });
      await f.periodic(20);
      assert.equal(f.adapter.backend.get("theirs")?.state, "active");
      assert.equal(f.stateOf("theirs"), undefined, "not even listed");
      assert.equal(other.instance, "other");
    });
  });
});

describe("rule 10: tools and passes never interleave", () => {
  it("a changing tool waits for the running pass, while status answers at once", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic(5);
      f.adapter.hang.add("gamma");
      await f.ask(["alpha", "gamma"]);
      f.clock.advance(5_000); // a pass starts and hangs in gamma's create
      while (f.adapter.count("create", "gamma") === 0) await new Promise((r) => setTimeout(r, 5));
      let deleted = false;
      const del = f.handle.cleanupDelete("beta", "ana").then(() => (deleted = true));
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(deleted, false, "the delete waits for the pass");
      assert.equal(f.handle.status().consumers.find((c) => c.login === "beta")?.state, "retired");
      f.adapter.release();
      await del;
      assert.equal(deleted, true);
      const order = f.adapter.calls.map((c) => `${c.method}:${c.login ?? ""}`);
      assert.ok(order.indexOf("create:gamma") < order.indexOf("delete:beta"));
    });
  });
});

describe("status", () => {
  it("gives each consumer's login, state, class, since and why", async () => {
    await withFixture(["alpha", "beta"], async (f) => {
      await f.ask(["alpha"]);
      await f.periodic();
      const s = f.handle.status();
      assert.equal(s.interface, IFACE);
      const beta = s.consumers.find((c) => c.login === "beta");
      assert.deepEqual(Object.keys(beta ?? {}).sort(), ["class", "login", "since", "state", "why"].sort());
      assert.equal(beta?.state, "unasked");
      assert.ok(!Number.isNaN(Date.parse(beta?.since ?? "")));
    });
  });
});
