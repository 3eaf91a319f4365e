// How a ledger is read back: the mesh's records apart from the module's claims, and which claims
// of an operator's action stand on a request the mesh relayed. Pure rules over records, no server.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { viewLedger, type LedgerRecord, type LedgerView } from "@mesh/bus";
import { CLAIM_LATEST_MS } from "../src/ledger-view.ts";

const T0 = Date.parse("2026-06-01T12:00:00.000Z");
const iso = (ms: number): string => new Date(T0 + ms).toISOString();

/** Builds a history: each entry stored at `storedAt` ms after T0, numbered in order. */
function history(...entries: [number, Record<string, unknown>][]): LedgerRecord[] {
  return entries.map(([storedAt, entry], i) => ({
    seq: i + 1,
    subject: `mesh.ledger.postgres.${String(entry["kind"])}`,
    at: iso(storedAt),
    entry,
  }));
}

/** A relayed tool call as the agent records it, asked `askedAt` ms after T0. */
function tool(
  askedAt: number,
  name: string,
  args: string[],
  who = "alice",
  outcome: Record<string, unknown> = { ok: true },
): Record<string, unknown> {
  return { kind: "tool", tool: name, args, who, via: "mesh tool", at: iso(askedAt), ...outcome };
}

/** A journal line as the agent keeps it: the module's claim that it did `action` at `at` ms. */
function claim(action: string, login: string, who: string, at: number | string): Record<string, unknown> {
  return {
    kind: "action",
    by: { module: "postgres", claim: true },
    claim: {
      action,
      login,
      interface: "postgres-database",
      who,
      at: typeof at === "string" ? at : iso(at),
      why: `${action} by ${who}`,
    },
  };
}

const view = (...entries: [number, Record<string, unknown>][]): LedgerView[] =>
  viewLedger("postgres", history(...entries));

