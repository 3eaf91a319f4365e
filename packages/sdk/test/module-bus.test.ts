// Module events against a real nats-server under the mesh's decentralized authentication: each
// test module connects with a credential compiled from its own manifest, as the controller issues
// it, so what the server allows and refuses is what a running mesh allows and refuses.
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { closeBus, connectBus, createAuthority, credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { compilePermissions, InvalidEventNameError, loadManifest } from "@mesh/manifest";
import {
  connectModuleBus,
  EventBodyError,
  EventNotDeclaredError,
  EventRefusedError,
  MAX_EVENT_BYTES,
  ModuleBusCredentialsError,
  ModuleBusNotConfiguredError,
  SubscriptionNotDeclaredError,
  type ModuleBus,
  type ModuleBusOptions,
  type ModuleEvent,
} from "@mesh/sdk";
import { recordingLogger, startNats, type NatsServer, until } from "@mesh/testkit";
import type { NatsConnection } from "@nats-io/transport-node";

const MANIFESTS = {
  photos: { name: "photos", emits: ["photo.uploaded"], seats: ["gallery"] },
  viewer: { name: "viewer", subscribes: ["photos.photo.uploaded", "gallery.**"] },
  auditor: { name: "auditor", subscribes: ["**"] },
  store: {
    name: "store",
    provides: { "blob-store": { receives: "/run/mesh/blob-store.json" } },
    emits: ["blob.stored"],
  },
} as const;
type TestModule = keyof typeof MANIFESTS;
const FLEET_SEATS: ReadonlySet<string> = new Set(["gallery"]);
const HELD: Record<TestModule, string[]> = { photos: ["gallery"], viewer: [], auditor: [], store: [] };

let authority: BusAuthority;
let server: NatsServer;
let dir: string;
const opened: ModuleBus[] = [];
const raw: NatsConnection[] = [];

function manifestPath(module: TestModule): string {
  return join(dir, module, "module.json");
}

before(async () => {
  authority = await createAuthority();
  server = await startNats({ config: authority.serverConfig() });
  dir = await mkdtemp(join(tmpdir(), "mesh-module-bus-"));
  for (const [module, manifest] of Object.entries(MANIFESTS)) {
    await mkdir(join(dir, module));
    await writeFile(manifestPath(module as TestModule), JSON.stringify(manifest, null, 2));
  }
});

after(async () => {
  await Promise.all(opened.map((bus) => bus.close()));
  await Promise.all(raw.map((nc) => closeBus(nc)));
  await server?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The creds text the controller would issue `module`: permissions compiled from its manifest. */
async function credentialOf(module: TestModule): Promise<Uint8Array> {
  const manifest = await loadManifest(manifestPath(module));
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: module,
    publicKey: keys.publicKey,
    permissions: compilePermissions(manifest, module, HELD[module], FLEET_SEATS),
  });
  return credsFor(jwt, keys.seed);
}

async function open(
  module: TestModule,
  options: Partial<ModuleBusOptions> = {},
): Promise<{ bus: ModuleBus; log: ReturnType<typeof recordingLogger> }> {
  const log = recordingLogger();
  const bus = await connectModuleBus({
    servers: server.url,
    creds: await credentialOf(module),
    module,
    manifest: manifestPath(module),
    seats: HELD[module],
    fleetSeats: FLEET_SEATS,
    logger: log,
    ...options,
  });
  opened.push(bus);
  return { bus, log };
}

/** A connection allowed everything, to publish what no module could. */
async function broadConnection(): Promise<NatsConnection> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: "broad",
    publicKey: keys.publicKey,
    permissions: { pub: { allow: [">"] }, sub: { allow: [">"] } },
  });
  const nc = await connectBus({ servers: server.url, creds: credsFor(jwt, keys.seed), name: "broad" });
  raw.push(nc);
  return nc;
}

function collect(bus: ModuleBus, pattern: string): ModuleEvent[] {
  const seen: ModuleEvent[] = [];
  bus.on(pattern, (event) => {
    seen.push(event);
  });
  return seen;
}

