// The agent's tool runner against a real nats-server: a request relayed on the node's tool subject
// reaches a real control socket, the answer comes back scrubbed of the node's secrets, and a `tool`
// entry lands in the module's ledger stream, written on the module's own ledger credential.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ledgerInboxPrefix,
  ledgerPermissions,
  ModuleLedger,
  newUserKeys,
  readLedger,
  toolSubject,
  type BusAuthority,
  type BusPermissions,
} from "@mesh/bus";
import { secretPath } from "@mesh/manifest";
import { ToolError, type ProvisionerTools, type StatusReport } from "@mesh/sdk";
import { serveControl, type ControlServer } from "@mesh/sdk/provider";
import { startNats, until, type NatsServer } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";
import { LedgerBacklog } from "../src/ledger-backlog.ts";
import { moduleControlPath, runToolCall } from "../src/index.ts";
import {
  LEDGER_APPEND_TIMEOUT_MS,
  serveTools,
  type ToolLedger,
  type ToolRunner,
  type ToolRunReply,
} from "../src/tool-runner.ts";
import { recordingLogger } from "./test-mesh.ts";

const NODE = "n1";
const PASSWORD = "pw-notes-Zq8x1";
const ADMIN_PASSWORD = "admin-S3cret";

function statusWith(why: string): StatusReport {
  return {
    interface: "postgres-database",
    instance: "postgres",
    receives: "/state/modules/postgres/receives/postgres-database.json",
    lastPassAt: "2026-01-02T03:04:05.000Z",
    contributionsProblem: null,
    consumers: [
      { login: "notes_db", state: "failing", class: "refused", since: "2026-01-02T03:00:00.000Z", why },
    ],
  };
}

interface FakeTools extends ProvisionerTools {
  readonly calls: unknown[][];
}

function fakeTools(): FakeTools {
  const calls: unknown[][] = [];
  return {
    calls,
    // A driver that echoes what it was given: the runner must scrub it.
    status: () =>
      statusWith(
        `login failed for notes_db with password ${PASSWORD} via postgres://mesh_admin:${ADMIN_PASSWORD}@db`,
      ),
    retireList: () => ({ id: null, logins: [], held: 1, reason: "" }),
    async retireApprove(id) {
      throw new ToolError("nothing-waiting", `nothing waits for approval; ${String(id)} is not a set`);
    },
    cleanupList: () => [],
    async cleanupDelete(login, who) {
      calls.push(["cleanupDelete", login, who]);
      return { login, freedBytes: 4096 };
    },
  };
}

/** The permissions the controller grants a node for tools: answer on its own tool subject, nothing more. */
function nodeToolPermissions(node: string): BusPermissions {
  return { pub: { allow: [] }, sub: { allow: [toolSubject(node)] }, allowResponses: true };
}

