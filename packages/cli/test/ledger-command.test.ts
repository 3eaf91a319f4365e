// `mesh ledger` against a real nats-server and a real controller, asked as an operator's shell asks:
// with `<state>/operator.creds` and `<state>/bus.json`, as `mesh up` leaves them.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ModuleLedger,
  newUserKeys,
  type LedgerRecord,
  type LedgerView,
} from "@mesh/bus";
import { startController, type Controller } from "@mesh/controller";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import { formatLedger } from "../src/ledger-command.ts";
import { meshInProcess, runMesh, writeOperatorState, type InProcessRun } from "./run-mesh.ts";

// In this process (a spawned mesh costs seconds to start): what it prints, and its exit code.
const mesh = (args: readonly string[]): Promise<InProcessRun> =>
  meshInProcess(args, { stdin: process.stdin });

// Times of the last few seconds: each claim is stored after the request it answers, and near the
// time it gives (a time further from the bus's is shown beside it).
const BASE = Date.now() - 10_000;
const at = (seconds: number): string => new Date(BASE + seconds * 1_000).toISOString();
const shown = (iso: string): string => iso.replace(/\.\d{3}Z$/, "Z");

/** A journal line as the agent keeps it: the module's claim. */
function claimed(action: string, login: string, who: string, when: string): object {
  return {
    by: { module: "postgres", claim: true },
    claim: { action, login, interface: "postgres-database", who, at: when, why: `cleanup delete by ${who}` },
  };
}

const FLEET = `nodes:
  n1: {}
modules:
  postgres: { manifest: ./postgres/module.json, node: n1 }
  notes: { manifest: ./notes/module.json, node: n1 }
`;