const errors = (log: { lines: string[] }): string[] => log.lines.filter((l) => l.startsWith("error: "));

describe("a module's events", () => {
  it("an emitted event reaches a subscriber with its subject, source, event name and body", async () => {
    const { bus: photos } = await open("photos");
    const { bus: viewer, log } = await open("viewer");
    const seen = collect(viewer, "photos.photo.uploaded");
    await viewer.flush();

    photos.emit("photo.uploaded", { id: 7, title: "harbour" });
    await photos.flush();
    await until("the viewer to hear the event", () => seen.length === 1);

    assert.deepEqual(seen[0], {
      subject: "mesh.events.photos.photo.uploaded",
      source: "photos",
      via: "module",
      event: "photo.uploaded",
      body: { id: 7, title: "harbour" },
    });
    assert.equal(photos.stats().emitted, 1);
    assert.equal(viewer.stats().delivered, 1);
    assert.deepEqual(errors(log), []);
  });

  it("a seat holder's event also goes out in the seat's name, and a seat subscriber hears it there", async () => {
    const { bus: photos } = await open("photos");
    const { bus: viewer } = await open("viewer");
    const bySeat = collect(viewer, "gallery.**");
    await viewer.flush();

    photos.emit("photo.uploaded", { id: 8 });
    await photos.flush();
    await until("the seat's subscriber to hear it", () => bySeat.length === 1);
    assert.deepEqual(bySeat[0], {
      subject: "mesh.seats.gallery.photo.uploaded",
      source: "gallery",
      via: "seat",
      event: "photo.uploaded",
      body: { id: 8 },
    });
  });

  it("a subscriber that does not know the fleet's seats listens on both namespaces, and the one its credential refuses is not worth a word", async () => {
    const { bus: photos } = await open("photos");
    const { bus: viewer, log } = await open("viewer", { fleetSeats: undefined });
    const seen = collect(viewer, "photos.photo.uploaded");
    await viewer.flush();

    photos.emit("photo.uploaded", { id: 9 });
    await photos.flush();
    await until("the viewer to hear it", () => seen.length === 1);
    assert.equal(seen[0]?.source, "photos");
    await viewer.flush();
    assert.deepEqual(errors(log), []);
  });

  it("a module that provides an interface may announce the standings events, and one that provides none may not", async () => {
    const { bus: store } = await open("store");
    const { bus: auditor } = await open("auditor");
    const { bus: photos } = await open("photos");
    const seen = collect(auditor, "**");
    await auditor.flush();

    store.emit("provisioner.failing", { consumer: "notes_postgres", class: "unreachable" });
    await store.flush();
    await until("the auditor to hear the standing", () => seen.length === 1);
    assert.equal(seen[0]?.subject, "mesh.events.store.provisioner.failing");
    assert.throws(() => photos.emit("provisioner.failing", {}), EventNotDeclaredError);
  });
});

