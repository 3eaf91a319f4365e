// `--json` on every command that reads something, parsed: against a real nats-server and a real
// controller serving the example fleet (as `mesh up` leaves them, asked with `<state>/operator.creds`),
// a provider's control socket, and the example fleet's files. Each says in JSON what its text says,
// and an error leaves standard output empty with the same exit code as without --json.
// In this process: a spawned mesh costs seconds to start.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createAuthority, type LedgerView } from "@mesh/bus";
import { startController, type Controller } from "@mesh/controller";
import { type ProvisionerTools, type StatusReport } from "@mesh/sdk";
import { serveControl, type ControlServer } from "@mesh/sdk/provider";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import type { PlanReport } from "../src/plan-command.ts";
import type { StatusAnswer } from "../src/status-command.ts";
import { meshInProcess, writeOperatorState, type InProcessRun as Run } from "./run-mesh.ts";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const FLEET = join(root, "examples", "fleet", "mesh.yaml");

const mesh = (...args: string[]): Promise<Run> => meshInProcess(args);

/** `mesh args… --json` and the same without --json: both must agree on the exit code. */
async function both(...args: string[]): Promise<{ json: Run; text: Run; parsed: unknown }> {
  const [json, text] = [await mesh(...args, "--json"), await mesh(...args)];
  assert.equal(json.code, text.code, `${args.join(" ")}: the same exit code with and without --json`);
  assert.doesNotMatch(json.stdout, /\u001b/, "never a colour in JSON");
  return { json, text, parsed: json.stdout === "" ? undefined : (JSON.parse(json.stdout) as unknown) };
}

const STATUS: StatusReport = {
  interface: "postgres-database",
  instance: "postgres",
  receives: "/run/mesh/postgres-database.json",
  lastPassAt: null,
  contributionsProblem: null,
  consumers: [
    {
      login: "notes_postgres",
      state: "active",
      class: null,
      since: "2026-01-01T00:00:00.000Z",
      why: "created",
    },
    {
      login: "old_postgres",
      state: "awaiting-approval",
      class: null,
      since: "2026-01-01T00:00:00.000Z",
      why: "no longer asked for",
    },
  ],
};

