// The audit logger run as the agent runs it (its manifest's `run`, from its directory, with the
// MESH_* variables) against a real nats-server under the mesh's authentication, with a credential
// compiled from its own manifest. Other modules emit through the SDK; the file must hold each event.
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createAuthority, credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { compilePermissions, loadManifest, type Manifest } from "@mesh/manifest";
import { connectModuleBus, type ModuleBus } from "@mesh/sdk";
import { startNats, type NatsServer, quietLogger } from "@mesh/testkit";
import { killApps, startApp, type RunningApp } from "./run-app.ts";

const here = (path: string): string => fileURLToPath(new URL(path, import.meta.url));
const MANIFESTS = {
  "audit-logger": here("../audit-logger/module.json"),
  notes: here("../notes/module.json"),
  postgres: here("../../../providers/postgres/module.json"),
};
type Module = keyof typeof MANIFESTS;
const WAIT_MS = 60_000;

let authority: BusAuthority;
let server: NatsServer;
let dir: string;
const buses: ModuleBus[] = [];

before(async () => {
  authority = await createAuthority();
  server = await startNats({ config: authority.serverConfig() });
  dir = await mkdtemp(join(tmpdir(), "mesh-audit-logger-"));
});

after(async () => {
  killApps();
  await Promise.all(buses.map((bus) => bus.close()));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The creds file's text the controller would issue `module`, compiled from its manifest. */
async function credentialOf(
  module: Module,
): Promise<{ creds: Uint8Array; manifest: Manifest; seed: string }> {
  const manifest = await loadManifest(MANIFESTS[module]);
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: module,
    publicKey: keys.publicKey,
    permissions: compilePermissions(manifest, module, []),
  });
  return { creds: credsFor(jwt, keys.seed), manifest, seed: keys.seed };
}

async function emitterOf(module: Module): Promise<ModuleBus> {
  const { creds } = await credentialOf(module);
  const bus = await connectModuleBus({
    servers: server.url,
    creds,
    module,
    manifest: MANIFESTS[module],
    seats: [],
    logger: quietLogger,
  });
  buses.push(bus);
  return bus;
}

const start = (env: Record<string, string>): RunningApp => startApp(dirname(MANIFESTS["audit-logger"]), env);

async function waitUntil(
  check: () => Promise<boolean> | boolean,
  what: string,
  app: RunningApp,
): Promise<void> {
  const deadline = Date.now() + WAIT_MS;
  while (!(await check())) {
    if (app.child.exitCode !== null) assert.fail(`the audit logger exited before ${what}:\n${app.output}`);
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}:\n${app.output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function lines(path: string): Promise<Record<string, unknown>[]> {
  const text = await readFile(path, "utf8").catch(() => "");
  return text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe("the audit logger", () => {
  it("writes every event it hears as one JSON line in its home, says each, and exits 0 on SIGTERM", async () => {
    const { creds, manifest, seed } = await credentialOf("audit-logger");
    assert.deepEqual(
      compilePermissions(manifest, "audit-logger", []).pub.allow,
      [],
      "it may publish nothing",
    );
    const credsFile = join(dir, "audit-logger.creds");
    await writeFile(credsFile, creds, { mode: 0o600 });
    const stateDir = join(dir, "state");
    // Its home, as the agent gives it: the module's own writable directory under the node's state.
    const home = join(stateDir, "modules", "audit-logger", "home");
    const app = start({
      HOME: home,
      MESH_BUS_SERVERS: server.url,
      MESH_BUS_CREDS: credsFile,
      MESH_MANIFEST: resolve(MANIFESTS["audit-logger"]),
      MESH_SEATS: "",
      MESH_MODULE: "audit-logger",
      MESH_STATE_DIR: stateDir,
    });
    await waitUntil(() => app.output.includes("listening to every event"), "it listens", app);

    const notes = await emitterOf("notes");
    const postgres = await emitterOf("postgres");
    // Each flushed before the next publisher speaks, so the order heard is the order said.
    notes.emit("note.created", { id: 1 });
    await notes.flush();
    postgres.emit("provisioner.failing", { consumer: "notes_postgres", class: "unreachable" });
    await postgres.flush();
    notes.emit("note.created", { id: 2 });
    await notes.flush();

    const file = join(home, "events.jsonl");
    await waitUntil(async () => (await lines(file)).length === 3, "three lines in the file", app);
    const written = await lines(file);
    assert.deepEqual(
      written.map(({ subject, source, via, event, body }) => ({ subject, source, via, event, body })),
      [
        {
          subject: "mesh.events.notes.note.created",
          source: "notes",
          via: "module",
          event: "note.created",
          body: { id: 1 },
        },
        {
          subject: "mesh.events.postgres.provisioner.failing",
          source: "postgres",
          via: "module",
          event: "provisioner.failing",
          body: { consumer: "notes_postgres", class: "unreachable" },
        },
        {
          subject: "mesh.events.notes.note.created",
          source: "notes",
          via: "module",
          event: "note.created",
          body: { id: 2 },
        },
      ],
    );
    for (const line of written)
      assert.ok(!Number.isNaN(Date.parse(String(line["at"]))), JSON.stringify(line));
    assert.match(app.output, /audit-logger: notes\.note\.created \(module\) \{"id":1\}/);
    assert.match(app.output, /audit-logger: postgres\.provisioner\.failing \(module\)/);

    app.child.kill("SIGTERM");
    assert.equal(await app.exited, 0, app.output);
    assert.match(app.output, /audit-logger: stopping \(SIGTERM\)/);
    assert.match(app.output, /wrote 3 events/);
    assert.ok(!app.output.includes(seed), "its seed is never printed");
  });

  it("started without the bus variables, it names the first one missing and exits 1", async () => {
    const env: Record<string, string> = { AUDIT_LOG: join(dir, "never.jsonl") };
    for (const key of Object.keys(process.env)) if (key.startsWith("MESH_")) env[key] = "";
    const app = start(env);
    assert.equal(await app.exited, 1, app.output);
    assert.match(app.output, /MESH_BUS_SERVERS is not set: the mesh agent sets it/);
  });
});