describe("what a module may not say", () => {
  it("an undeclared event is refused before it reaches the bus, naming the manifest and the fix", async () => {
    const { bus: photos } = await open("photos");
    assert.throws(
      () => photos.emit("photo.deleted", { id: 1 }),
      (err: unknown) =>
        err instanceof EventNotDeclaredError &&
        err.file === manifestPath("photos") &&
        err.message.includes(manifestPath("photos")) &&
        err.message.includes('add "photo.deleted" to "emits"'),
    );
    assert.throws(() => photos.emit("Photo.Deleted", {}), InvalidEventNameError);
    assert.equal(photos.stats().emitted, 0);
  });

  it("a subscription the manifest does not declare is refused, naming the manifest", async () => {
    const { bus: viewer } = await open("viewer");
    assert.throws(
      () => viewer.on("photos.**", () => {}),
      (err: unknown) =>
        err instanceof SubscriptionNotDeclaredError &&
        err.message.includes(manifestPath("viewer")) &&
        err.message.includes('"subscribes"'),
    );
    assert.throws(() => viewer.on("photos.*", () => {}), InvalidEventNameError);
  });

  it("with the local check off, the server refuses an undeclared event by itself; flush says so in words naming the manifest, once", async () => {
    const { bus: photos, log } = await open("photos", { checkLocally: false });
    const { bus: auditor } = await open("auditor");
    const seen = collect(auditor, "**");
    await auditor.flush();

    for (let i = 0; i < 3; i++) photos.emit("photo.deleted", { id: i });
    photos.emit("photo.uploaded", { id: 99 });
    await assert.rejects(
      photos.flush(),
      (err: unknown) =>
        err instanceof EventRefusedError &&
        err.event === "photo.deleted" &&
        err.message.includes('the bus refused photos\'s event "photo.deleted"') &&
        err.message.includes(manifestPath("photos")) &&
        err.message.includes('"emits"'),
    );
    await photos.flush(); // the refusal was reported; nothing new since

    // A publisher's messages arrive in order: the declared one came through, the refused ones never will.
    await until("the declared event (module and seat subjects)", () => seen.length === 2);
    assert.deepEqual(
      seen.map((e) => `${e.subject} ${JSON.stringify(e.body)}`),
      ['mesh.events.photos.photo.uploaded {"id":99}', 'mesh.seats.gallery.photo.uploaded {"id":99}'],
    );
    assert.ok(photos.stats().denied >= 3, JSON.stringify(photos.stats()));
    const said = errors(log).filter((l) => l.includes("mesh.events.photos.photo.deleted"));
    assert.equal(said.length, 1, log.lines.join("\n"));
  });

  it("a body that is not JSON-serialisable or too large is refused with a clear error", async () => {
    const { bus: photos } = await open("photos", { maxEventBytes: 1024 });
    const circular: Record<string, unknown> = {};
    circular["self"] = circular;
    assert.throws(() => photos.emit("photo.uploaded", undefined), EventBodyError);
    assert.throws(() => photos.emit("photo.uploaded", circular), /is not JSON-serialisable/);
    assert.throws(() => photos.emit("photo.uploaded", { n: 1n }), /is not JSON-serialisable/);
    assert.throws(
      () => photos.emit("photo.uploaded", { text: "x".repeat(1024) }),
      /is 1035 bytes of JSON, more than the 1024 an event may hold/,
    );
    assert.equal(photos.stats().emitted, 0);
  });
});

