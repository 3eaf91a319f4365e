// Every module's own bus and ledger credentials, end to end on a real nats-server: the agent makes
// the module's key pairs and reports only the public keys, the controller issues the JWTs from the
// manifests, the agent writes the creds file and the `ledgers` file and starts the module with the
// contract's environment. The server itself confines each credential; a credential the controller
// stops issuing for stops working without a server restart.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  allReportsSubject,
  BusCredentialsRefusedError,
  closeBus,
  connectBus,
  createAuthority,
  credsFor,
  ledgerInboxPrefix,
  ledgerSubject,
  ModuleLedger,
  newUserKeys,
  nodeDeliveriesBucket,
  openState,
  type BusAuthority,
  type BusLogger,
} from "@mesh/bus";
import { ledgersPath, moduleCredsPath, moduleKeysPath, startAgent, type Agent } from "@mesh/agent";
import {
  DELIVERY_KEY,
  MODULE_BUS_LIMITS,
  MODULE_CREDENTIALS_BUCKET,
  readDelivery,
  startController,
  type Controller,
  type Delivery,
} from "@mesh/controller";
import { startNats, type NatsServer, until } from "@mesh/testkit";
import { PermissionViolationError, type NatsConnection } from "@nats-io/transport-node";

const FAST = {
  reportEveryMs: 300,
  retryMs: 200,
  restartFirstMs: 50,
  restartMaxMs: 400,
  stopGraceMs: 2_000,
};

/** A module program that records its environment, then keeps running. */
const STAY = `import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("MESH_")));
writeFileSync(join(dirname(process.env.MESH_CONTROL), "env.json"), JSON.stringify({ pid: process.pid, env }));
setInterval(() => {}, 1000);
`;

const manifest = (name: string, extra: object): object => ({
  name,
  run: { command: "node", args: ["../stay.mjs"] },
  ...extra,
});

const NOTES = manifest("notes", { emits: ["note.created"], seats: ["notebook"] });
const LISTENER = manifest("listener", { subscribes: ["notebook.note.created"] });

function fleetYaml(modules: readonly string[]): string {
  const lines = ["nodes:", "  n1: {}", "modules:"];
  for (const m of modules) lines.push(`  ${m}: { manifest: ./${m}/module.json, node: n1 }`);
  return `${lines.join("\n")}\n`;
}

function recording(): BusLogger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    info: (m) => lines.push(`info: ${m}`),
    warn: (m) => lines.push(`warn: ${m}`),
    error: (m) => lines.push(`error: ${m}`),
  };
}

interface Recorded {
  readonly pid: number;
  readonly env: Record<string, string>;
}

