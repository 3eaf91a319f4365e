// Who did it, in the ledger, end to end on one machine: `mesh up` runs nats-server, the controller,
// one agent and a real Postgres provider with one consumer. What the mesh carries (a tool call, a
// rotation, a deletion) is recorded with who asked and through what; what the provider writes in
// its own action journal is only its claim. A line the provider could have forged (backdated, in an
// operator's name) is shown by `mesh ledger` as postgres's claim, flagged, never as an operator's
// action; a genuine deletion through `mesh tool` shows the recorded call and its claim, not flagged;
// lines that are not actions are skipped and said, and the journal is followed on.
import assert from "node:assert/strict";
import { appendFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { LedgerView } from "@mesh/bus";
import { actionJournalPath } from "@mesh/sdk/provider";
import { startPostgres, type PostgresServer } from "@mesh/testkit";
import { runMesh, startMesh, type MeshProcess, type MeshRun } from "../packages/cli/test/run-mesh.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
const WHO = userInfo().username;

/** The line a provider could write in its own journal: backdated, in an operator's name. */
const FORGED = {
  action: "deleted",
  login: "notes_postgres",
  interface: "postgres-database",
  who: "operator alice via mesh tool",
  at: "2020-01-01T00:00:00.000Z",
  why: "cleanup delete by operator alice via mesh tool",
  freedBytes: 7_800_000,
};

describe("who did it, in the ledger", { timeout: 300_000 }, () => {
  let server: PostgresServer;
  let dir: string;
  let up: MeshProcess;
  const state = (): string => join(dir, "state");
  const fleet = (): string => join(dir, "mesh.yaml");
  const journal = (): string => actionJournalPath(join(state(), "nodes", "node-a"), "postgres");
  const writeFleet = (consumers: readonly string[]): Promise<void> =>
    writeFile(
      fleet(),
      `nodes:
  node-a: {}
modules:
  postgres:
    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}
    node: node-a
    endpoint: { host: 127.0.0.1, port: ${server.port} }
    admin: { env: MESH_POSTGRES_URL }
    env: { MESH_EVERY: 1s }
${consumers.map((c) => `  ${c}: { manifest: ./${c}/module.json, node: node-a }`).join("\n")}
`,
    );
  const mesh = async (...args: string[]): Promise<MeshRun> => runMesh([...args, "--state", state()]);
  const ledger = async (module: string): Promise<LedgerView[]> => {
    const run = await mesh("ledger", module, "--json", "--limit", "1000");
    assert.equal(run.code, 0, run.stderr);
    return (JSON.parse(run.stdout) as { entries: LedgerView[] }).entries;
  };
  const ledgerText = async (module: string): Promise<string> => {
    const run = await mesh("ledger", module, "--limit", "1000");
    assert.equal(run.code, 0, run.stderr);
    return run.stdout;
  };
  /** The row of the text timeline for entry `seq`. */
  const row = (text: string, seq: number): string =>
    text.split("\n").find((l) => l.startsWith(`#${seq} `)) ?? `(no row #${seq} in:\n${text})`;

  before(async () => {
    server = await startPostgres();
    const adminUrl = await server.createAdmin("mesh_admin");
    dir = await mkdtemp(join(tmpdir(), "mesh-ledger-claims-"));
    await mkdir(join(dir, "notes"));
    await writeFile(
      join(dir, "notes", "module.json"),
      JSON.stringify({ name: "notes", needs: { "postgres-database": { values: {} } } }),
    );
    await writeFleet(["notes"]);
    up = startMesh(["up", fleet(), "--state", state(), "--isolation", "auto"], {
      MESH_POSTGRES_URL: adminUrl,
    });
  });

  after(async () => {
    if (up && up.child.exitCode === null) {
      up.child.kill("SIGINT");
      await up.done;
    }
    await server?.stop();
    if (process.env["MESH_TEST_LOG"]) console.log(up?.output());
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("records a tool call through the mesh with who asked and through what", async () => {
    await up.until("notes' database made, and the call recorded", async () => {
      const run = await mesh("tool", "postgres", "status", "--json");
      if (run.code !== 0 || run.stderr.includes("warning")) return undefined;
      const report = JSON.parse(run.stdout) as { consumers: { login: string; state: string }[] };
      return report.consumers.some((c) => c.login === "notes_postgres" && c.state === "active")
        ? true
        : undefined;
    });
    const call = (await ledger("postgres")).findLast((v) => v.entry["kind"] === "tool");
    assert.ok(call, "the call is in postgres's ledger");
    assert.deepEqual(call.recorded, { who: WHO, via: "mesh tool" });
    assert.equal(call.entry["tool"], "status");
    assert.match(
      row(await ledgerText("postgres"), call.seq),
      new RegExp(`\\s${WHO} via mesh tool\\s+status\\s+ok`),
    );
  });

  it("records a rotation with who asked, in the consumer's ledger and its provider's", async () => {
    const run = await mesh("rotate", "notes", "postgres-database");
    assert.equal(run.code, 0, run.stderr);
    assert.doesNotMatch(run.stderr, /warning/, "both records written");
    for (const module of ["notes", "postgres"]) {
      const rotation = (await ledger(module)).findLast((v) => v.entry["kind"] === "rotate");
      assert.ok(rotation, `the rotation is in ${module}'s ledger`);
      assert.deepEqual(rotation.recorded, { who: WHO, via: "mesh rotate" });
      assert.equal(rotation.entry["login"], "notes_postgres");
      assert.match(
        row(await ledgerText(module), rotation.seq),
        new RegExp(
          `\\s${WHO} via mesh rotate\\s+rotate notes postgres-database \\(notes_postgres at postgres\\)\\s+ok`,
        ),
      );
    }
  });

  it("shows a forged, backdated journal line as postgres's claim, flagged, never as an operator's action", async () => {
    // As the provider would: its journal is a file of its own.
    await appendFile(journal(), `${JSON.stringify(FORGED)}\n`);
    const forged = await up.until("the forged line in postgres's ledger", async () =>
      (await ledger("postgres")).find((v) => v.claim?.who === FORGED.who),
    );
    assert.equal(forged.recorded, undefined, "not a record of the mesh");
    assert.equal(forged.entry["who"], undefined, "nothing the module says is at the entry's top level");
    assert.deepEqual(forged.entry["by"], { module: "postgres", claim: true });
    assert.equal(forged.claim?.at, FORGED.at, "the time it gives is kept as its claim");
    assert.notEqual(forged.at.slice(0, 4), "2020", "the record's own time is the bus's");
    assert.match(forged.flagged ?? "", /^no cleanup delete notes_postgres was asked through the mesh/);

    const text = await ledgerText("postgres");
    const shown = row(text, forged.seq);
    assert.match(shown, /^#\d+\s+\S+\s+postgres says:\s+deleted notes_postgres \(postgres-database\)/);
    assert.match(shown, /by "operator alice via mesh tool", at "2020-01-01T00:00:00.000Z"/);
    assert.match(shown, /FLAGGED: no cleanup delete notes_postgres was asked through the mesh/);
    assert.doesNotMatch(text, /^#\d+\s+\S+\s+(operator )?alice/m, "no row is alice's");
    assert.match(text, /^1 claim FLAGGED: postgres says an operator acted/m);
  });

  it("skips journal lines that are not actions, says them once, and follows the journal on", async () => {
    const after = {
      action: "re-applied",
      login: "notes_postgres",
      interface: "postgres-database",
      who: "provisioner",
      at: new Date().toISOString(),
      why: "the line after the garbage",
    };
    const bad = [
      "this is not JSON",
      JSON.stringify({ ...FORGED, login: ["notes_postgres"] }),
      JSON.stringify({ ...FORGED, why: "x".repeat(70 * 1024) }),
    ];
    await appendFile(journal(), `${bad.join("\n")}\n${JSON.stringify(after)}\n`);
    const kept = await up.until("the line after the garbage in postgres's ledger", async () =>
      (await ledger("postgres")).find((v) => v.claim?.why === after.why),
    );
    assert.equal(kept.flagged, undefined, "the loop's own action needs no request");
    const said = up
      .output()
      .split("\n")
      .filter((l) => /postgres's action journal .* that is not an action/.test(l));
    const counted = said.reduce((n, l) => n + 1 + Number(/and (\d+) more line/.exec(l)?.[1] ?? 0), 0);
    assert.equal(counted, bad.length, `each skipped line said once:\n${said.join("\n")}`);
    assert.match(said.join("\n"), /\(it is not JSON\)/);
    const claims = (await ledger("postgres")).filter((v) => v.claim !== undefined);
    assert.equal(
      claims.filter((v) => v.claim?.who === FORGED.who).length,
      1,
      "no bad line reached the ledger",
    );
    assert.equal(up.child.exitCode, null, "mesh up still runs");
  });

  it("shows a genuine deletion through mesh tool as the recorded call and its claim, not flagged", async () => {
    await writeFleet([]);
    await up.until("notes_postgres retired", async () => {
      const run = await mesh("tool", "postgres", "cleanup", "list", "--json");
      if (run.code !== 0) return undefined;
      return (JSON.parse(run.stdout) as { login: string }[]).some((e) => e.login === "notes_postgres")
        ? true
        : undefined;
    });
    const run = await mesh("tool", "postgres", "cleanup", "delete", "notes_postgres", "--yes");
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const deleted = await up.until("the provider's claim of the deletion", async () =>
      (await ledger("postgres")).find((v) => v.claim?.action === "deleted" && v.claim.who === WHO),
    );
    assert.equal(deleted.flagged, undefined, deleted.flagged);
    const entries = await ledger("postgres");
    const call = entries.find((v) => v.seq === deleted.matches);
    assert.ok(call, `the claim names the request it stands on (#${deleted.matches})`);
    assert.equal(call.entry["tool"], "cleanup delete");
    assert.deepEqual(call.entry["args"], ["notes_postgres"]);
    assert.deepEqual(call.recorded, { who: WHO, via: "mesh tool" });
    assert.equal(call.entry["ok"], true);

    const text = await ledgerText("postgres");
    assert.match(
      row(text, call.seq),
      new RegExp(`\\s${WHO} via mesh tool\\s+cleanup delete notes_postgres\\s+ok`),
    );
    assert.match(
      row(text, deleted.seq),
      new RegExp(
        `postgres says:\\s+deleted notes_postgres \\(postgres-database\\), freed .*, by "${WHO}"\\s+.*\\(asked in #${call.seq}\\)$`,
      ),
    );
    assert.doesNotMatch(row(text, deleted.seq), /FLAGGED/);
    // The forged line still stands on nothing: it gives a time years before the request.
    const forged = entries.find((v) => v.claim?.who === FORGED.who);
    assert.match(forged?.flagged ?? "", /no cleanup delete notes_postgres was asked through the mesh/);
  });
});