void describe("reading a ledger: records and claims", () => {
  void it("a line of the provider's own loop is its claim and needs no request", () => {
    const [created] = view([0, claim("created", "notes_postgres", "provisioner", 0)]);
    assert.equal(created?.claim?.module, "postgres");
    assert.equal(created?.claim?.action, "created");
    assert.equal(created?.recorded, undefined);
    assert.equal(created?.flagged, undefined);
    assert.equal(created?.matches, undefined);
  });

  void it("a rotation's phases and the sessions a --now rotation ends are the loop's, unless said of an operator", () => {
    const phases = [
      "rotation-add",
      "rotation-deliver",
      "rotation-drain",
      "rotation-remove",
      "sessions-ended",
    ];
    for (const [i, action] of phases.entries()) {
      const [own] = view([i, claim(action, "notes_postgres", "provisioner", i)]);
      assert.equal(own?.flagged, undefined, action);
      const [forged] = view([i, claim(action, "notes_postgres", "operator alice", i)]);
      assert.match(forged?.flagged ?? "", /only the provider's own loop does that/, action);
    }
  });

  void it("a deletion it claims stands on the cleanup delete the mesh relayed for that login and person, in either order", () => {
    const [claimFirst, call] = view(
      [2_000, claim("deleted", "notes_postgres", "alice", 1_500)],
      [2_100, tool(0, "cleanup delete", ["notes_postgres"])],
    );
    assert.equal(claimFirst?.matches, 2);
    assert.equal(claimFirst?.flagged, undefined);
    assert.deepEqual(call?.recorded, { who: "alice", via: "mesh tool" });

    const [, after] = view(
      [100, tool(0, "cleanup delete", ["notes_postgres"])],
      [3_000, claim("deleted", "notes_postgres", "alice", 2_000)],
    );
    assert.equal(after?.matches, 1);
  });

  void it("a backdated deletion in an operator's name that no request bears out is flagged, never recorded", () => {
    const [forged] = view([
      60_000,
      claim("deleted", "notes_postgres", "operator alice via mesh tool", "2020-01-01T00:00:00.000Z"),
    ]);
    assert.equal(forged?.recorded, undefined, "not the mesh's record");
    assert.equal(forged?.claim?.who, "operator alice via mesh tool");
    assert.equal(forged?.at, iso(60_000), "its time is the bus's");
    assert.match(
      forged?.flagged ?? "",
      /^no cleanup delete notes_postgres was asked through the mesh around the time it gives/,
    );
  });

  void it("a copy of a real deletion's claim is flagged: one request bears out one claim of each action and login", () => {
    const [, , copy] = view(
      [100, tool(0, "cleanup delete", ["notes_postgres"])],
      [1_000, claim("deleted", "notes_postgres", "alice", 500)],
      [2 * 86_400_000, claim("deleted", "notes_postgres", "alice", 600)],
    );
    assert.match(copy?.flagged ?? "", /is already borne out by an earlier claim/);
  });

  void it("a claim naming a person for what only the loop does is flagged", () => {
    const [created] = view([0, claim("created", "notes_postgres", "alice", 0)]);
    assert.match(created?.flagged ?? "", /only the provider's own loop does that/);
  });

  void it("a claim naming another person than the one who asked is flagged", () => {
    const [, mallory] = view(
      [100, tool(0, "cleanup delete", ["notes_postgres"], "bob")],
      [1_000, claim("deleted", "notes_postgres", "alice", 500)],
    );
    assert.match(
      mallory?.flagged ?? "",
      /it says "alice" asked, but the cleanup delete notes_postgres .* was asked by "bob"/,
    );
  });

  void it("a claim on a request the provider refused is flagged; on one whose answer nobody saw, it stands", () => {
    const [, refused] = view(
      [
        100,
        tool(0, "cleanup delete", ["a_postgres"], "alice", { ok: false, code: "not-retired", error: "no" }),
      ],
      [1_000, claim("deleted", "a_postgres", "alice", 500)],
    );
    assert.match(refused?.flagged ?? "", /did not run: refused \(not-retired\)/);

    const [, unknown] = view(
      [100, tool(0, "cleanup delete", ["b_postgres"], "alice", { ok: false, code: "provider-unreachable" })],
      [200_000, claim("deleted", "b_postgres", "alice", 150_000)],
    );
    assert.equal(unknown?.matches, 1);
  });

  void it("an approval's claims, approved and retired for each login, stand on the retire approve that lists them", () => {
    const entries = view(
      [
        100,
        tool(0, "retire approve", ["0123456789ab"], "alice", {
          ok: true,
          answer: { retired: ["a_pg", "b_pg"] },
        }),
      ],
      [200, claim("approved", "a_pg", "alice", 50)],
      [200, claim("approved", "b_pg", "alice", 50)],
      [300, claim("retired", "a_pg", "alice", 60)],
      [300, claim("retired", "b_pg", "alice", 60)],
      [400, claim("retired", "c_pg", "alice", 60)],
    );
    assert.deepEqual(
      entries.slice(1, 5).map((e) => [e.matches, e.flagged]),
      [
        [1, undefined],
        [1, undefined],
        [1, undefined],
        [1, undefined],
      ],
    );
    assert.match(entries[5]?.flagged ?? "", /no retire approve c_pg was asked/);
  });

  void it("a claim stored before its request was asked is flagged: it cannot be about a call still to come", () => {
    const [early] = view(
      [0, claim("deleted", "notes_postgres", "alice", 300_000)],
      [300_100, tool(300_000, "cleanup delete", ["notes_postgres"])],
    );
    assert.match(
      early?.flagged ?? "",
      /no cleanup delete notes_postgres was asked .*; the nearest was asked at/,
    );
  });

  void it("a claim further from its request than the window is flagged, naming the nearest", () => {
    const [, late] = view(
      [100, tool(0, "cleanup delete", ["notes_postgres"])],
      [CLAIM_LATEST_MS + 120_000, claim("deleted", "notes_postgres", "alice", CLAIM_LATEST_MS + 60_000)],
    );
    assert.match(late?.flagged ?? "", /the nearest was asked at 2026-06-01T12:00:00.000Z \(#1\)/);
  });

  void it("an action entry from before claims were marked is read as the module's claim all the same", () => {
    const [old] = view([
      0,
      {
        kind: "action",
        action: "deleted",
        login: "notes_postgres",
        interface: "postgres-database",
        who: "alice",
        at: iso(0),
        why: "cleanup delete by alice",
        freedBytes: 8192,
      },
    ]);
    assert.equal(old?.recorded, undefined);
    assert.deepEqual(old?.claim, {
      module: "postgres",
      action: "deleted",
      login: "notes_postgres",
      interface: "postgres-database",
      who: "alice",
      at: iso(0),
      why: "cleanup delete by alice",
      freedBytes: 8192,
    });
    assert.match(old?.flagged ?? "", /no cleanup delete notes_postgres was asked/);
  });

  void it("tool and rotate entries are the mesh's records of who asked and through what", () => {
    const [surfaced, older, rotation, other] = view(
      [0, tool(0, "status", [], "carol")],
      [0, { kind: "tool", tool: "status", args: [], who: "dave", at: iso(0), ok: true }],
      [
        0,
        {
          kind: "rotate",
          consumer: "notes",
          interface: "postgres-database",
          who: "erin",
          via: "mesh rotate",
          at: iso(0),
          ok: true,
        },
      ],
      [0, { kind: "other", n: 1 }],
    );
    assert.deepEqual(surfaced?.recorded, { who: "carol", via: "mesh tool" });
    assert.deepEqual(older?.recorded, { who: "dave", via: "the mesh" });
    assert.deepEqual(rotation?.recorded, { who: "erin", via: "mesh rotate" });
    assert.deepEqual([other?.recorded, other?.claim], [undefined, undefined]);
  });

  void it("a module cannot make a tool entry of its claim: whatever its claim holds, it stays a claim", () => {
    const [line] = view([
      0,
      {
        kind: "action",
        by: { module: "postgres", claim: true },
        claim: { kind: "tool", tool: "cleanup delete", args: ["x"], who: "alice", ok: true },
      },
    ]);
    assert.equal(line?.recorded, undefined);
    assert.ok(line?.claim);
    assert.ok(line?.flagged, "it names a person and an action no tool relayed");
  });
});