void describe("each module gets its own bus and ledger credentials", { timeout: 240_000 }, () => {
  let authority: BusAuthority;
  let nats: NatsServer;
  let dir: string;
  let controller: Controller | undefined;
  let agent: Agent | undefined;
  let observer: NatsConnection;
  const controllerLog = recording();
  const agentLog = recording();
  const reports: string[] = [];
  const opened: NatsConnection[] = [];
  const fleetFile = (): string => join(dir, "mesh.yaml");
  const agentState = (): string => join(dir, "agent");

  const recorded = async (module: string, check: (r: Recorded) => boolean): Promise<Recorded> =>
    until(`${module}'s recorded environment`, async () => {
      const r = JSON.parse(
        await readFile(join(agentState(), "modules", module, "home", "env.json"), "utf8"),
      ) as Recorded;
      return check(r) ? r : undefined;
    });
  const withBus = (r: Recorded): boolean => r.env["MESH_BUS_CREDS"] !== undefined;
  const delivery = async (): Promise<Delivery> => {
    const bucket = await openState<unknown>(observer, nodeDeliveriesBucket("n1"), { create: false });
    const head = await bucket.get(DELIVERY_KEY);
    assert.ok(head);
    const d = (await readDelivery(head, (key) => bucket.get(key))).delivery;
    assert.ok(d, "every part the head names is there");
    return d;
  };
  const startTheController = async (): Promise<Controller> =>
    startController({
      stateDir: join(dir, "controller"),
      fleetFile: fleetFile(),
      servers: [nats.url],
      authority,
      logger: controllerLog,
      watch: false,
    });
  const connectWith = async (creds: Uint8Array | string, options: { inboxPrefix?: string } = {}) => {
    const nc = await connectBus({
      servers: nats.url,
      creds: typeof creds === "string" ? new TextEncoder().encode(creds) : creds,
      name: "test",
      ...options,
    });
    opened.push(nc);
    return nc;
  };
  const busKeyOf = async (module: string): Promise<string> =>
    (
      JSON.parse(await readFile(moduleKeysPath(agentState(), module), "utf8")) as {
        bus: { publicKey: string };
      }
    ).bus.publicKey;

  before(async () => {
    authority = await createAuthority();
    nats = await startNats({ config: authority.serverConfig() });
    dir = await mkdtemp(join(tmpdir(), "mesh-module-credentials-"));
    await writeFile(join(dir, "stay.mjs"), STAY);
    for (const [name, m] of [
      ["notes", NOTES],
      ["listener", LISTENER],
    ] as const) {
      await mkdir(join(dir, name));
      await writeFile(join(dir, name, "module.json"), JSON.stringify(m, null, 2));
    }
    await writeFile(fleetFile(), fleetYaml(["notes", "listener"]));
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "observer",
      publicKey: keys.publicKey,
      permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
    });
    observer = await connectBus({ servers: nats.url, creds: credsFor(jwt, keys.seed), name: "observer" });
    observer.subscribe(allReportsSubject(), { callback: (_e, msg) => void reports.push(msg.string()) });
    controller = await startTheController();
    agent = await startAgent({
      node: "n1",
      stateDir: agentState(),
      joinToken: await controller.joinToken("n1"),
      logger: agentLog,
      timings: FAST,
    });
  });

  after(async () => {
    await agent?.stop();
    await controller?.stop();
    // Some of them lost their credential moments ago and are still trying to reconnect.
    await Promise.all(opened.map((nc) => closeBus(nc)));
    await closeBus(observer);
    await nats.stop();
    if (process.env["MESH_TEST_LOG"]) console.log([...controllerLog.lines, ...agentLog.lines].join("\n"));
    await rm(dir, { recursive: true, force: true });
  });

  void it("starts a module once, with its creds file (0600) and the contract's environment, after its credential is issued", async () => {
    const notes = await recorded("notes", withBus);
    const creds = moduleCredsPath(agentState(), "notes");
    assert.equal((await stat(creds)).mode & 0o777, 0o600);
    assert.equal(notes.env["MESH_BUS_CREDS"], creds);
    assert.equal(notes.env["MESH_BUS_SERVERS"], nats.url);
    // The manifest as applied with the fleet, delivered and kept by the agent for the module.
    assert.equal(notes.env["MESH_MANIFEST"], join(agentState(), "modules", "notes", "module.json"));
    assert.equal(JSON.parse(await readFile(notes.env["MESH_MANIFEST"] ?? "", "utf8")).name, "notes");
    assert.equal(notes.env["MESH_SEATS"], "notebook");
    assert.equal(notes.env["MESH_MODULE"], "notes");
    assert.equal(notes.env["MESH_BUS_USER"], await busKeyOf("notes"));
    // It waited for its credential and started once, with it: never first without, then again.
    assert.ok(agentLog.lines.includes("info: notes waits for its bus credential before it starts"));
    assert.ok(!agentLog.lines.some((l) => l.startsWith("info: restarting notes")), agentLog.lines.join("\n"));
    assert.equal(agentLog.lines.filter((l) => /^info: notes started \(pid/.test(l)).length, 1);
    const listener = await recorded("listener", withBus);
    assert.equal(listener.env["MESH_SEATS"], "");
    const d = await delivery();
    assert.deepEqual(Object.keys(d.credentials ?? {}).sort(), ["listener", "notes"]);
    assert.deepEqual(d.replaceKeys, {});
  });

  void it("lets the module publish its declared events and the server refuses anything else", async () => {
    const notes = await recorded("notes", withBus);
    const nc = await connectWith(await readFile(notes.env["MESH_BUS_CREDS"] ?? "", "utf8"));
    const errors: Error[] = [];
    void (async () => {
      for await (const s of nc.status()) if (s.type === "error") errors.push(s.error);
    })();
    const seen: string[] = [];
    const watch = observer.subscribe("mesh.>", { callback: (_e, msg) => void seen.push(msg.subject) });
    await observer.flush();
    nc.publish("mesh.events.notes.note.created", "{}");
    nc.publish("mesh.seats.notebook.note.created", "{}");
    nc.publish("mesh.events.notes.note.deleted", "{}");
    nc.publish("mesh.events.listener.note.created", "{}");
    nc.publish("mesh.events.notes.after", "{}");
    await nc.flush();
    await until("the server's refusals", () => (errors.length >= 3 ? true : undefined));
    await observer.flush();
    watch.unsubscribe();
    assert.deepEqual(
      seen.filter((s) => s.startsWith("mesh.events.") || s.startsWith("mesh.seats.")),
      ["mesh.events.notes.note.created", "mesh.seats.notebook.note.created"],
    );
    assert.deepEqual(
      errors
        .map((e) => (e instanceof PermissionViolationError ? `${e.operation} ${e.subject}` : e.message))
        .sort(),
      [
        "publish mesh.events.listener.note.created",
        "publish mesh.events.notes.after",
        "publish mesh.events.notes.note.deleted",
      ],
    );
    // Nothing of JetStream, nothing of the control plane.
    const sub = nc.subscribe("mesh.report.>");
    assert.ok((await sub.closed) instanceof PermissionViolationError);

    const listener = await recorded("listener", withBus);
    const lc = await connectWith(await readFile(listener.env["MESH_BUS_CREDS"] ?? "", "utf8"));
    const heard: string[] = [];
    lc.subscribe("mesh.seats.notebook.note.created", {
      callback: (_e, msg) => void heard.push(msg.string()),
    });
    const other = lc.subscribe("mesh.events.notes.>");
    assert.ok((await other.closed) instanceof PermissionViolationError);
    await lc.flush();
    nc.publish("mesh.seats.notebook.note.created", '{"n":1}');
    await until("the seat's event", () => (heard.length > 0 ? true : undefined));
    assert.deepEqual(heard, ['{"n":1}']);
  });

  void it("holds a module's connection to its 1,000 subscriptions: the server refuses the next one", async () => {
    assert.equal(MODULE_BUS_LIMITS.subs, 1_000);
    const listener = await recorded("listener", withBus);
    const lc = await connectWith(await readFile(listener.env["MESH_BUS_CREDS"] ?? "", "utf8"));
    const errors: string[] = [];
    void (async () => {
      for await (const s of lc.status()) if (s.type === "error") errors.push(s.error.message);
    })();
    for (let i = 0; i < MODULE_BUS_LIMITS.subs; i++) lc.subscribe("mesh.seats.notebook.note.created");
    await lc.flush();
    assert.deepEqual(errors, [], "every subscription up to the limit is taken");
    lc.subscribe("mesh.seats.notebook.note.created");
    await lc.flush();
    await until("the server's refusal", () => errors.length > 0);
    assert.match(errors[0] ?? "", /maximum subscriptions exceeded/i);
  });

  void it("writes the ledgers file (0600) whose credential appends to the module's own ledger only", async () => {
    const path = ledgersPath(agentState());
    const ledgers = await until("both ledger credentials", async () => {
      const map = JSON.parse(await readFile(path, "utf8")) as Record<string, { jwt: string; seed: string }>;
      return map["notes"] !== undefined && map["listener"] !== undefined ? map : undefined;
    });
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    const notes = ledgers["notes"];
    assert.ok(notes);
    const nc = await connectWith(credsFor(notes.jwt, notes.seed), {
      inboxPrefix: ledgerInboxPrefix("notes"),
    });
    const ledger = new ModuleLedger(nc, "notes");
    const seq = await ledger.append("action", {
      action: "created",
      who: "test",
      at: new Date().toISOString(),
    });
    assert.ok(seq >= 1);
    const errors: Error[] = [];
    void (async () => {
      for await (const s of nc.status()) if (s.type === "error") errors.push(s.error);
    })();
    nc.publish(ledgerSubject("listener", "action"), "{}");
    nc.publish("mesh.events.notes.note.created", "{}");
    await nc.flush();
    await until("the server's refusals", () => (errors.length >= 2 ? true : undefined));
    assert.ok(errors.every((e) => e instanceof PermissionViolationError));
  });

  void it("never lets a seed leave the node: not in a report, a delivery, the controller's state or a log", async () => {
    const seeds: string[] = [];
    for (const module of ["notes", "listener"]) {
      const keys = JSON.parse(await readFile(moduleKeysPath(agentState(), module), "utf8")) as Record<
        string,
        { seed?: string }
      >;
      for (const pair of [keys["bus"], keys["ledger"]]) if (pair?.seed) seeds.push(pair.seed);
    }
    assert.equal(seeds.length, 4);
    await until("a report with module keys", () =>
      reports.some((r) => r.includes('"moduleKeys":{"listener"')) ? true : undefined,
    );
    const issued = await openState<unknown>(observer, MODULE_CREDENTIALS_BUCKET, { create: false });
    const stored: unknown[] = [];
    for (const key of await issued.keys()) stored.push(await issued.get(key));
    const places = {
      reports: reports.join("\n"),
      delivery: JSON.stringify(await delivery()),
      "the controller's bucket": JSON.stringify(stored),
      "the controller's log": controllerLog.lines.join("\n"),
      "the agent's log": agentLog.lines.join("\n"),
    };
    assert.ok(stored.length >= 2);
    for (const [where, text] of Object.entries(places)) {
      for (const seed of seeds) assert.equal(text.includes(seed), false, `a seed in ${where}`);
      assert.equal(/\bSU[A-Z2-7]{50,}/.test(text), false, `something like a seed in ${where}`);
    }
  });

  void it("a restarted controller issues nothing again and revokes nothing", async () => {
    const before = await delivery();
    const revocations = Object.keys(authority.revocations).length;
    const credsTime = (await stat(moduleCredsPath(agentState(), "notes"))).mtimeMs;
    const pid = (await recorded("notes", withBus)).pid;
    const issued = (): number => controllerLog.lines.filter((l) => l.includes("issued module")).length;
    const issuedBefore = issued();
    await controller?.stop();
    controller = await startTheController();
    // A report reaches the new controller, and its keys are the ones it already issued for.
    await until("a report to the restarted controller", () =>
      controller?.status().nodes.find((n) => n.name === "n1")?.lastReportAt ? true : undefined,
    );
    await controller.reload();
    const after = await delivery();
    assert.equal(after.generation, before.generation);
    assert.deepEqual(after.credentials, before.credentials);
    assert.equal(Object.keys(authority.revocations).length, revocations);
    assert.equal(issued(), issuedBefore, "nothing issued again");
    assert.equal((await stat(moduleCredsPath(agentState(), "notes"))).mtimeMs, credsTime);
    assert.equal((await recorded("notes", withBus)).pid, pid, "the module was not restarted");
  });

  void it("a fleet change to a module's permissions gives it new keys, and its old credential stops working", async () => {
    const oldKey = await busKeyOf("notes");
    const oldCreds = await readFile(moduleCredsPath(agentState(), "notes"), "utf8");
    await writeFile(
      join(dir, "notes", "module.json"),
      JSON.stringify(manifest("notes", { emits: ["note.created", "note.deleted"], seats: ["notebook"] })),
    );
    await controller?.reload();
    const notes = await recorded("notes", (r) => withBus(r) && r.env["MESH_BUS_USER"] !== oldKey);
    assert.equal(notes.env["MESH_BUS_USER"], await busKeyOf("notes"));
    await until("the old key revoked", () =>
      authority.revocations[oldKey] !== undefined ? true : undefined,
    );
    await assert.rejects(connectWith(oldCreds), BusCredentialsRefusedError);

    const nc = await connectWith(await readFile(moduleCredsPath(agentState(), "notes"), "utf8"));
    const seen: string[] = [];
    const watch = observer.subscribe("mesh.events.notes.>", {
      callback: (_e, msg) => void seen.push(msg.subject),
    });
    await observer.flush();
    nc.publish("mesh.events.notes.note.deleted", "{}");
    await nc.flush();
    await until("the newly declared event", () => (seen.length > 0 ? true : undefined));
    watch.unsubscribe();
    assert.deepEqual((await delivery()).replaceKeys, {});
  });

  void it("a module removed from the fleet loses its keys on the node, and its old credential no longer connects", async () => {
    const oldCreds = await readFile(moduleCredsPath(agentState(), "listener"), "utf8");
    const oldKey = await busKeyOf("listener");
    const ledgerKey = (
      JSON.parse(await readFile(moduleKeysPath(agentState(), "listener"), "utf8")) as {
        ledger: { publicKey: string };
      }
    ).ledger.publicKey;
    await writeFile(fleetFile(), fleetYaml(["notes"]));
    await controller?.reload();
    assert.ok(authority.revocations[oldKey] !== undefined);
    assert.ok(authority.revocations[ledgerKey] !== undefined);
    await assert.rejects(connectWith(oldCreds), BusCredentialsRefusedError);
    await until("the listener's keys removed from the node", async () =>
      (await readFile(moduleKeysPath(agentState(), "listener")).catch(() => undefined)) === undefined
        ? true
        : undefined,
    );
    await until("the listener's ledger credential gone from the ledgers file", async () => {
      const ledgers = JSON.parse(await readFile(ledgersPath(agentState()), "utf8")) as Record<
        string,
        unknown
      >;
      return Object.keys(ledgers).join() === "notes" ? true : undefined;
    });
    assert.deepEqual(Object.keys((await delivery()).credentials ?? {}), ["notes"]);
  });
});
