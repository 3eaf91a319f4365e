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
} from "@mesh/bus";
import { startController, type Controller } from "@mesh/controller";
import { startNats, type NatsServer } from "@mesh/testkit";
import { formatLedger } from "../src/ledger-command.ts";
import { meshInProcess, runMesh, writeOperatorState, type InProcessRun } from "./run-mesh.ts";

// In this process (a spawned mesh costs seconds to start): what it prints, and its exit code.
const mesh = (args: readonly string[]): Promise<InProcessRun> =>
  meshInProcess(args, { stdin: process.stdin });

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
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      watch: false,
    });
    await writeOperatorState(authority, state, nats.url);

    // What a provider and the tools through the mesh leave in postgres's ledger.
    const keys = newUserKeys();
    const admin = await authority.issueUser({
      name: "writer",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    const nc = await connectBus({ servers: nats.url, creds: credsFor(admin, keys.seed), name: "writer" });
    await ensureLedger(nc, "postgres");
    ledger = new ModuleLedger(nc, "postgres");
    await ledger.append("action", {
      action: "created",
      login: "notes_db",
      interface: "postgres-database",
      who: "provisioner",
      at: "2026-01-02T03:04:05.000Z",
      why: "notes asks for postgres-database",
    });
    await ledger.append("tool", {
      tool: "cleanup-delete",
      args: ["old_db"],
      who: "alice",
      at: "2026-01-02T03:05:00.000Z",
      ok: false,
      error: "old_db is not retired",
      code: "not-retired",
    });
    await ledger.append("action", {
      action: "deleted",
      login: "old_db",
      interface: "postgres-database",
      who: "alice",
      at: "2026-01-02T03:06:00.000Z",
      why: "asked by alice",
      freedBytes: 7 * 1024 * 1024,
    });
    await ledger.append("tool", {
      tool: "status",
      args: [],
      who: "bob",
      at: "2026-01-02T03:07:00.000Z",
      ok: true,
      answer: { consumers: 1 },
    });
  });
  after(async () => {
    await ledger.close();
    await controller.stop();
    await nats.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it("prints the newest entries oldest first: when, kind, who, what, and why or result", async () => {
    // Once as an operator's shell runs it; the rest in this process.
    const run = await runMesh(["ledger", "postgres", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.trim().split("\n");
    assert.match(lines[0] ?? "", /postgres's ledger, the newest 4 entries/);
    assert.match(lines[1] ?? "", /^TIME\s+KIND\s+WHO\s+WHAT\s+WHY \/ RESULT$/);
    assert.match(
      lines[2] ?? "",
      /^2026-01-02T03:04:05Z\s+action\s+provisioner\s+created notes_db \(postgres-database\)\s+notes asks for postgres-database$/,
    );
    assert.match(
      lines[3] ?? "",
      /tool\s+alice\s+cleanup-delete old_db\s+refused: old_db is not retired \(not-retired\)$/,
    );
    assert.match(
      lines[4] ?? "",
      /action\s+alice\s+deleted old_db \(postgres-database\), freed 7 MiB\s+asked by alice$/,
    );
    assert.match(lines[5] ?? "", /tool\s+bob\s+status\s+ok: \{"consumers":1\}$/);
  });

  it("gives scripts the controller's answer with --json, as many as --limit asks", async () => {
    const run = await mesh(["ledger", "postgres", "--limit", "2", "--json", "--state", state]);
    assert.equal(run.code, 0, run.stderr);
    const answer = JSON.parse(run.stdout) as { ok: boolean; entries: LedgerRecord[] };
    assert.equal(answer.ok, true);
    assert.deepEqual(
      answer.entries.map((r) => [r.seq, r.subject, r.entry["kind"]]),
      [
        [3, "mesh.ledger.postgres.action", "action"],
        [4, "mesh.ledger.postgres.tool", "tool"],
      ],
    );
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
    assert.equal(answer.entries.length, 4);
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
    assert.match(text, /other\s+-\s+\{"n":1\}\s+-$/m);
  });
});
