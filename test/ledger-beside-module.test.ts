// A module's ledger is made beside it, never before it: end to end on a real nats-server, with the
// controller's making of the ledger every module shares held back (as a bus with a server down holds it back for tens of
// seconds), a new module starts as soon as its bus credential is issued, and the actions it
// journals meanwhile reach its ledger once the ledger is made, each once, none lost.
import assert from "node:assert/strict";
import { appendFile, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  ensureLedger,
  ledgerStreamName,
  newUserKeys,
  readLedger,
  type BusAuthority,
  type BusLogger,
} from "@mesh/bus";
import { startAgent, type Agent } from "@mesh/agent";
import { startController, type Controller } from "@mesh/controller";
import { startNats, type NatsServer, until } from "@mesh/testkit";

const FAST = { reportEveryMs: 300, retryMs: 200, restartFirstMs: 50, restartMaxMs: 400, stopGraceMs: 2_000 };

/** A module that says it started (with its environment) and journals two actions, then stays. */
const JOURNALS = `import { appendFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
const home = dirname(process.env.MESH_CONTROL);
writeFileSync(join(home, "env.json"), JSON.stringify({ creds: process.env.MESH_BUS_CREDS ?? null }));
for (const login of ["first_db", "second_db"]) {
  const entry = { action: "created", login, interface: "postgres-database", who: "provisioner", at: new Date().toISOString(), why: "asked for" };
  appendFileSync(join(home, "actions.jsonl"), JSON.stringify(entry) + "\\n", { mode: 0o600 });
}
setInterval(() => {}, 1000);
`;

function recording(): BusLogger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info: ${m}`),
    warn: (m) => lines.push(`warn: ${m}`),
    error: (m) => lines.push(`error: ${m}`),
  };
}

void describe("a new module starts before its ledger is made", { timeout: 240_000 }, () => {
  let authority: BusAuthority;
  let nats: NatsServer;
  let dir: string;
  let controller: Controller | undefined;
  let agent: Agent | undefined;
  let admin: NatsConnection;
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const asked: string[] = [];
  const controllerLog = recording();
  const agentLog = recording();
  const home = (): string => join(dir, "agent", "modules", "notes", "home");

  before(async () => {
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-ledger-beside-"));
    await writeFile(join(dir, "journals.mjs"), JOURNALS);
    await mkdir(join(dir, "notes"));
    await writeFile(
      join(dir, "notes", "module.json"),
      JSON.stringify({ name: "notes", run: { command: "node", args: ["../journals.mjs"] } }),
    );
    await writeFile(
      join(dir, "mesh.yaml"),
      "nodes:\n  n1: {}\nmodules:\n  notes: { manifest: ./notes/module.json, node: n1 }\n",
    );
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "admin",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    admin = await connectBus({ servers: nats.url, creds: credsFor(jwt, keys.seed), name: "admin" });
    controller = await startController({
      stateDir: join(dir, "controller"),
      fleetFile: join(dir, "mesh.yaml"),
      servers: [nats.url],
      authority,
      logger: controllerLog,
      watch: false,
      // The ledger's making, held until the test lets it go.
      makeLedger: async (nc, module, options) => {
        asked.push(module);
        await held;
        await ensureLedger(nc, module, options);
      },
    });
    agent = await startAgent({
      node: "n1",
      stateDir: join(dir, "agent"),
      joinToken: await controller.joinToken("n1"),
      logger: agentLog,
      timings: FAST,
    });
  });

  after(async () => {
    release();
    await agent?.stop();
    await controller?.stop();
    await closeBus(admin);
    await nats.stop();
    if (process.env["MESH_TEST_LOG"]) console.log([...controllerLog.lines, ...agentLog.lines].join("\n"));
    await rm(dir, { recursive: true, force: true });
  });

  void it("starts with its bus credential while its ledger is held back, and its journalled actions reach the ledger once made", async () => {
    const started = await until(
      "notes started with its bus credential",
      async () => {
        const env = JSON.parse(await readFile(join(home(), "env.json"), "utf8")) as { creds: string | null };
        return env.creds !== null ? env : undefined;
      },
      60,
    );
    assert.ok(started.creds);
    // Still held back: the module did not wait for it. It is asked for once, as the controller starts
    // leading, not once per module.
    assert.equal(asked.length, 1);
    const jsm = await jetstreamManager(admin);
    await assert.rejects(jsm.streams.info(ledgerStreamName("notes")), "notes's ledger is not made yet");
    assert.ok(
      controller?.status().waiting?.some((w) => w.what.startsWith("the ledger every module shares")),
      "mesh status lists the ledger being made",
    );
    await until(
      "the agent to say the actions wait for the ledger",
      () => agentLog.lines.some((l) => /^info: notes's actions are not appended .*not made yet/.test(l)),
      30,
    );

    release();
    const actions = async (): Promise<string[]> =>
      (await readLedger(admin, "notes", { limit: 100, kind: "action" })).map((r) =>
        // Each line is kept as the module's claim.
        String((r.entry["claim"] as { login?: unknown } | undefined)?.login),
      );
    await until(
      "both actions in notes's ledger",
      async () => ((await actions()).length >= 2 ? true : undefined),
      60,
    );
    // One more after the ledger is made, then every one is there once, in order.
    const entry = {
      action: "retired",
      login: "first_db",
      interface: "postgres-database",
      who: "provisioner",
      at: new Date().toISOString(),
      why: "no longer asked for",
    };
    await appendFile(join(home(), "actions.jsonl"), `${JSON.stringify(entry)}\n`);
    await until("the third action", async () => ((await actions()).length >= 3 ? true : undefined), 60);
    assert.deepEqual(await actions(), ["first_db", "second_db", "first_db"]);
    assert.ok(
      !controller?.status().waiting?.some((w) => w.what.startsWith("the ledger every module shares")),
      "nothing waits once it is made",
    );
    assert.equal(asked.length, 1, "made once");
    assert.equal((await jsm.streams.info(ledgerStreamName("notes"))).config.name, ledgerStreamName("notes"));
  });
});
