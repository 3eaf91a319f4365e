// The adapter conformance kit: one suite every provider passes against its own real server,
// driven only through the adapter and the target's outside view of the server, so the same
// promises hold for every backend.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, describe, it } from "node:test";
import {
  guardAdapter,
  type GuardedAdapter,
  type InventoryEntry,
  type Provision,
  type RotationMark,
  secondLogin,
} from "@mesh/sdk";
import type { ConformanceTarget, TargetServer } from "./conformance-target.ts";

/** Logins that must be refused before any command reaches a backend, and leave no trace. */
export const HOSTILE_LOGINS: readonly string[] = [
  "",
  "a'b",
  'a"b',
  "a;b",
  "a b",
  "Upper",
  "a\0b",
  "a".repeat(33),
  "a*",
  "a~",
  "a&b",
  "a\nb",
  "a`b",
  "1abc",
  "_abc",
  "a-b",
  "a.b",
  "a$b",
  "a\\b",
  "a/b",
  "a:b",
  "a%b",
  "ä",
  "x'; DROP ROLE postgres; --",
  "x* ~* &* +@all",
  "x\r\nFLUSHALL",
];

/** Passwords that break naive quoting; each must work exactly as given. */
export const AWKWARD_PASSWORDS: readonly string[] = [
  `it's "quoted" 'twice'`,
  "back\\slash\\\\ and \\' too\\",
  "$$dollar$$ $tag$ $1 ${x}",
  "with  several spaces inside",
  "pässwörd ünïcode ✓ 日本語 🔑",
  "'; DROP ROLE postgres; --",
  "%40%2F?&=#+ url-ish",
];

/** A password as the mesh mints one: 192 bits from a CSPRNG, URL-safe. */
export function mintPassword(): string {
  return randomBytes(24).toString("base64url");
}

const signal = (): AbortSignal => new AbortController().signal;

/**
 * Registers the conformance suite for one target with node's test runner: a `describe` that
 * starts the target's server before and stops it after, and checks DESIGN §4 through the
 * adapter and `TargetServer` only.
 */