describe("--json on every command that reads", { timeout: 60_000 }, () => {
  let nats: NatsServer;
  let dir: string;
  let state: string;
  let controller: Controller;
  let socket: string;
  let provider: ControlServer;

  before(async () => {
    const authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-cli-json-"));
    state = join(dir, "state");
    await mkdir(state);
    controller = await startController({
      stateDir: join(state, "controller"),
      fleetFile: FLEET,
      servers: [nats.url],
      authority,
      logger: quietLogger,
      watch: false,
    });
    await writeOperatorState(authority, state, nats.url);

    socket = join(dir, "postgres.sock");
    const tools: ProvisionerTools = {
      status: () => STATUS,
      retireList: () => ({
        id: "9f3a1c",
        logins: ["old_postgres"],
        held: 2,
        reason: "1 of 2 is more than half",
      }),
      retireApprove: () => Promise.resolve({ id: "9f3a1c", retired: ["old_postgres"] }),
      cleanupList: () => [
        { login: "gone_postgres", retiredAt: "2026-01-02T00:00:00.000Z", why: "unasked", derived: {} },
      ],
      cleanupDelete: (login) => Promise.resolve({ login, freedBytes: 1024 }),
    };
    provider = await serveControl(tools, socket);
  });
  after(async () => {
    await provider?.close();
    await controller?.stop();
    await nats?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("mesh status: nodes, consumers and the fleet, as the text shows them", async () => {
    const { text, parsed } = await both("status", "--state", state);
    assert.equal(text.code, 0, text.stderr);
    const answer = parsed as StatusAnswer;
    assert.deepEqual(
      answer.nodes?.map((n) => n.name),
      ["node-1"],
    );
    assert.deepEqual(answer.consumers?.map((c) => c.consumer).sort(), [
      "api-client",
      "counter",
      "files",
      "mysqld-exporter",
      "notes",
      "postgres-exporter",
      "redis-exporter",
    ]);
    assert.equal(answer.fleet?.file, FLEET);
    for (const c of answer.consumers ?? []) {
      assert.match(
        text.stdout,
        new RegExp(`^${c.consumer}\\s+${c.interface}\\s+${c.login}\\s+${c.provider}$`, "m"),
      );
    }
    assert.match(text.stdout, /^node-1\s+not enrolled/m);
  });

  it("mesh rotate: the controller's answer, and what was rotated", async () => {
    // No provider runs here to apply it: --wait 0 asks for the rotation alone.
    const run = await mesh("rotate", "notes", "postgres-database", "--wait", "0", "--json", "--state", state);
    assert.equal(run.code, 0, run.stderr);
    const shown = JSON.parse(run.stdout) as Record<string, unknown>;
    assert.equal(shown["ok"], true);
    assert.equal(shown["consumer"], "notes");
    assert.equal(shown["interface"], "postgres-database");
    assert.equal(shown["tag"], undefined, "the new password's tag is the CLI's own business");
    assert.equal(shown["applied"], undefined, "nothing was waited for");

    const refused = await both("rotate", "ghost", "postgres-database", "--state", state);
    assert.equal(refused.json.code, 1);
    assert.equal(refused.json.stdout, "");
    assert.match(refused.json.stderr, /^error: ghost has no postgres-database/);
  });

  it("mesh plan: the comparison with what the mesh serves, and a refused fleet's problems", async () => {
    const { text, parsed } = await both("plan", FLEET, "--state", state);
    assert.equal(text.code, 0, text.stderr);
    const plan = parsed as PlanReport;
    assert.equal(plan.fleetFile, FLEET);
    assert.equal(plan.changed, false);
    assert.deepEqual(plan.against.kind, "mesh");
    assert.match(text.stdout, /No changes: the mesh already serves this file/);

    const empty = await both("plan", FLEET, "--empty");
    const fresh = empty.parsed as PlanReport;
    assert.equal(fresh.changed, true);
    assert.equal(fresh.summary.create, 7);
    assert.match(empty.text.stdout, /Plan: 7 consumers to create/);

    const broken = join(dir, "broken.yaml");
    await writeFile(
      broken,
      "nodes: {}\nmodules:\n  notes: { manifest: ./nowhere/module.json, node: node-9 }\n",
    );
    const refused = await both("plan", broken, "--empty");
    assert.equal(refused.json.code, 2);
    const report = refused.parsed as { refused: boolean; problems: unknown[] };
    assert.equal(report.refused, true);
    assert.ok(report.problems.length > 0);
  });

  it("mesh ledger: the controller's answer, entries and all", async () => {
    // The rotation above, recorded by the controller that carried it, with who asked.
    const { text, parsed } = await both("ledger", "notes", "--state", state);
    assert.equal(text.code, 0, text.stderr);
    const answer = parsed as { ok: boolean; limit: number; entries: LedgerView[] };
    assert.deepEqual([answer.ok, answer.limit, answer.entries.length], [true, 50, 1]);
    assert.deepEqual(answer.entries[0]?.recorded, { who: userInfo().username, via: "mesh rotate" });
    assert.equal(answer.entries[0]?.entry["kind"], "rotate");
    assert.match(
      text.stdout,
      new RegExp(
        `^#1\\s+\\S+\\s+${userInfo().username} via mesh rotate\\s+rotate notes postgres-database`,
        "m",
      ),
    );

    const empty = await both("ledger", "counter", "--state", state);
    assert.equal(empty.text.code, 0, empty.text.stderr);
    assert.deepEqual(empty.parsed, { ok: true, module: "counter", limit: 50, entries: [] });
    assert.equal(empty.text.stdout, "counter's ledger has no entries yet\n");

    const unknown = await both("ledger", "ghost", "--state", state);
    assert.equal(unknown.json.code, 1);
    assert.equal(unknown.json.stdout, "");
  });

  it("mesh tool … status, retire list and cleanup list: the provider's answers", async () => {
    const status = await both("tool", "--control", socket, "status");
    assert.equal(status.text.code, 0, status.text.stderr);
    assert.deepEqual(status.parsed, STATUS);
    assert.match(status.text.stdout, /^old_postgres\s+awaiting-approval\s/m);

    const retire = await both("tool", "--control", socket, "retire", "list");
    assert.deepEqual(retire.parsed, {
      id: "9f3a1c",
      logins: ["old_postgres"],
      held: 2,
      reason: "1 of 2 is more than half",
    });
    assert.match(retire.text.stdout, /waiting for approval: set 9f3a1c, 1 of the 2 held/);

    const cleanup = await both("tool", "--control", socket, "cleanup", "list");
    assert.deepEqual(
      (cleanup.parsed as { login: string }[]).map((e) => e.login),
      ["gone_postgres"],
    );
    assert.match(cleanup.text.stdout, /^gone_postgres\s+2026-01-02T00:00:00Z\s+unasked$/m);

    const nowhere = await both("tool", "--control", join(dir, "nobody.sock"), "status");
    assert.equal(nowhere.json.code, 3);
    assert.equal(nowhere.json.stdout, "");
  });

  it("mesh explain: allowed or denied, the line that decides, and the exit code either way", async () => {
    const allowed = await both(
      "explain",
      "notes",
      "publish",
      "mesh.events.notes.note.created",
      "--fleet",
      FLEET,
    );
    assert.equal(allowed.json.code, 0, allowed.json.stderr);
    const yes = allowed.parsed as {
      allowed: boolean;
      module: string;
      action: string;
      subject: string;
      file?: string;
    };
    assert.equal(yes.allowed, true);
    assert.equal(yes.module, "notes");
    assert.equal(yes.action, "publish");
    assert.match(yes.file ?? "", /notes\/module\.json$/);
    assert.match(allowed.text.stdout, /^allowed: /);

    const denied = await both(
      "explain",
      "notes",
      "publish",
      "mesh.events.notes.not.declared",
      "--fleet",
      FLEET,
    );
    assert.equal(denied.json.code, 1);
    assert.equal((denied.parsed as { allowed: boolean }).allowed, false);
  });

  it("mesh check: the findings and their counts", async () => {
    const fixtures = join(root, "packages", "manifest", "test", "fixtures", "check", "mistakes");
    const { text, parsed } = await both("check", join(fixtures, "shop"), join(fixtures, "billing"));
    assert.equal(text.code, 1, "errors found: exit 1 with --json too");
    const report = parsed as {
      modules: number;
      errors: number;
      warnings: number;
      findings: { file: string }[];
    };
    assert.equal(report.modules, 2);
    assert.equal(report.errors, 5);
    assert.equal(report.findings.length, report.errors + report.warnings);
    assert.match(text.stdout, /2 modules checked: 5 errors, 0 warnings/);
  });

  it("an error leaves standard output empty, with the exit code it has without --json", async () => {
    const none = join(dir, "no-mesh-here");
    for (const args of [
      ["status", "--state", none],
      ["ledger", "notes", "--state", none],
      ["tool", "postgres", "status", "--state", none],
    ]) {
      const { json } = await both(...args);
      assert.equal(json.code, 3, args.join(" "));
      assert.equal(json.stdout, "", args.join(" "));
      assert.match(json.stderr, /^error: no mesh has run with state in/);
    }
  });
});
