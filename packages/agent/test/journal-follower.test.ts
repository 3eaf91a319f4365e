// A provider's actions, from its harness through its journal to its module's ledger, against a real
// nats-server, with the agent stopped and started again in between.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connectBus, credsFor, ledgerInboxPrefix, ModuleLedger } from "@mesh/bus";
import { type ActionEntry, type ProviderModule } from "@mesh/sdk";
import {
  ActionJournal,
  actionJournalPath,
  resolveProviderSettings,
  startProviderProcess,
} from "@mesh/sdk/provider";
import { MemoryAdapter, until } from "@mesh/testkit";
import { JOURNAL_SNAPSHOT_KEY, JournalFollowers } from "../src/journal-follower.ts";
import { followLedgerCredentials, type LedgerCredentials } from "../src/ledger-credentials.ts";
import { startLedgerMesh, type LedgerCredential, type LedgerMesh } from "./ledger-mesh.ts";
import { recordingLogger } from "./test-mesh.ts";

type RecordingLogger = ReturnType<typeof recordingLogger>;

const IFACE = "postgres-database";

/** A provider over an in-memory backend, run the way the agent runs any provider. */
const MEMORY_PROVIDER: ProviderModule = {
  name: "memory",
  interface: IFACE,
  adminUrlEnv: "MESH_MEMORY_URL",
  adminUrlExample: "memory://admin@localhost",
  createAdapter: ({ instance }) => new MemoryAdapter(instance),
};

/** The agent's part: its ledger credentials and a journal follower for each module. */
interface AgentLedgers {
  readonly credentials: LedgerCredentials;
  readonly journals: JournalFollowers;
  readonly logger: RecordingLogger;
  stop(): Promise<void>;
}