export function runConformance(target: ConformanceTarget): void {
  void describe(`${target.name} conformance`, { timeout: 600_000 }, () => {
    let server: TargetServer;
    // Inside the guard, as the harness runs them: the promises checked are those a provider keeps.
    let adapter: GuardedAdapter;
    let neighbour: GuardedAdapter;
    const foreign = { as: "person_made_this", password: mintPassword() };
    let serial = 0;

    // A fresh login per check, so one failing check leaves the others meaningful.
    const provision = (
      stem: string,
      password = mintPassword(),
      values?: Readonly<Record<string, unknown>>,
    ): Provision => ({
      as: `${stem}_${++serial}`.slice(0, 32),
      password,
      values: values ?? server.plainValues,
      derived: {},
    });
    const foreignProvision = (): Provision => ({ ...foreign, values: server.plainValues, derived: {} });

    const entryOf = async (a: GuardedAdapter, as: string): Promise<InventoryEntry | undefined> =>
      (await a.inventory()).find((e) => e.as === as);
    const listed = async (a: GuardedAdapter): Promise<string[]> =>
      (await a.inventory()).map((e) => e.as).sort();
    const wrong = (p: Provision): string => `${p.password}x`;

    before(async () => {
      server = await target.start();
      adapter = guardAdapter(server.makeAdapter("conformance"), { instance: "conformance" });
      neighbour = guardAdapter(server.makeAdapter("conformance-neighbour"), {
        instance: "conformance-neighbour",
      });
      await server.createForeign(foreign.as, foreign.password);
    });

    after(async () => {
      await adapter?.close?.();
      await neighbour?.close?.();
      await server?.stop();
    });

    void it("creates a login that takes the minted password and refuses a wrong one", async () => {
      const p = provision("fresh");
      await adapter.create(p, signal());
      assert.equal(await server.canLogin(p), true, "the minted password logs in");
      assert.equal(await server.canLogin(p, wrong(p)), false, "a wrong password is refused");
      assert.equal(await adapter.holds(p, signal()), true);
      const entry = await entryOf(adapter, p.as);
      assert.equal(entry?.state, "active");
    });

    void it("creates idempotently: a second create keeps the data and still holds", async () => {
      const p = provision("again");
      await adapter.create(p, signal());
      await server.writeData(p, "kept across creates");
      await adapter.create(p, signal());
      assert.equal(await adapter.holds(p, signal()), true);
      assert.equal(await server.readData(p), "kept across creates");
      assert.equal(await server.canLogin(p), true);
    });

    void it("does not hold a consumer whose password was changed behind its back, and create repairs it", async () => {
      const p = provision("pwdrift");
      await adapter.create(p, signal());
      await server.changePassword(p.as, mintPassword());
      assert.equal(await adapter.holds(p, signal()), false);
      assert.equal(await server.canLogin(p), false);
      await adapter.create(p, signal());
      assert.equal(await adapter.holds(p, signal()), true);
      assert.equal(await server.canLogin(p), true);
    });

    void it("does not hold a consumer whose login was dropped behind its back, and create repairs it", async () => {
      const p = provision("dropped");
      await adapter.create(p, signal());
      await server.dropLogin(p.as);
      assert.equal(await adapter.holds(p, signal()), false);
      assert.equal(await server.canLogin(p), false);
      await adapter.create(p, signal());
      assert.equal(await adapter.holds(p, signal()), true);
      assert.equal(await server.canLogin(p), true);
    });

    void it("does not hold a consumer it never created", async () => {
      assert.equal(await adapter.holds(provision("never"), signal()), false);
    });

    void it("retires a consumer: login refused, data kept, marked retired with when and why", async () => {
      const p = provision("retiring");
      await adapter.create(p, signal());
      await server.writeData(p, "survives retirement");
      const at = new Date(Math.floor(Date.now() / 1000) * 1000);
      await adapter.retire(p.as, {}, "no longer asked for (conformance)", at);
      assert.equal(await server.canLogin(p), false, "a retired login is refused");
      assert.equal(await server.readData(p), "survives retirement");
      assert.equal(await adapter.holds(p, signal()), false, "a retired consumer is not held");
      const entry = await entryOf(adapter, p.as);
      assert.equal(entry?.state, "retired");
      assert.equal(entry?.why, "no longer asked for (conformance)");
      assert.ok(entry?.retiredAt instanceof Date, "the mark says when");
      assert.ok(
        Math.abs(entry.retiredAt.getTime() - at.getTime()) < 1000,
        "the mark says when it was retired",
      );
    });

    void it("brings a retired consumer back as it was, with its data, when created again", async () => {
      const p = provision("comeback");
      await adapter.create(p, signal());
      await server.writeData(p, "still mine");
      await adapter.retire(p.as, {}, "unasked", new Date());
      await adapter.create(p, signal());
      assert.equal(await server.canLogin(p), true);
      assert.equal(await adapter.holds(p, signal()), true);
      assert.equal(await server.readData(p), "still mine");
      const entry = await entryOf(adapter, p.as);
      assert.equal(entry?.state, "active");
      assert.equal(entry?.why, undefined, "the mark to delete is cleared");
    });

    void it("refuses to delete a consumer that is not retired", async () => {
      const p = provision("active_kept");
      await adapter.create(p, signal());
      await server.writeData(p, "not to be deleted");
      await assert.rejects(
        adapter.delete({ as: p.as, derived: (await entryOf(adapter, p.as))?.derived ?? {} }),
      );
      assert.equal(await server.canLogin(p), true);
      assert.equal(await server.readData(p), "not to be deleted");
    });

    void it("deletes a retired consumer for good and reports the bytes freed", async () => {
      const p = provision("deleted");
      await adapter.create(p, signal());
      await server.writeData(p, "to be deleted");
      await adapter.retire(p.as, {}, "unasked", new Date());
      const entry = await entryOf(adapter, p.as);
      assert.ok(entry, "the retired consumer is in the inventory");
      const { freedBytes } = await adapter.delete({
        as: p.as,
        derived: entry.derived,
        retiredAt: entry.retiredAt,
        why: entry.why,
      });
      if (server.keepsNoData === true)
        assert.equal(freedBytes, 0, "a consumer with no data of its own frees 0 bytes");
      else assert.ok(freedBytes > 0, `freed ${freedBytes} bytes`);
      assert.equal(await server.canLogin(p), false);
      assert.equal(await entryOf(adapter, p.as), undefined, "gone from the inventory");
      assert.equal(await server.readData(p), undefined, "its data is gone");
      if (adapter.exists) assert.equal(await adapter.exists(p.as), false);
    });

    void it("keeps consumers of two instances on one server apart", async () => {
      const mine = provision("mine");
      const theirs = provision("theirs");
      await adapter.create(mine, signal());
      await neighbour.create(theirs, signal());
      await server.writeData(theirs, "the neighbour's");
      assert.ok(!(await listed(adapter)).includes(theirs.as), "the neighbour's consumer is not listed here");
      assert.ok(!(await listed(neighbour)).includes(mine.as), "this consumer is not listed by the neighbour");
      await assert.rejects(adapter.retire(theirs.as, {}, "not mine", new Date()));
      await assert.rejects(adapter.delete({ as: theirs.as, derived: {} }));
      await assert.rejects(adapter.create({ ...theirs, password: mintPassword() }, signal()));
      assert.equal(
        await adapter.holds(theirs, signal()),
        false,
        "not held by an instance that did not make it",
      );
      assert.equal(await neighbour.holds(theirs, signal()), true);
      assert.equal(await server.canLogin(theirs), true);
      assert.equal(await server.readData(theirs), "the neighbour's");
      assert.equal((await entryOf(neighbour, theirs.as))?.state, "active");
    });

    void it("refuses hostile logins before any command and leaves no trace", async () => {
      const before = await listed(adapter);
      for (const login of HOSTILE_LOGINS) {
        const p: Provision = { as: login, password: mintPassword(), values: server.plainValues, derived: {} };
        const what = JSON.stringify(login);
        await assert.rejects(adapter.create(p, signal()), { name: "InvalidLoginError" }, `create ${what}`);
        await assert.rejects(adapter.retire(login, {}, "hostile", new Date()), Error, `retire ${what}`);
        await assert.rejects(adapter.delete({ as: login, derived: {} }), Error, `delete ${what}`);
        const held = await adapter.holds(p, signal()).catch(() => false);
        assert.equal(held, false, `holds ${what}`);
        if (adapter.exists) {
          // Answering false and refusing the login outright both leave no trace.
          const exists = await adapter.exists(login).catch((err: unknown) => {
            assert.equal((err as Error).name, "InvalidLoginError", `exists ${what} refuses it as a login`);
            return false;
          });
          assert.equal(exists, false, `exists ${what}`);
        }
      }
      assert.deepEqual(await listed(adapter), before, "the inventory is unchanged");
      assert.equal(await server.canLogin(foreignProvision()), true);
    });

    void it("refuses hostile values or keeps them harmless", async () => {
      const canary = provision("canary");
      await adapter.create(canary, signal());
      await server.writeData(canary, "canary");
      for (const values of server.hostileValues) {
        const p = provision("hostile_value", mintPassword(), values);
        const created = await adapter.create(p, signal()).then(
          () => true,
          () => false,
        );
        if (created) {
          assert.equal(
            await adapter.holds(p, signal()),
            true,
            `created with ${JSON.stringify(values)} and holds`,
          );
          assert.equal(await server.canLogin(p), true);
        }
      }
      assert.equal(await adapter.holds(canary, signal()), true, "another consumer is untouched");
      assert.equal(await server.readData(canary), "canary");
      assert.equal(
        await server.canLogin(foreignProvision()),
        true,
        "a login the mesh did not make is untouched",
      );
    });

    void it("works with passwords full of quotes, backslashes, dollars, spaces and unicode", async () => {
      for (const password of server.awkwardPasswords ?? AWKWARD_PASSWORDS) {
        const p = provision("awkward", password);
        await adapter.create(p, signal());
        assert.equal(await server.canLogin(p), true, `logs in with ${JSON.stringify(password)}`);
        assert.equal(await adapter.holds(p, signal()), true, `holds with ${JSON.stringify(password)}`);
        assert.equal(await server.canLogin(p, wrong(p)), false);
      }
    });

    void it("answers holdsMany as holds does for held, drifted, dropped and unknown consumers", async (t) => {
      if (!adapter.holdsMany) {
        t.skip("this adapter has no holdsMany");
        return;
      }
      const held = [provision("many_held"), provision("many_held")];
      const drifted = provision("many_drift");
      const dropped = provision("many_drop");
      const retired = provision("many_retired");
      const unknown = provision("many_unknown");
      for (const p of [...held, drifted, dropped, retired]) await adapter.create(p, signal());
      await server.changePassword(drifted.as, mintPassword());
      await server.dropLogin(dropped.as);
      await adapter.retire(retired.as, {}, "unasked", new Date());
      const all = [...held, drifted, dropped, retired, unknown];
      const many = await adapter.holdsMany(all, signal());
      for (const p of all) {
        const one = await adapter.holds(p, signal());
        assert.equal(many.get(p.as), one, `holdsMany and holds agree on ${p.as}`);
      }
      assert.deepEqual(
        all.map((p) => many.get(p.as)),
        [true, true, false, false, false, false],
      );
    });

    void it("keeps one consumer out of another's data", async () => {
      const a = provision("tenant_a");
      const b = provision("tenant_b");
      await adapter.create(a, signal());
      await adapter.create(b, signal());
      await server.writeData(a, "a's");
      await server.writeData(b, "b's");
      assert.equal(await server.canReachOther(a, b), false, "a cannot reach b's data");
      assert.equal(await server.canReachOther(b, a), false, "b cannot reach a's data");
      assert.equal(await server.readData(b), "b's");
    });

    // A rotation's overlap, for an adapter whose backend holds two passwords on one login.
    const rotation = (): RotationMark => ({
      phase: "drain",
      since: new Date().toISOString(),
      until: new Date(Date.now() + 120_000).toISOString(),
    });

    // The next password: on the same login, or, where logins alternate, on the other one.
    const rotated = (p: Provision): Provision => {
      const current = p.login ?? p.as;
      const login = adapter.alternates ? (current === p.as ? secondLogin(p.as) : p.as) : undefined;
      return { ...p, password: mintPassword(), ...(login === undefined ? {} : { login }) };
    };
    const rotate = async (p: Provision): Promise<Provision> => {
      const next = rotated(p);
      await adapter.overlap({ ...next, retiring: p.password }, rotation(), signal());
      await adapter.create(next, signal());
      return next;
    };
    const skipUnlessAlternates = (t: { skip(why: string): void }): boolean => {
      if (adapter.alternates) return false;
      t.skip("this adapter keeps one login per consumer");
      return true;
    };

    void it("alternates logins: each rotation moves the password to the other login, whose makings are the consumer's", async (t) => {
      if (skipUnlessAlternates(t)) return;
      const first = provision("alternate");
      await adapter.create(first, signal());
      await server.writeData(first, "made by the first login");
      const second = await rotate(first);
      assert.equal(second.login, secondLogin(first.as), "the new password is on the second login");
      assert.equal(await server.canLogin(second), true, "the second login logs in");
      assert.equal(await server.canLogin(first), false, "the first login no longer does");
      assert.equal(await adapter.holds(second, signal()), true);
      assert.equal(await server.readData(second), "made by the first login", "data kept");
      await server.writeData(second, "made by the second login");
      const third = await rotate(second);
      assert.equal(third.login, first.as, "back on the first login");
      assert.equal(await server.canLogin(third), true);
      assert.equal(await server.canLogin(second), false, "the second login no longer logs in");
      // What the second login made belongs to the consumer: the first may change it.
      await server.writeData(third, "changed by the first login again");
      assert.equal(await server.readData(third), "changed by the first login again");
      assert.deepEqual(await listed(adapter).then((l) => l.filter((x) => x.startsWith(first.as))), [
        first.as,
      ]);
    });

    void it("retires both logins of an alternating consumer and brings back the one holding the password", async (t) => {
      if (skipUnlessAlternates(t)) return;
      const first = provision("alt_retire");
      await adapter.create(first, signal());
      const next = rotated(first);
      await adapter.overlap({ ...next, retiring: first.password }, rotation(), signal());
      await server.writeData(next, "survives");
      await adapter.retire(first.as, {}, "unasked (conformance)", new Date());
      assert.equal(await server.canLogin(next), false, "the second login is refused");
      assert.equal(await server.canLogin(first), false, "the first login is refused");
      assert.equal((await entryOf(adapter, first.as))?.state, "retired");
      await adapter.create(next, signal());
      assert.equal(await server.canLogin(next), true, "back as it was");
      assert.equal(await server.canLogin(first), false, "the old password stays refused");
      assert.equal(await server.readData(next), "survives");
    });

    void it("deletes both logins of an alternating consumer", async (t) => {
      if (skipUnlessAlternates(t)) return;
      const first = provision("alt_delete");
      await adapter.create(first, signal());
      const next = await rotate(first);
      await server.writeData(next, "to be deleted");
      await adapter.retire(first.as, {}, "unasked", new Date());
      const entry = await entryOf(adapter, first.as);
      await adapter.delete({ as: first.as, derived: entry?.derived ?? {} });
      assert.equal(await server.canLogin(next), false);
      assert.equal(await server.readData(next), undefined, "its data is gone");
      if (adapter.exists) {
        assert.equal(await adapter.exists(first.as), false, "the first login is gone");
        assert.equal(await adapter.exists(next.login ?? ""), false, "the second login is gone");
      }
    });

    void it("never takes over a second login it did not make", async (t) => {
      if (skipUnlessAlternates(t)) return;
      const first = provision("alt_foreign");
      await adapter.create(first, signal());
      const squatter = { as: secondLogin(first.as), password: mintPassword() };
      await server.createForeign(squatter.as, squatter.password);
      const next = rotated(first);
      await assert.rejects(adapter.overlap({ ...next, retiring: first.password }, rotation(), signal()));
      assert.equal(await server.canLogin({ ...squatter, values: server.plainValues, derived: {} }), true);
      assert.equal(await server.canLogin(first), true, "the consumer keeps its password");
      assert.ok(!(await listed(adapter)).includes(squatter.as), "never listed");
    });

    void it("refuses a login that is neither the consumer's nor its second", async () => {
      const p = { ...provision("alt_wrong"), login: "someone_else" };
      await assert.rejects(adapter.create(p, signal()), /someone_else/);
    });

    void it("overlaps a rotation: both passwords log in, the phase is in the mark, data kept", async (t) => {
      if (!adapter.overlaps) {
        t.skip("this adapter holds one password per login: a rotation cuts over");
        return;
      }
      const old = provision("overlap");
      await adapter.create(old, signal());
      await server.writeData(old, "kept across a rotation");
      const next = rotated(old);
      const both = { ...next, retiring: old.password };
      const mark = rotation();
      await adapter.overlap(both, mark, signal());
      assert.equal(await server.canLogin(next), true, "the new password logs in");
      assert.equal(await server.canLogin(old), true, "the old password still logs in");
      assert.equal(await server.canLogin(old, wrong(old)), false, "a wrong password is refused");
      assert.equal(await adapter.holds(both, signal()), true, "holds both");
      assert.equal(await adapter.holds(next, signal()), false, "does not hold the new one alone yet");
      assert.deepEqual((await entryOf(adapter, old.as))?.rotation, mark, "the mark records the rotation");
      assert.equal(await server.readData(next), "kept across a rotation");
      await adapter.overlap(both, mark, signal());
      assert.equal(await adapter.holds(both, signal()), true, "overlap is idempotent");
      if (adapter.batched) {
        const many = await adapter.holdsMany([both], signal());
        assert.equal(many.get(both.as), true, "holdsMany agrees with holds on an overlap");
      }
    });

    void it("ends a rotation with create: the old password is refused, the mark forgets it", async (t) => {
      if (!adapter.overlaps) {
        t.skip("this adapter holds one password per login: a rotation cuts over");
        return;
      }
      const old = provision("overlap_end");
      await adapter.create(old, signal());
      await server.writeData(old, "kept after the rotation");
      const next = rotated(old);
      await adapter.overlap({ ...next, retiring: old.password }, rotation(), signal());
      await adapter.create(next, signal());
      assert.equal(await server.canLogin(next), true, "the new password logs in");
      assert.equal(await server.canLogin(old), false, "the old password is refused");
      assert.equal(await adapter.holds(next, signal()), true);
      assert.equal(await adapter.holds({ ...next, retiring: old.password }, signal()), false);
      assert.equal((await entryOf(adapter, old.as))?.rotation, undefined, "no rotation in the mark");
      assert.equal(await server.readData(next), "kept after the rotation");
    });

    void it("never overlaps a login it did not make", async (t) => {
      if (!adapter.overlaps) {
        t.skip("this adapter holds one password per login: a rotation cuts over");
        return;
      }
      const p = foreignProvision();
      await assert.rejects(
        adapter.overlap({ ...p, password: mintPassword(), retiring: p.password }, rotation(), signal()),
      );
      assert.equal(await server.canLogin(p), true, "it still logs in with its own password");
    });

    void it("never lists or touches a login it did not make, after every other step", async () => {
      const p = foreignProvision();
      assert.ok(!(await listed(adapter)).includes(p.as), "not in this instance's inventory");
      assert.ok(!(await listed(neighbour)).includes(p.as), "not in the neighbour's inventory");
      await assert.rejects(adapter.create({ ...p, password: mintPassword() }, signal()));
      await assert.rejects(adapter.retire(p.as, {}, "not mine", new Date()));
      await assert.rejects(adapter.delete({ as: p.as, derived: {} }));
      assert.equal(await adapter.holds(p, signal()), false);
      if (adapter.exists) assert.equal(await adapter.exists(p.as), true, "exists says it is there");
      assert.equal(await server.canLogin(p), true, "it still logs in with its own password");
    });
  });
}