void describe("mesh ledger shows a module's ledger as a timeline", () => {
  let nats: NatsServer;
  let dir: string;
  let state: string;
  let controller: Controller;
  let ledger: ModuleLedger;

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-cli-ledger-"));
    state = join(dir, "state");
    await mkdir(state);
    for (const name of ["postgres", "notes"]) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify({ name }));
    }
    await writeFile(join(dir, "mesh.yaml"), FLEET);
    controller = await startController({
      stateDir: join(state, "controller"),
      fleetFile: join(dir, "mesh.yaml"),
      servers: [nats.url],
      authority,
      logger: quietLogger,
      watch: false,
    });
    await writeOperatorState(authority, state, nats.url);

    // What the mesh and the provider leave in postgres's ledger: the mesh's records of what it
    // carried (tool calls, a rotation) and the provider's journal lines, kept as its claims.
    const keys = newUserKeys();
    const admin = await authority.issueUser({
      name: "writer",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    const nc = await connectBus({ servers: nats.url, creds: credsFor(admin, keys.seed), name: "writer" });
    await ensureLedger(nc, "postgres");
    ledger = new ModuleLedger(nc, "postgres");
    // #1: a line of the provider's journal from before claims were marked: its claim all the same.
    await ledger.append("action", {
      action: "created",
      login: "notes_db",
      interface: "postgres-database",
      who: "provisioner",
      at: at(0),
      why: "notes asks for postgres-database",
    });
    // #2: a deletion the provider refused.
    await ledger.append("tool", {
      tool: "cleanup delete",
      args: ["old_db"],
      who: "alice",
      via: "mesh tool",
      at: at(1),
      ok: false,
      error: "old_db is not retired",
      code: "not-retired",
    });
    // #3, #4: a deletion carried by the mesh, and the provider's line saying it did it.
    await ledger.append("tool", {
      tool: "cleanup delete",
      args: ["old_db"],
      who: "alice",
      via: "dashboard",
      at: at(2),
      ok: true,
      answer: { login: "old_db", freedBytes: 7 * 1024 * 1024 },
    });
    await ledger.append("action", claimed("deleted", "old_db", "alice", at(2)));
    // #5: a read from before the surface was recorded.
    await ledger.append("tool", {
      tool: "status",
      args: [],
      who: "bob",
      at: at(3),
      ok: true,
      answer: { consumers: 1 },
    });
    // #6: a rotation the controller carried.
    await ledger.append("rotate", {
      consumer: "notes",
      interface: "postgres-database",
      provider: "postgres",
      login: "notes_db",
      who: "carol",
      via: "mesh rotate",
      at: at(4),
      ok: true,
    });
    // #7: a line the provider wrote itself, backdated, in an operator's name.
    await ledger.append(
      "action",
      claimed("deleted", "notes_db", "operator alice via mesh tool", "2020-01-01T00:00:00.000Z"),
    );
  });
  after(async () => {
    await ledger.close();
    await controller.stop();
    await nats.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("prints the mesh's records as who via what, the module's claims as what it says, a forged one flagged", async () => {
    // Once as an operator's shell runs it; the rest in this process.
    const run = await runMesh(["ledger", "postgres", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split("\n");
    assert.match(lines[0] ?? "", /postgres's ledger, the newest 7 entries/);
    assert.match(lines[1] ?? "", /^#\s+TIME\s+BY\s+WHAT\s+WHY \/ RESULT$/);
    assert.match(
      lines[2] ?? "",
      /^#1\s+\S+\s+postgres says:\s+created notes_db \(postgres-database\)\s+notes asks for postgres-database$/,
    );
    assert.match(
      lines[3] ?? "",
      new RegExp(
        `^#2\\s+${shown(at(1))}\\s+alice via mesh tool\\s+cleanup delete old_db\\s+refused: old_db is not retired \\(not-retired\\)$`,
      ),
    );
    assert.match(lines[4] ?? "", /^#3\s+\S+\s+alice via dashboard\s+cleanup delete old_db\s+ok: /);
    assert.match(
      lines[5] ?? "",
      /^#4\s+\S+\s+postgres says:\s+deleted old_db \(postgres-database\), by "alice"\s+cleanup delete by alice \(asked in #3\)$/,
    );
    assert.match(lines[6] ?? "", /^#5\s+\S+\s+bob via the mesh\s+status\s+ok: \{"consumers":1\}$/);
    assert.match(
      lines[7] ?? "",
      /^#6\s+\S+\s+carol via mesh rotate\s+rotate notes postgres-database \(notes_db at postgres\)\s+ok: a new password$/,
    );
    const forged = lines[8] ?? "";
    assert.match(
      forged,
      /^#7\s+\S+\s+postgres says:\s+deleted notes_db \(postgres-database\), by "operator alice via mesh tool", at "2020-01-01T00:00:00.000Z"\s+FLAGGED: no cleanup delete notes_db was asked through the mesh/,
    );
    assert.doesNotMatch(forged, /^#7\s+\S+\s+operator alice/, "never shown as an operator's action");
    assert.doesNotMatch(
      forged,
      /2020-01-01T00:00:00Z\s/,
      "its time is the bus's, the one it gives only quoted",
    );
    assert.match(lines[9] ?? "", /^1 claim FLAGGED: postgres says an operator acted/);
  });

  it("gives scripts the controller's answer with --json, as many as --limit asks, each entry read", async () => {
    const run = await mesh(["ledger", "postgres", "--limit", "4", "--json", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as { ok: boolean; entries: LedgerView[] };
    assert.equal(answer.ok, true);
    assert.deepEqual(
      answer.entries.map((r) => [r.seq, r.subject, r.entry["kind"]]),
      [
        [4, "mesh.ledgers.postgres.action", "action"],
        [5, "mesh.ledgers.postgres.tool", "tool"],
        [6, "mesh.ledgers.postgres.rotate", "rotate"],
        [7, "mesh.ledgers.postgres.action", "action"],
      ],
    );
    const [deleted, status, rotation, forged] = answer.entries;
    // #4's request (#3) is older than the entries answered: the controller read it to match.
    assert.equal(deleted?.matches, 3);
    assert.equal(deleted?.flagged, undefined);
    assert.deepEqual(status?.recorded, { who: "bob", via: "the mesh" });
    assert.deepEqual(rotation?.recorded, { who: "carol", via: "mesh rotate" });
    assert.equal(forged?.recorded, undefined);
    assert.equal(forged?.claim?.module, "postgres");
    assert.equal(forged?.claim?.who, "operator alice via mesh tool");
    assert.match(forged?.flagged ?? "", /^no cleanup delete notes_db was asked through the mesh/);
  });

  it("says a module with no entries has none, and refuses a module the fleet does not have", async () => {
    const empty = await mesh(["ledger", "notes", "--state", state]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.equal(empty.stdout, "notes's ledger has no entries yet\n");

    const unknown = await mesh(["ledger", "ghost", "--state", state]);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /ghost is not a module of the fleet being served/);

    const notAName = await mesh(["ledger", "Not.A>Name", "--state", state]);
    assert.equal(notAName.code, 1);
    assert.match(notAName.stderr, /"Not.A>Name" is not a module name/);
  });

  it("exits 2 on a bad --limit and 3 when no mesh answers, and its help shows an example", async () => {
    const bad = await mesh(["ledger", "postgres", "--limit", "0", "--state", state]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--limit 0 is not a whole number/);

    const nowhere = await mesh(["ledger", "postgres", "--state", join(dir, "no-mesh-here")]);
    assert.equal(nowhere.code, 3);
    assert.match(nowhere.stderr, /no mesh has run with state in/);

    const help = await mesh(["ledger", "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /\$ mesh ledger postgres/);
    assert.match(help.stdout, /Exit codes:/);
  });

  it("reads at most 1000 entries however many are asked for", async () => {
    const run = await mesh(["ledger", "postgres", "--limit", "5000", "--json", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as { limit: number; entries: LedgerRecord[] };
    assert.equal(answer.limit, 1000);
    assert.equal(answer.entries.length, 7);
  });

  it("reads an older controller's answer itself, claims and flags alike", () => {
    const text = formatLedger("x", [
      {
        seq: 1,
        subject: "mesh.ledger.x.action",
        at: at(0),
        entry: {
          kind: "action",
          action: "approved",
          login: "a_x",
          who: "root",
          at: at(0),
          why: "set approved",
        },
      },
    ]);
    assert.match(text, /^#1\s+\S+\s+x says:\s+approved a_x, by "root"\s+FLAGGED: no retire approve a_x/m);
  });

  it("shows a module's control characters as such, never passing them to the terminal", () => {
    const text = formatLedger("x", [
      {
        seq: 1,
        subject: "mesh.ledger.x.action",
        at: at(0),
        entry: {
          kind: "action",
          action: "created",
          login: "a_x",
          who: "provisioner",
          at: at(0),
          why: "\u001b[2Kok",
        },
      },
    ]);
    assert.ok(!text.includes("\u001b"));
    assert.match(text, /\uFFFD\[2Kok$/m);
  });

  it("shows an entry of a kind it does not know by its fields", () => {
    const text = formatLedger("x", [
      {
        seq: 1,
        subject: "mesh.ledger.x.other",
        at: "2026-01-01T00:00:00.000Z",
        entry: { kind: "other", n: 1 },
      },
    ]);
    assert.match(text, /^#1\s+\S+\s+other\s+\{"n":1\}\s+-$/m);
  });
});