void describe("a provider's actions reach its module's ledger through the action journal", () => {
  let mesh: LedgerMesh;
  let stateDir: string;
  let ledgersFile: string;
  let postgres: LedgerCredential;
  const running: AgentLedgers[] = [];
  /** Buses of the tests' own, stopped last (a read still under way when a test ends must not fail). */
  const others: LedgerMesh[] = [];

  const startAgentLedgers = async (modules: string[], on?: LedgerMesh): Promise<AgentLedgers> => {
    const logger = recordingLogger();
    const credentials = await followLedgerCredentials({
      file: ledgersFile,
      servers: [(on ?? mesh).server.url],
      logger,
    });
    const journals = new JournalFollowers({
      node: "n1",
      stateDir,
      ledgers: credentials,
      logger,
      retryMs: 100,
    });
    journals.follow(modules);
    const agent = {
      credentials,
      journals,
      logger,
      async stop() {
        await journals.stop();
        await credentials.stop();
      },
    };
    running.push(agent);
    return agent;
  };

  // What the module's journal lines say, each kept as its claim (never at the entry's top level).
  const actionsIn = async (module: string, on?: LedgerMesh) =>
    (await (on ?? mesh).history(module))
      .filter((r) => r.entry["kind"] === "action")
      .map((r) => {
        assert.deepEqual(r.entry["by"], { module, claim: true }, "each line is kept as the module's claim");
        assert.equal(r.entry["who"], undefined, "nothing the module says is at the top level");
        return r.entry["claim"] as Record<string, unknown>;
      });

  before(async () => {
    mesh = await startLedgerMesh();
    stateDir = await mkdtemp(join(tmpdir(), "mesh-agent-journal-"));
    ledgersFile = join(stateDir, "ledgers");
    postgres = await mesh.credentialFor("postgres");
    await mesh.writeLedgers(ledgersFile, { postgres });
  });
  after(async () => {
    await Promise.all(running.map((a) => a.stop()));
    await mesh.stop();
    await Promise.all(others.map((m) => m.stop()));
    await rm(stateDir, { recursive: true, force: true });
  });

  it("appends each harness action once, across an agent restart and a crash before it noted how far it got", async () => {
    const journalPath = actionJournalPath(stateDir, "postgres");
    const journalLines = async (): Promise<string[]> =>
      (await readFile(journalPath, "utf8").catch(() => "")).split("\n").filter((l) => l !== "");
    const dir = await mkdtemp(join(tmpdir(), "mesh-agent-provider-"));
    const receives = join(dir, "contributions.json");
    const ask = async (logins: string[]): Promise<void> => {
      for (const login of logins)
        await writeFile(join(dir, login), "pw-not-in-any-ledger\n", { mode: 0o600 });
      const given = logins.map((as) => ({ as, secret: join(dir, as), node: "n1", values: {} }));
      await writeFile(`${receives}.tmp`, JSON.stringify({ requirement: IFACE, given }));
      await rename(`${receives}.tmp`, receives);
    };
    await ask([]);
    // The provider as the agent runs it: its journal comes from MESH_STATE_DIR and MESH_MODULE.
    const settings = resolveProviderSettings(MEMORY_PROVIDER, {
      MESH_RECEIVES: receives,
      MESH_MEMORY_URL: "memory://admin@localhost",
      MESH_EVERY: "1h",
      MESH_STATE_DIR: stateDir,
      MESH_MODULE: "postgres",
    });
    assert.equal(settings.journal, journalPath);
    const provider = await startProviderProcess({
      provider: MEMORY_PROVIDER,
      ...settings,
      logger: recordingLogger(),
    });
    const handle = provider.handle;
    try {
      await handle.ready;
      const agent = await startAgentLedgers(["postgres"]);

      await ask(["app_db"]);
      await handle.pass("watch");
      let actions: Record<string, unknown>[] = [];
      await until("the first action in the ledger", () => {
        void actionsIn("postgres").then((a) => (actions = a));
        return actions.length === 1;
      });
      assert.deepEqual(
        { action: actions[0]?.["action"], login: actions[0]?.["login"] },
        { action: "created", login: "app_db" },
      );
      assert.equal(actions[0]?.["who"], "provisioner");
      assert.equal(actions[0]?.["interface"], IFACE);

      // The agent stops; the provider goes on, and its journal keeps what it does.
      await agent.stop();
      await ask(["app_db", "blog_db"]);
      await handle.pass("watch");
      let lines: string[] = [];
      await until("the second action in the journal", () => {
        void journalLines().then((l) => (lines = l));
        return lines.length === 2;
      });
      assert.equal((await stat(journalPath)).mode & 0o777, 0o600);
      assert.equal((await actionsIn("postgres")).length, 1);

      const again = await startAgentLedgers(["postgres"]);
      await until("the second action in the ledger", () => {
        void actionsIn("postgres").then((a) => (actions = a));
        return actions.length >= 2;
      });
      await again.stop();
      assert.deepEqual(
        actions.map((a) => a["login"]),
        ["app_db", "blog_db"],
      );

      // A crash between an append and noting how far it got: the position is found behind.
      const ledger = new ModuleLedger(
        await connectBus({
          servers: mesh.server.url,
          creds: credsFor(postgres.jwt, postgres.seed),
          name: "postgres ledger",
          inboxPrefix: ledgerInboxPrefix("postgres"),
        }),
        "postgres",
      );
      const position = await ledger.readSnapshot<{ offset: number }>(JOURNAL_SNAPSHOT_KEY);
      assert.equal(position?.offset, Buffer.byteLength(await readFile(journalPath)));
      await ledger.snapshot(JOURNAL_SNAPSHOT_KEY, { ...position, offset: 0 });
      await ledger.close();
      const third = await startAgentLedgers(["postgres"]);
      let offset = 0;
      await until("the journal read through again", () => {
        void third.credentials
          .writer("postgres")
          .then((l) => l.readSnapshot<{ offset: number }>(JOURNAL_SNAPSHOT_KEY))
          .then((p) => (offset = p?.offset ?? 0));
        return offset === position?.offset;
      });
      assert.deepEqual(
        (await actionsIn("postgres")).map((a) => a["login"]),
        ["app_db", "blog_db"],
      );
      const entries = await mesh.history("postgres");
      assert.ok(entries.every((r) => !JSON.stringify(r.entry).includes("pw-not-in-any-ledger")));
    } finally {
      await provider.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("keeps an action while the module has no ledger credential, and appends it once one arrives", async () => {
    const file = actionJournalPath(stateDir, "redis");
    const journal = new ActionJournal(file, recordingLogger());
    journal.append(action("created", "cache_a"));
    await journal.flush();
    const agent = await startAgentLedgers(["redis"]);
    await until("the missing credential said", () =>
      agent.logger.lines.some((l) => l.includes("redis's ledger credential is missing")),
    );
    const redis = await mesh.credentialFor("redis");
    assert.deepEqual(await actionsIn("redis"), []);
    await mesh.writeLedgers(ledgersFile, { postgres, redis });
    let actions: Record<string, unknown>[] = [];
    await until("the kept action in the ledger", () => {
      void actionsIn("redis").then((a) => (actions = a));
      return actions.length === 1;
    });
    assert.equal(actions[0]?.["login"], "cache_a");
    assert.equal(
      agent.logger.lines.filter((l) => l.includes("redis's ledger credential is missing")).length,
      1,
    );
    await agent.stop();
  });

  it("keeps actions while the module's ledger is not made yet, and appends each once when it is", async () => {
    // The controller issues the credential at once and makes the ledger every module shares beside
    // it, maybe later: on a bus of its own here, where it is not made yet.
    const later = await startLedgerMesh();
    others.push(later);
    const wiki = await later.credentialFor("wiki", { made: false });
    await mesh.writeLedgers(ledgersFile, { postgres, wiki });
    const file = actionJournalPath(stateDir, "wiki");
    const journal = new ActionJournal(file, recordingLogger());
    journal.append(action("created", "bucket_a"));
    await journal.flush();
    const agent = await startAgentLedgers(["wiki"], later);
    await until("the wait for the ledger said", () =>
      agent.logger.lines.some((l) =>
        /^info: wiki's actions are not appended .*wiki's ledger is not made yet/.test(l),
      ),
    );
    journal.append(action("created", "bucket_b"));
    await journal.flush();
    assert.deepEqual(await actionsIn("wiki", later), [], "nothing is written before the ledger is made");
    await later.makeLedger("wiki");
    let actions: Record<string, unknown>[] = [];
    await until("the kept actions in the ledger", () => {
      void actionsIn("wiki", later).then((a) => (actions = a));
      return actions.length >= 2;
    });
    journal.append(action("retired", "bucket_a"));
    await journal.flush();
    await until("the next action in the ledger", () => {
      void actionsIn("wiki", later).then((a) => (actions = a));
      return actions.length >= 3;
    });
    assert.deepEqual(
      actions.map((a) => `${String(a["action"])} ${String(a["login"])}`),
      ["created bucket_a", "created bucket_b", "retired bucket_a"],
      "each once, in order",
    );
    assert.ok(
      !agent.logger.lines.some((l) => l.startsWith("warn:") && l.includes("wiki's ledger is not made yet")),
      "waiting for a ledger being made is no warning",
    );
    await agent.stop();
  });

  it("skips a line that is not an action, and reads a journal made anew from its start", async () => {
    const redis = await mesh.credentialFor("mariadb");
    await mesh.writeLedgers(ledgersFile, { postgres, mariadb: redis });
    const file = actionJournalPath(stateDir, "mariadb");
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, `not json\n${JSON.stringify(action("created", "shop_db"))}\n{"partial":`, {
      mode: 0o600,
    });
    const agent = await startAgentLedgers(["mariadb"]);
    let actions: Record<string, unknown>[] = [];
    await until("the good line in the ledger", () => {
      void actionsIn("mariadb").then((a) => (actions = a));
      return actions.length === 1;
    });
    assert.ok(agent.logger.lines.some((l) => /offset 0 that is not an action/.test(l)));

    // The provider's journal is removed and begun again: a new file, read from its start.
    await rm(file);
    const journal = new ActionJournal(file, recordingLogger());
    journal.append(action("retired", "shop_db"));
    await journal.flush();
    await until("the new journal's line in the ledger", () => {
      void actionsIn("mariadb").then((a) => (actions = a));
      return actions.length === 2;
    });
    assert.deepEqual(
      actions.map((a) => a["action"]),
      ["created", "retired"],
    );
    await agent.stop();
  });

  it("skips a line that is not JSON, too long or of the wrong types, says the lines skipped once, and keeps going", async () => {
    const oidc = await mesh.credentialFor("oidc");
    await mesh.writeLedgers(ledgersFile, { postgres, oidc });
    const file = actionJournalPath(stateDir, "oidc");
    await mkdir(dirname(file), { recursive: true });
    const good = (login: string): string => `${JSON.stringify(action("created", login))}\n`;
    const bad = [
      "not json at all",
      JSON.stringify({ ...action("created", "x"), login: 5 }),
      JSON.stringify({ ...action("created", "x"), action: "exploded" }),
      JSON.stringify({ ...action("created", "x"), who: "alice\u001b[2K" }),
      JSON.stringify({ ...action("created", "x"), at: "yesterday" }),
      JSON.stringify([1, 2, 3]),
      // Valid JSON of the right shape, but longer than any action: not one.
      JSON.stringify({ ...action("created", "long_db"), why: "w".repeat(70 * 1024) }),
    ];
    // The last line has no end yet, is past the bound, and ends in what would read as an action.
    const unended = `${"p".repeat(70 * 1024)}${JSON.stringify(action("deleted", "tail_db"))}`;
    await writeFile(file, `${good("first_db")}${bad.join("\n")}\n${good("second_db")}${unended}`, {
      mode: 0o600,
    });
    const agent = await startAgentLedgers(["oidc"]);
    const skippedSaid = (): number =>
      agent.logger.lines
        .filter((l) => l.includes("oidc's action journal") && l.includes("that is not an action"))
        .reduce((n, l) => n + 1 + Number(/and (\d+) more line/.exec(l)?.[1] ?? 0), 0);
    await until("every line skipped, said", () => skippedSaid() === bad.length + 1);
    const said = agent.logger.lines.filter((l) => l.includes("oidc's action journal"));
    assert.ok(
      said.some((l) => /offset \d+ that is not an action \(it is not JSON\)/.test(l)),
      said.join("\n"),
    );
    assert.ok(
      said.length <= 2,
      `the lines skipped are said in a line a pass, not one each:\n${said.join("\n")}`,
    );

    // The follower goes on: the over-long line ends, and what follows it is appended.
    const { appendFile } = await import("node:fs/promises");
    await appendFile(file, `\n${good("third_db")}`);
    let actions: Record<string, unknown>[] = [];
    await until("the good lines in the ledger", () => {
      void actionsIn("oidc").then((a) => (actions = a));
      return actions.length === 3;
    });
    assert.deepEqual(
      actions.map((a) => a["login"]),
      ["first_db", "second_db", "third_db"],
      "nothing of a skipped line, nor the tail of the over-long one, is in the ledger",
    );
    assert.equal(skippedSaid(), bad.length + 1, "no skipped line is said again");
    await agent.stop();
  });

  it("keeps a backdated line in another's name as the module's claim, stored at the bus's own time", async () => {
    const s3 = await mesh.credentialFor("s3");
    await mesh.writeLedgers(ledgersFile, { postgres, s3 });
    const file = actionJournalPath(stateDir, "s3");
    await mkdir(dirname(file), { recursive: true });
    const forged = {
      action: "deleted",
      login: "notes_s3",
      interface: "s3-bucket",
      who: "operator alice via mesh tool",
      at: "2020-01-01T00:00:00.000Z",
      why: "cleanup delete by alice",
      freedBytes: 1024,
      // What the module would like the entry to say of itself: dropped at the boundary.
      kind: "tool",
      by: { mesh: true },
      via: "mesh tool",
    };
    await writeFile(file, `${JSON.stringify(forged)}\n`, { mode: 0o600 });
    const before = Date.now();
    const agent = await startAgentLedgers(["s3"]);
    let records: Awaited<ReturnType<LedgerMesh["history"]>> = [];
    await until("the forged line in the ledger", () => {
      void mesh.history("s3").then((r) => (records = r));
      return records.length === 1;
    });
    const [record] = records;
    assert.equal(record?.subject, "mesh.ledgers.s3.action");
    assert.deepEqual(record?.entry, {
      kind: "action",
      by: { module: "s3", claim: true },
      claim: {
        action: "deleted",
        login: "notes_s3",
        interface: "s3-bucket",
        who: "operator alice via mesh tool",
        at: "2020-01-01T00:00:00.000Z",
        why: "cleanup delete by alice",
        freedBytes: 1024,
      },
    });
    assert.ok(Date.parse(record?.at ?? "") >= before - 60_000, "the record's own time is the bus's");
    await agent.stop();
  });

  it("says a journal it cannot write once, never throws into the loop, and writes again once it can", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-agent-journal-bad-"));
    const path = join(dir, "actions.jsonl");
    await mkdir(path); // a directory where the file should be: every write fails, whoever runs this
    const logger = recordingLogger();
    const journal = new ActionJournal(path, logger);
    journal.append(action("created", "a"));
    journal.append(action("created", "b"));
    await journal.flush();
    assert.equal(logger.lines.filter((l) => l.includes("could not be written")).length, 1);
    await rm(path, { recursive: true });
    journal.append(action("created", "c"));
    await journal.flush();
    const lines = (await readFile(path, "utf8")).trim().split("\n");
    assert.deepEqual(
      lines.map((l) => (JSON.parse(l) as ActionEntry).login),
      ["c"],
    );
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    assert.ok(logger.lines.some((l) => l.includes("is written again")));
    await rm(dir, { recursive: true, force: true });
  });
});

function action(kind: ActionEntry["action"], login: string): ActionEntry {
  return {
    action: kind,
    login,
    interface: IFACE,
    who: "provisioner",
    at: new Date().toISOString(),
    why: "test",
  };
}
