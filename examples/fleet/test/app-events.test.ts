// The example apps' events, run as the agent runs them, against a real nats-server under the
// mesh's authentication (each app on a credential compiled from its own manifest) and a private
// Postgres for the notes: notes emits `note.created` for each note it stores, counter hears them.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { createAuthority, credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { compilePermissions, loadManifest } from "@mesh/manifest";
import { startNats, startPostgres, type NatsServer, type PostgresServer } from "@mesh/testkit";
import { count, killApps, startApp, waitForOutput, type RunningApp } from "./run-app.ts";

const MANIFESTS = {
  notes: fileURLToPath(new URL("../notes/module.json", import.meta.url)),
  counter: fileURLToPath(new URL("../counter/module.json", import.meta.url)),
};
type App = keyof typeof MANIFESTS;
const LOGIN = "notes_events";
const WAIT_MS = 90_000;

let authority: BusAuthority;
let nats: NatsServer;
let postgres: PostgresServer;
let dir: string;

before(async () => {
  authority = await createAuthority();
  [nats, postgres] = await Promise.all([startNats({ config: authority.serverConfig() }), startPostgres()]);
  dir = await mkdtemp(join(tmpdir(), "mesh-app-events-"));

  // The notes app's database, made by hand, and its credential file as the agent writes it.
  const password = randomBytes(24).toString("base64url");
  await postgres.query(`CREATE ROLE ${LOGIN} LOGIN PASSWORD '${password}'`);
  await postgres.query(`CREATE DATABASE ${LOGIN} OWNER ${LOGIN}`);
  const credentials = join(dir, "notes-credentials");
  await mkdir(credentials, { mode: 0o700 });
  await writeFile(join(credentials, "postgres-database.pw"), password, { mode: 0o600 });
  await writeFile(
    join(credentials, "postgres-database.json"),
    JSON.stringify({
      login: LOGIN,
      passwordFile: join(credentials, "postgres-database.pw"),
      url: `postgresql://${LOGIN}@127.0.0.1:${postgres.port}/${LOGIN}`,
      endpoint: { host: "127.0.0.1", port: postgres.port, path: `/${LOGIN}` },
      values: {},
    }),
    { mode: 0o600 },
  );
  await mkdir(join(dir, "counter-credentials"), { mode: 0o700 });
});

after(async () => {
  killApps();
  await Promise.all([nats?.stop(), postgres?.stop()]);
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The variables the agent sets for `app` once the controller has issued its bus credential. */
async function busEnv(app: App): Promise<Record<string, string>> {
  const manifest = await loadManifest(MANIFESTS[app]);
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: app,
    publicKey: keys.publicKey,
    permissions: compilePermissions(manifest, app, []),
  });
  const credsFile = join(dir, `${app}.creds`);
  await writeFile(credsFile, credsFor(jwt, keys.seed), { mode: 0o600 });
  return {
    MESH_BUS_SERVERS: nats.url,
    MESH_BUS_CREDS: credsFile,
    MESH_MANIFEST: resolve(MANIFESTS[app]),
    MESH_SEATS: "",
  };
}

function start(app: App, env: Record<string, string>): RunningApp {
  return startApp(dirname(MANIFESTS[app]), {
    MESH_BUS_CREDS: "",
    MESH_MODULE: app,
    MESH_CREDENTIALS: join(dir, `${app}-credentials`),
    EXAMPLE_INTERVAL_MS: "300",
    ...env,
  });
}

const waitFor = (app: RunningApp, pattern: RegExp): Promise<RegExpExecArray> =>
  waitForOutput(app, pattern, WAIT_MS);

describe("the example apps' events", () => {
  it("with a bus credential, notes emits note.created for each note it stores and counter counts them", async () => {
    // Counter has no Redis credential here: it waits for one, and hears the notes meanwhile.
    const counter = start("counter", await busEnv("counter"));
    await waitFor(counter, /counter: events are on/);
    const notes = start("notes", await busEnv("notes"));
    await waitFor(notes, /notes: events are on/);

    const heard = await waitFor(counter, /counter: heard notes\.note\.created #2 (\{.*\})/);
    const body = JSON.parse(heard[1] ?? "") as { id: number; at: string };
    assert.ok(Number.isInteger(body.id) && body.id >= 1, heard[0]);
    assert.ok(!Number.isNaN(Date.parse(body.at)), heard[0]);
    assert.match(notes.output, new RegExp(`notes: stored note #${body.id},`));
    assert.match(counter.output, /waiting for my credential/);

    notes.child.kill("SIGTERM");
    counter.child.kill("SIGTERM");
    assert.equal(await notes.exited, 0, notes.output);
    assert.equal(await counter.exited, 0, counter.output);
    assert.doesNotMatch(notes.output + counter.output, /events are off|error/);
  });

  it("without MESH_BUS_CREDS, notes says once that events are off and stores notes as before", async () => {
    const notes = start("notes", {});
    await waitFor(notes, /stored note #\d+[^\n]*\n(?:.*\n)*?.*stored note #\d+/);
    notes.child.kill("SIGTERM");
    assert.equal(await notes.exited, 0, notes.output);
    assert.equal(count(notes.output, /notes: events are off: MESH_BUS_CREDS is not set/), 1, notes.output);
  });
});