void describe("the agent's tool runner", () => {
  let authority: BusAuthority;
  let nats: NatsServer;
  let stateDir: string;
  let admin: NatsConnection;
  let node: NatsConnection;
  let ledgerNc: NatsConnection;
  let ledger: ModuleLedger;
  let control: ControlServer;
  let tools: FakeTools;
  let runner: ToolRunner;
  let modules = ["postgres", "notes"];
  let ledgerOf: (module: string) => Promise<ToolLedger>;
  const logger = recordingLogger();

  const connectAs = async (
    name: string,
    permissions: BusPermissions,
    inbox?: string,
    servers: string = nats.url,
  ): Promise<NatsConnection> => {
    const keys = newUserKeys();
    const jwt = await authority.issueUser({ name, publicKey: keys.publicKey, permissions });
    return connectBus({
      servers,
      creds: credsFor(jwt, keys.seed),
      name,
      ...(inbox === undefined ? {} : { inboxPrefix: inbox }),
    });
  };

  const ask = async (body: unknown): Promise<ToolRunReply> => {
    const msg = await admin.request(toolSubject(NODE), JSON.stringify(body), { timeout: 20_000 });
    return msg.json<ToolRunReply>();
  };

  before(async () => {
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    stateDir = await mkdtemp(join(tmpdir(), "mesh-tool-runner-"));
    // A password this node holds, as the agent writes it.
    const secret = secretPath(stateDir, "notes", "postgres-database");
    await mkdir(join(secret, ".."), { recursive: true });
    await writeFile(secret, `${PASSWORD}\n`, { mode: 0o600 });
    await mkdir(dirname(moduleControlPath(stateDir, "postgres")), { recursive: true });
    tools = fakeTools();
    control = await serveControl(tools, moduleControlPath(stateDir, "postgres"));

    // The controller's connection stands in for the relay: it may do anything.
    admin = await connectAs("controller", { pub: { allow: [">"] }, sub: { allow: [">"] } });
    await ensureLedger(admin, "postgres");
    node = await connectAs(NODE, nodeToolPermissions(NODE));
    ledgerNc = await connectAs(
      "postgres-ledger",
      ledgerPermissions("postgres"),
      ledgerInboxPrefix("postgres"),
    );
    ledger = new ModuleLedger(ledgerNc, "postgres");
    ledgerOf = async (module) => {
      if (module !== "postgres") throw new Error(`no ledger credential for ${module}`);
      return ledger;
    };
    runner = serveTools({
      nc: node,
      node: NODE,
      stateDir,
      modules: () => modules,
      ledger: (module) => ledgerOf(module),
      logger,
      env: { MESH_POSTGRES_URL: `postgres://mesh_admin:${ADMIN_PASSWORD}@db:5432/postgres` },
    });
    await node.flush();
  });

  after(async () => {
    await runner?.stop();
    await control?.close();
    await ledger?.close();
    for (const nc of [node, admin]) if (nc) await closeBus(nc);
    await nats?.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("answers a relayed status from the module's control socket, with no secret of the node in it", async () => {
    const reply = await ask({ module: "postgres", tool: "status", args: [], who: "alice" });
    assert.equal(reply.ok, true, JSON.stringify(reply));
    assert.ok(reply.ok);
    const report = reply.answer as StatusReport;
    assert.equal(report.consumers[0]?.login, "notes_db");
    const text = JSON.stringify(reply);
    assert.ok(!text.includes(PASSWORD), "the consumer's password is scrubbed");
    assert.ok(!text.includes(ADMIN_PASSWORD), "the admin URL's password is scrubbed");
    assert.match(report.consumers[0]?.why ?? "", /with password \*\*\*/);
    assert.equal(reply.ledger, undefined, "the ledger entry was written");
  });

  it("appends each call and its result to the module's ledger stream, scrubbed, with who asked and through what", async () => {
    const reply = await ask({
      module: "postgres",
      tool: "cleanup delete",
      args: ["old_db"],
      who: "bob",
      via: "dashboard",
    });
    assert.ok(reply.ok, JSON.stringify(reply));
    assert.deepEqual(reply.answer, { login: "old_db", freedBytes: 4096 });
    assert.deepEqual(tools.calls.at(-1), ["cleanupDelete", "old_db", "bob"]);

    const records = await readLedger(admin, "postgres", { limit: 10, kind: "tool" });
    const entries = records.map((r) => r.entry);
    const deleted = entries.find((e) => e["tool"] === "cleanup delete");
    assert.ok(deleted, "the delete is in the ledger");
    assert.equal(deleted["kind"], "tool");
    assert.deepEqual(deleted["args"], ["old_db"]);
    assert.equal(deleted["who"], "bob");
    assert.equal(deleted["via"], "dashboard");
    assert.equal(deleted["ok"], true);
    assert.deepEqual(deleted["answer"], { login: "old_db", freedBytes: 4096 });
    assert.ok(!Number.isNaN(Date.parse(String(deleted["at"]))), "it says when");
    const status = entries.find((e) => e["tool"] === "status");
    assert.ok(status, "the status call is in the ledger too");
    assert.ok(!JSON.stringify(records).includes(PASSWORD), "no password in the ledger");
    assert.ok(records.every((r) => r.subject === "mesh.ledgers.postgres.tool"));
  });

  it("passes the provider's refusal back with its code, and keeps it in the ledger", async () => {
    // A surface the mesh does not have is not kept: only the controller's word is.
    const reply = await ask({
      module: "postgres",
      tool: "retire approve",
      args: ["abc"],
      who: "carol",
      via: "a module's say-so",
    });
    assert.equal(reply.ok, false);
    assert.ok(!reply.ok);
    assert.equal(reply.code, "nothing-waiting");
    assert.match(reply.error, /nothing waits for approval/);
    const records = await readLedger(admin, "postgres", { limit: 1, kind: "tool" });
    assert.equal(records[0]?.entry["tool"], "retire approve");
    assert.equal(records[0]?.entry["ok"], false);
    assert.equal(records[0]?.entry["code"], "nothing-waiting");
    assert.equal(records[0]?.entry["who"], "carol");
    assert.equal(records[0]?.entry["via"], undefined);
  });

  it("keeps a secret passed as an argument out of the answer, the ledger and the log", async () => {
    const reply = await ask({ module: "postgres", tool: "retire approve", args: [PASSWORD], who: "dave" });
    assert.ok(!reply.ok);
    assert.equal(reply.code, "nothing-waiting");
    assert.ok(!JSON.stringify(reply).includes(PASSWORD), "no password in the answer");
    const records = await readLedger(admin, "postgres", { limit: 1, kind: "tool" });
    assert.equal(records[0]?.entry["who"], "dave");
    assert.ok(!JSON.stringify(records).includes(PASSWORD), "no password in the ledger");
    const said = logger.lines.filter((l) => l.includes("dave asked"));
    assert.ok(said.length > 0, "the call is logged");
    assert.ok(!logger.lines.some((l) => l.includes(PASSWORD)), "no password in the log");
  });

  it("leaves a read asked with record: false out of the ledger, but never an action", async () => {
    const before = (await readLedger(admin, "postgres", { limit: 1000, kind: "tool" })).length;
    const read = await ask({ module: "postgres", tool: "status", args: [], who: "page", record: false });
    assert.ok(read.ok, JSON.stringify(read));
    const afterRead = await readLedger(admin, "postgres", { limit: 1000, kind: "tool" });
    assert.equal(afterRead.length, before, "a refreshing page's read is not recorded");

    const action = await ask({
      module: "postgres",
      tool: "cleanup delete",
      args: ["older_db"],
      who: "page",
      record: false,
    });
    assert.ok(action.ok, JSON.stringify(action));
    const afterAction = await readLedger(admin, "postgres", { limit: 1000, kind: "tool" });
    assert.equal(afterAction.length, before + 1, "an action is recorded whatever the call says");
    assert.equal(afterAction.at(-1)?.entry["tool"], "cleanup delete");
  });

  it("refuses a module this node does not run, naming the ones it does", async () => {
    const reply = await ask({ module: "redis", tool: "status", args: [], who: "alice" });
    assert.ok(!reply.ok);
    assert.equal(reply.code, "module-not-here");
    assert.match(reply.error, /redis does not run on node n1 \(it runs postgres, notes\)/);
  });

  it("says a module with no control socket answers no tools, and still records the call", async () => {
    let appended: unknown;
    const saved = ledgerOf;
    ledgerOf = async () => ({
      append: async (_kind, entry) => {
        appended = entry;
        return 1;
      },
    });
    try {
      const reply = await ask({ module: "notes", tool: "status", args: [], who: "alice" });
      assert.ok(!reply.ok);
      assert.equal(reply.code, "provider-not-listening");
      assert.match(reply.error, /notes on node n1 answers no tools: nothing listens at its control socket/);
      assert.match(reply.error, /mesh status/);
      assert.equal((appended as { ok?: boolean } | undefined)?.ok, false);
    } finally {
      ledgerOf = saved;
    }
  });

  it("refuses a control socket that a module replaced with a symlink to another module's", async () => {
    const planted = moduleControlPath(stateDir, "notes");
    await mkdir(dirname(planted), { recursive: true });
    await symlink(moduleControlPath(stateDir, "postgres"), planted);
    const before = tools.calls.length;
    try {
      const reply = await ask({ module: "notes", tool: "status", args: [], who: "alice" });
      assert.ok(!reply.ok);
      assert.equal(reply.code, "provider-unreachable");
      assert.match(reply.error, /control\.sock is refused: it is a symlink/);
      assert.equal(tools.calls.length, before, "postgres was not asked in notes' name");
    } finally {
      await rm(planted, { force: true });
    }
  });

  it("answers all the same when the ledger cannot be written, and says why the entry is missing", async () => {
    modules = ["postgres", "notes", "mystery"];
    await mkdir(dirname(moduleControlPath(stateDir, "mystery")), { recursive: true });
    const mystery = await serveControl(fakeTools(), moduleControlPath(stateDir, "mystery"));
    try {
      const reply = await ask({ module: "mystery", tool: "cleanup list", args: [], who: "alice" });
      assert.ok(reply.ok, JSON.stringify(reply));
      assert.deepEqual(reply.answer, []);
      assert.match(reply.ledger ?? "", /not written to mystery's ledger: no ledger credential for mystery/);
    } finally {
      await mystery.close();
      modules = ["postgres", "notes"];
    }
  });

  it("answers at once while the module's ledger is not made yet, and appends the entry once it is", async () => {
    // The controller issued fresh's ledger credential beside its bus one, and makes the ledger
    // every module shares later: on a bus of its own here, where it is not made yet.
    await mkdir(dirname(moduleControlPath(stateDir, "fresh")), { recursive: true });
    const fresh = await serveControl(fakeTools(), moduleControlPath(stateDir, "fresh"));
    const later = await startNats({ config: authority.serverConfig() });
    const laterAdmin = await connectAs(
      "controller",
      { pub: { allow: [">"] }, sub: { allow: [">"] } },
      undefined,
      later.url,
    );
    const freshLedger = new ModuleLedger(
      await connectAs("fresh-ledger", ledgerPermissions("fresh"), ledgerInboxPrefix("fresh"), later.url),
      "fresh",
    );
    const backlog = new LedgerBacklog({
      ledger: () => Promise.resolve(freshLedger),
      logger,
      firstDelayMs: 100,
    });
    const options = {
      nc: node,
      node: NODE,
      stateDir,
      modules: () => ["fresh"],
      ledger: () => Promise.resolve(freshLedger),
      backlog,
      logger,
    };
    try {
      const began = Date.now();
      const call = { module: "fresh", tool: "cleanup delete", args: ["gone_db"], who: "carol" };
      const reply = await runToolCall(new TextEncoder().encode(JSON.stringify(call)), options);
      assert.ok(reply.ok, JSON.stringify(reply));
      assert.ok(Date.now() - began < LEDGER_APPEND_TIMEOUT_MS, "the answer did not wait out the ledger");
      assert.match(reply.ledger ?? "", /not written yet \(fresh's ledger is not made yet/);
      assert.match(reply.ledger ?? "", /the agent keeps it and appends it once fresh's ledger takes it/);
      assert.equal(reply.ledgerWaits, true, "the controller is not to record it too");
      assert.equal(backlog.waiting("fresh"), 1);

      await ensureLedger(laterAdmin, "fresh");
      const records = await until(
        "the kept entry in fresh's ledger",
        async () => {
          const found = await readLedger(laterAdmin, "fresh", { limit: 10, kind: "tool" });
          return found.length > 0 ? found : undefined;
        },
        30,
      );
      assert.equal(backlog.waiting("fresh"), 0);
      assert.equal(records.length, 1);
      assert.equal(records[0]?.entry["who"], "carol");
      assert.deepEqual(records[0]?.entry["args"], ["gone_db"]);
      assert.ok(
        logger.lines.some((l) => /^info: fresh's ledger took the 1 entry that waited for it/.test(l)),
      );
    } finally {
      await backlog.stop();
      await freshLedger.close();
      await fresh.close();
      await laterAdmin.close();
      await later.stop();
    }
  });

  it("refuses a request that is not a tool call, without asking any socket", async () => {
    const before = tools.calls.length;
    for (const body of [
      { module: "postgres", tool: "drop everything", args: [], who: "alice" },
      { module: "postgres", tool: "cleanup delete", args: ["Robert'); DROP ROLE x;--"], who: "alice" },
      { module: "postgres", tool: "status", args: [1], who: "alice" },
      { tool: "status", args: [], who: "alice" },
    ]) {
      const reply = await ask(body);
      assert.ok(!reply.ok, JSON.stringify(body));
      assert.equal(reply.code, "bad-request", JSON.stringify(body));
    }
    const raw = await admin.request(toolSubject(NODE), "not json", { timeout: 20_000 });
    assert.equal(raw.json<ToolRunReply>().ok, false);
    assert.equal(tools.calls.length, before);
  });

  it("another node's credential cannot take this node's tool calls", async () => {
    const other = await connectAs("n2", nodeToolPermissions("n2"));
    try {
      const taken: string[] = [];
      const sub = other.subscribe(toolSubject(NODE));
      const listening = (async () => {
        for await (const msg of sub) taken.push(msg.string());
      })();
      await assert.rejects(listening, /Permissions Violation for Subscription to "mesh\.node\.n1\.tool"/i);
      const reply = await ask({ module: "postgres", tool: "cleanup list", args: [], who: "alice" });
      assert.ok(reply.ok, "n1's own agent answers");
      assert.deepEqual(taken, [], "n2 saw none of n1's calls");
    } finally {
      await closeBus(other);
    }
  });
});