describe("what a module hears", () => {
  it("malformed messages (not JSON, too large, wrong subject) are refused, counted and said once per kind and source, and good events after them arrive", async () => {
    const { bus: auditor, log } = await open("auditor");
    const seen = collect(auditor, "**");
    await auditor.flush();
    const nc = await broadConnection();

    nc.publish("mesh.events.photos.photo.uploaded", "not json {");
    nc.publish("mesh.events.photos.photo.uploaded", new Uint8Array([0xff, 0xfe]));
    nc.publish("mesh.events.photos.photo.uploaded", JSON.stringify("x".repeat(MAX_EVENT_BYTES)));
    nc.publish("mesh.events.Photos.photo.uploaded", "{}");
    nc.publish("mesh.events.photos", "{}");
    nc.publish("mesh.seats.gallery.photo.*x", "{}");
    nc.publish("mesh.events.photos.photo.uploaded", JSON.stringify({ id: 1 }));
    await nc.flush();

    await until("the good event", () => seen.length === 1);
    assert.deepEqual(seen[0]?.body, { id: 1 });
    assert.deepEqual(auditor.stats().refused, { notJson: 2, tooLarge: 1, wrongSubject: 3 });
    assert.equal(auditor.stats().delivered, 1);

    const said = errors(log);
    assert.equal(said.filter((l) => l.includes("is not JSON")).length, 1, said.join("\n"));
    assert.equal(said.filter((l) => l.includes("more than the 65536")).length, 1, said.join("\n"));
    assert.ok(
      said.some((l) => l.includes("mesh.events.Photos.photo.uploaded, which is not an event subject")),
    );
    for (const line of said) assert.match(line, /auditor refused /);
  });

  it("a handler that throws or rejects is counted and said, and the subscription goes on", async () => {
    const { bus: photos } = await open("photos");
    const { bus: auditor, log } = await open("auditor");
    const handled: number[] = [];
    auditor.on("photos.**", async (event) => {
      const { id } = event.body as { id: number };
      if (id === 1) throw new Error("the disk is full");
      await Promise.resolve();
      if (id === 2) throw new Error("still full");
      handled.push(id);
    });
    await auditor.flush();

    for (const id of [1, 2, 3]) photos.emit("photo.uploaded", { id });
    await photos.flush();
    await until("the third event to be handled", () => handled.length === 1);
    assert.deepEqual(handled, [3]);
    assert.equal(auditor.stats().handlerErrors, 2);
    assert.equal(auditor.stats().delivered, 3);
    assert.ok(
      errors(log).some((l) =>
        /handler for "photos\.\*\*" failed on photos\.photo\.uploaded: the disk is full/.test(l),
      ),
    );
  });

  it("a stopped subscription hears nothing more", async () => {
    const { bus: photos } = await open("photos");
    const { bus: auditor } = await open("auditor");
    const seen: ModuleEvent[] = [];
    const sub = auditor.on("photos.photo.uploaded", (e) => {
      seen.push(e);
    });
    const all = collect(auditor, "**");
    await auditor.flush();
    photos.emit("photo.uploaded", { id: 1 });
    await photos.flush();
    await until("the first event", () => seen.length === 1 && all.length === 2);
    await sub.stop();
    photos.emit("photo.uploaded", { id: 2 });
    await photos.flush();
    await until("the second event on the other subscription", () => all.length === 4);
    assert.equal(seen.length, 1);
  });
});

describe("connecting a module from its environment", () => {
  const variables = ["MESH_BUS_SERVERS", "MESH_BUS_CREDS", "MESH_MANIFEST", "MESH_SEATS", "MESH_MODULE"];

  async function environment(): Promise<Record<string, string>> {
    const credsFile = join(dir, "photos", "bus.creds");
    await writeFile(credsFile, await credentialOf("photos"), { mode: 0o600 });
    return {
      MESH_BUS_SERVERS: server.url,
      MESH_BUS_CREDS: credsFile,
      MESH_MANIFEST: manifestPath("photos"),
      MESH_SEATS: "gallery",
      MESH_MODULE: "photos",
    };
  }

  it("each missing variable is named, with what sets it", async () => {
    const env = await environment();
    for (const variable of variables) {
      const without = { ...env };
      delete without[variable];
      await assert.rejects(
        connectModuleBus({ env: without, logger: recordingLogger() }),
        (err: unknown) =>
          err instanceof ModuleBusNotConfiguredError &&
          err.variable === variable &&
          err.message.startsWith(`${variable} is not set: the mesh agent sets it`),
      );
    }
  });

  it("a credential file that is not there is named", async () => {
    const env = { ...(await environment()), MESH_BUS_CREDS: join(dir, "nowhere.creds") };
    await assert.rejects(
      connectModuleBus({ env, logger: recordingLogger() }),
      (err: unknown) =>
        err instanceof ModuleBusCredentialsError &&
        err.message.includes(`${join(dir, "nowhere.creds")} (MESH_BUS_CREDS) does not exist`),
    );
  });

  it("with every variable set as the agent sets them, a module emits in its own and its seat's name", async () => {
    const { bus: viewer } = await open("viewer");
    const seen = collect(viewer, "gallery.**");
    await viewer.flush();
    const log = recordingLogger();
    const photos = await connectModuleBus({ env: await environment(), logger: log, fleetSeats: FLEET_SEATS });
    opened.push(photos);
    assert.deepEqual([photos.module, photos.seats], ["photos", ["gallery"]]);
    photos.emit("photo.uploaded", { id: 3 });
    await photos.flush();
    await until("the seat event", () => seen.length === 1);
    assert.deepEqual(errors(log), []);
  });
});
