// The permission matrix, against a real nats-server: every example module (and two fixtures, one
// holding a seat and one following it) gets its own credential compiled from its manifest, and for
// every ordered pair of modules and every event, declared or not, the server allows or refuses the
// publish and the subscription exactly as the manifests say, and `explain` (what `mesh explain`
// prints) agrees with the server. Then: no module credential reaches a ledger or the control plane,
// and a replaced credential stops working without a server restart.
//
// How refusals are seen (nats.js v3 on nats-server 2.9), reliably and without waiting on a clock:
// - A refused publish: the server answers `-ERR 'Permissions Violation for Publish to "<subject>"'`
//   and keeps the connection; nats.js reports it on `nc.status()` as `{type: "error", error:
//   PermissionViolationError}` naming the subject. The server handles one connection's messages in
//   order, so after a batch of publishes we publish a sentinel subject no module may use: once its
//   refusal is reported, every refusal of the batch has been reported too.
// - A refused subscription: the same `-ERR` for "Subscription to"; nats.js closes that
//   subscription (`sub.isClosed()`, `sub.closed` resolves with the error). Same sentinel: once a
//   sentinel subscription is closed, every refusal of the batch has been processed.
// - Delivery: once a publisher's sentinel is refused, the server has routed every message it
//   allowed before it; a subscriber's `flush()` after that returns only after those messages
//   reached it. So the counts of what each subscriber received are exact, not "so far".
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { PermissionViolationError, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import {
  ACCOUNT_UPDATER_IDENTITY,
  accountUpdaterPermissions,
  BusCredentialsRefusedError,
  connectBus,
  createAuthority,
  credsFor,
  enrollSubject,
  inboxPrefix,
  ledgerSnapshotBucket,
  ledgerStreamName,
  ledgerSubject,
  newUserKeys,
  pushAccountClaims,
  reportSubject,
  toolSubject,
  type BusAuthority,
  type BusPermissions,
} from "@mesh/bus";
import {
  LEDGER_READ_SUBJECT,
  loadOrCreateAuthority,
  ROTATE_SUBJECT,
  saveAuthority,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
} from "@mesh/controller";
import {
  compilePermissions,
  eventSubject,
  explain,
  loadManifest,
  seatHolders,
  seatSubject,
  STANDINGS_EVENTS,
  type Manifest,
} from "@mesh/manifest";
import { startNats, type NatsServer } from "@mesh/testkit";

const root = fileURLToPath(new URL("..", import.meta.url));

/** An event no manifest declares. */
const UNDECLARED = "matrix.undeclared";

/** Every example module's manifest and the fixtures', whatever exists when the test runs. */
async function manifestFiles(): Promise<string[]> {
  const files: string[] = [];
  for (const dir of ["examples/fleet", "providers", "test/fixtures/permission-matrix"]) {
    for (const entry of await readdir(join(root, dir), { withFileTypes: true })) {
      const file = join(root, dir, entry.name, "module.json");
      if (entry.isDirectory() && existsSync(file)) files.push(file);
    }
  }
  return files.sort();
}

let sentinels = 0;
/** A subject no module may publish or subscribe to: not an event, not a seat, not the control plane. */
const sentinel = (): string => `matrix.sentinel.${++sentinels}`;

/** One module's connection, and what the server refused and delivered on it. */
class Probe {
  readonly received: string[] = [];
  #refused = new Set<string>();
  #waiting = new Map<string, () => void>();

  constructor(
    readonly module: string,
    readonly nc: NatsConnection,
  ) {
    void (async () => {
      for await (const status of nc.status()) {
        if (status.type !== "error") continue;
        const err = status.error;
        if (err instanceof PermissionViolationError && err.operation === "publish") {
          this.#refused.add(err.subject);
          this.#waiting.get(err.subject)?.();
        }
      }
    })();
  }

  /** Publishes to each subject (body `{"from": module}`); answers the subjects the server refused. */
  async publishAll(subjects: readonly string[]): Promise<Set<string>> {
    this.#refused = new Set();
    const last = sentinel();
    const done = new Promise<void>((resolve) => this.#waiting.set(last, resolve));
    const body = JSON.stringify({ from: this.module });
    for (const subject of subjects) this.nc.publish(subject, body);
    this.nc.publish(last, body);
    await done;
    this.#waiting.delete(last);
    return new Set(subjects.filter((s) => this.#refused.has(s)));
  }

  /**
   * Subscribes to each subject, recording what arrives (unless `keep` is false: then the allowed
   * subscriptions end at once); answers the subjects the server refused.
   */
  async subscribeAll(subjects: readonly string[], keep = true): Promise<Set<string>> {
    const subs = new Map<string, Subscription>();
    for (const subject of subjects) {
      subs.set(
        subject,
        this.nc.subscribe(subject, {
          callback: (err, msg) => {
            if (err === null) this.received.push(`${msg.subject} from ${msg.json<{ from: string }>().from}`);
          },
        }),
      );
    }
    const closed = await this.nc.subscribe(sentinel()).closed;
    assert.ok(
      closed instanceof PermissionViolationError,
      `${this.module}'s sentinel subscription: ${String(closed)}`,
    );
    const refused = new Set(subjects.filter((s) => subs.get(s)?.isClosed() === true));
    if (!keep) for (const sub of subs.values()) if (!sub.isClosed()) sub.unsubscribe();
    return refused;
  }
}

/** What the manifests say, read directly (not through the compiler under test). */
function mayPublish(
  manifests: ReadonlyMap<string, Manifest>,
  seats: ReadonlyMap<string, string>,
  a: string,
  target: Target,
): boolean {
  const manifest = manifests.get(a);
  if (manifest === undefined) return false;
  if (target.kind === "seat") return seats.get(target.source) === a && manifest.emits.includes(target.event);
  if (target.source !== a) return false;
  return (
    manifest.emits.includes(target.event) ||
    (STANDINGS_EVENTS.includes(target.event) && manifest.provides.size > 0)
  );
}

/** Whether `a`'s manifest subscribes to `target`'s event, or (no event) to everything of its source. */
function maySubscribe(
  manifests: ReadonlyMap<string, Manifest>,
  a: string,
  target: Pick<Target, "source"> & { event?: string },
): boolean {
  const patterns = manifests.get(a)?.subscribes ?? [];
  return patterns.some(
    (p) =>
      p === "**" ||
      p === `${target.source}.**` ||
      (target.event !== undefined && p === `${target.source}.${target.event}`),
  );
}

/** One subject of the matrix: an event of a module, or of a seat. */
interface Target {
  readonly kind: "module" | "seat";
  readonly source: string;
  readonly event: string;
  readonly subject: string;
}

async function connectModule(
  url: string,
  authority: BusAuthority,
  module: string,
  permissions: BusPermissions,
): Promise<{ nc: NatsConnection; publicKey: string; creds: Uint8Array }> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({ name: module, publicKey: keys.publicKey, permissions });
  const creds = credsFor(jwt, keys.seed);
  const nc = await connectBus({ servers: url, creds, name: module });
  return { nc, publicKey: keys.publicKey, creds };
}

void describe("the permission matrix, on a real nats-server", () => {
  let server: NatsServer;
  let authority: BusAuthority;
  let stateDir: string;
  const manifests = new Map<string, Manifest>();
  let seats: Map<string, string>;
  const permissions = new Map<string, BusPermissions>();
  const probes = new Map<string, Probe>();
  const keysOf = new Map<string, { publicKey: string; creds: Uint8Array }>();
  const targets: Target[] = [];
  /** Connections a test opens beyond the probes, closed even when it fails. */
  const others: NatsConnection[] = [];

  before(async () => {
    for (const file of await manifestFiles()) {
      const manifest = await loadManifest(file);
      manifests.set(manifest.name, manifest);
    }
    seats = seatHolders(manifests);
    const seatNames = new Set(seats.keys());
    for (const [module, manifest] of manifests) {
      const held = [...seats].filter(([, holder]) => holder === module).map(([seat]) => seat);
      const compiled = compilePermissions(manifest, module, held, seatNames);
      permissions.set(module, { pub: compiled.pub, sub: compiled.sub });
      for (const event of new Set([...manifest.emits, ...STANDINGS_EVENTS, UNDECLARED])) {
        targets.push({ kind: "module", source: module, event, subject: eventSubject(module, event) });
      }
    }
    for (const [seat, holder] of seats) {
      for (const event of new Set([...(manifests.get(holder)?.emits ?? []), UNDECLARED])) {
        targets.push({ kind: "seat", source: seat, event, subject: seatSubject(seat, event) });
      }
    }

    stateDir = await mkdtemp(join(tmpdir(), "mesh-matrix-"));
    authority = await loadOrCreateAuthority(stateDir);
    server = await startNats({ config: authority.serverConfig() });
    for (const [module, perms] of permissions) {
      const { nc, publicKey, creds } = await connectModule(server.url, authority, module, perms);
      probes.set(module, new Probe(module, nc));
      keysOf.set(module, { publicKey, creds });
    }
  });
  after(async () => {
    await Promise.all([...probes.values(), ...others.map((nc) => ({ nc }))].map((p) => p.nc.close()));
    await server?.stop();
    await rm(stateDir, { recursive: true, force: true });
  });

  void it("covers every example module, the providers, and a seat with its holder and a follower", () => {
    for (const module of ["notes", "counter", "postgres", "redis", "mariadb", "directory", "welcome"]) {
      assert.ok(
        manifests.has(module),
        `${module} is in the matrix (have: ${[...manifests.keys()].join(", ")})`,
      );
    }
    assert.equal(seats.get("identity-provider"), "directory");
  });

  void it("allows each subscription exactly when the subscriber's manifest covers it, as explain says", async () => {
    const subjects = targets.map((t) => t.subject);
    for (const [a, probe] of probes) {
      const refused = await probe.subscribeAll(subjects);
      for (const target of targets) {
        const allowed = !refused.has(target.subject);
        const expected = maySubscribe(manifests, a, target);
        assert.equal(
          allowed,
          expected,
          `${a} subscribing to ${target.subject}: server ${allowed}, manifest ${expected}`,
        );
        const said = explain(manifests, seats, a, "subscribe", target.subject);
        assert.equal(said.allowed, allowed, `mesh explain ${a} subscribe ${target.subject}: ${said.because}`);
      }
    }
  });

  void it("allows each publish exactly to the module that declares the event, or holds the seat, as explain says", async () => {
    const subjects = targets.map((t) => t.subject);
    for (const [a, probe] of probes) {
      const refused = await probe.publishAll(subjects);
      for (const target of targets) {
        const allowed = !refused.has(target.subject);
        const expected = mayPublish(manifests, seats, a, target);
        assert.equal(
          allowed,
          expected,
          `${a} publishing ${target.subject}: server ${allowed}, manifest ${expected}`,
        );
        const said = explain(manifests, seats, a, "publish", target.subject);
        assert.equal(said.allowed, allowed, `mesh explain ${a} publish ${target.subject}: ${said.because}`);
      }
    }
    assert.ok(
      targets.some((t) => mayPublish(manifests, seats, "directory", t) && t.kind === "seat"),
      "the seat holder publishes in the seat's name",
    );
  });

  void it("delivers each allowed publish to every allowed subscriber once, and nothing refused to anyone", async () => {
    await Promise.all([...probes.values()].map((p) => p.nc.flush()));
    for (const [c, probe] of probes) {
      const expected: string[] = [];
      for (const target of targets) {
        if (!maySubscribe(manifests, c, target)) continue;
        for (const a of probes.keys()) {
          if (mayPublish(manifests, seats, a, target)) expected.push(`${target.subject} from ${a}`);
        }
      }
      assert.deepEqual([...probe.received].sort(), expected.sort(), `what ${c} received`);
    }
    const welcome = probes.get("welcome")?.received ?? [];
    assert.ok(welcome.includes(`${seatSubject("identity-provider", "user.created")} from directory`));
    assert.ok(welcome.includes(`${eventSubject("notes", "note.created")} from notes`));
    assert.ok(
      probes.get("counter")?.received.includes(`${eventSubject("notes", "note.created")} from notes`),
    );
  });

  void it("allows a wildcard subscription only to a module subscribing to all of it, as explain says", async () => {
    const wide = new Map<string, { source: string } | "all">([
      ["mesh.events.>", "all"],
      ["mesh.seats.>", "all"],
    ]);
    for (const module of manifests.keys()) wide.set(`mesh.events.${module}.>`, { source: module });
    for (const seat of seats.keys()) wide.set(`mesh.seats.${seat}.>`, { source: seat });
    for (const [a, probe] of probes) {
      const refused = await probe.subscribeAll([...wide.keys()], false);
      for (const [subject, of] of wide) {
        const allowed = !refused.has(subject);
        const expected =
          of === "all"
            ? manifests.get(a)?.subscribes.includes("**") === true
            : maySubscribe(manifests, a, of);
        assert.equal(
          allowed,
          expected,
          `${a} subscribing to ${subject}: server ${allowed}, manifest ${expected}`,
        );
        const said = explain(manifests, seats, a, "subscribe", subject);
        assert.equal(said.allowed, allowed, `mesh explain ${a} subscribe ${subject}: ${said.because}`);
      }
    }
  });

  void it("lets no module credential write a ledger or speak on the control plane", async () => {
    const forbidden = [
      TOOL_REQUEST_SUBJECT,
      STATUS_SUBJECT,
      ROTATE_SUBJECT,
      LEDGER_READ_SUBJECT,
      enrollSubject(),
      toolSubject("node-a"),
      reportSubject("node-a"),
      "$JS.API.INFO",
      "$JS.API.STREAM.NAMES",
      `$KV.mesh-desired.fleet`,
    ];
    for (const module of manifests.keys()) {
      forbidden.push(
        ledgerSubject(module, "action"),
        ledgerSubject(module, "tool"),
        `$KV.${ledgerSnapshotBucket(module)}.${module}.state`,
        `$JS.API.DIRECT.GET.KV_${ledgerSnapshotBucket(module)}.$KV.${ledgerSnapshotBucket(module)}.${module}.state`,
        `$JS.API.STREAM.INFO.${ledgerStreamName(module)}`,
        `$JS.API.STREAM.DELETE.${ledgerStreamName(module)}`,
      );
    }
    const watched = [
      "mesh.>",
      ">",
      "_INBOX.>",
      "mesh.ledgers.>",
      "mesh.ledger.>",
      toolSubject("node-a"),
      "$KV.>",
      "mesh.*.>",
    ];
    for (const [a, probe] of probes) {
      const refused = await probe.publishAll(forbidden);
      assert.deepEqual(
        forbidden.filter((s) => !refused.has(s)),
        [],
        `${a} may publish none of the ledger and control subjects`,
      );
      for (const subject of forbidden) {
        assert.equal(
          explain(manifests, seats, a, "publish", subject).allowed,
          false,
          `explain ${a} ${subject}`,
        );
      }
      const notHeard = await probe.subscribeAll(watched, false);
      assert.deepEqual(
        watched.filter((s) => !notHeard.has(s)),
        [],
        `${a} may listen to none of the control plane, ledgers or inboxes`,
      );
    }
  });

  void it("a credential replaced by a new key pair stops working at once, and after a restart", async () => {
    const module = "notes";
    const perms = permissions.get(module);
    const old = keysOf.get(module);
    const oldProbe = probes.get(module);
    const counter = probes.get("counter");
    assert.ok(perms && old && oldProbe && counter);

    // The controller: a new credential from the node's new key, the old key revoked, the account's
    // new JWT pushed to the running server, the revocation kept in the authority file.
    const replacement = await connectModule(server.url, authority, module, perms);
    others.push(replacement.nc);
    await authority.revokeUser(old.publicKey);
    await saveAuthority(stateDir, authority);
    const updaterKeys = newUserKeys();
    const updaterJwt = await authority.issueSystemUser({
      name: ACCOUNT_UPDATER_IDENTITY,
      publicKey: updaterKeys.publicKey,
      permissions: accountUpdaterPermissions(authority),
    });
    const updater = await connectBus({
      servers: server.url,
      creds: credsFor(updaterJwt, updaterKeys.seed),
      name: ACCOUNT_UPDATER_IDENTITY,
      inboxPrefix: inboxPrefix(ACCOUNT_UPDATER_IDENTITY),
    });
    others.push(updater);
    await pushAccountClaims(updater, authority);

    assert.ok((await oldProbe.nc.closed()) instanceof Error, "the old connection is closed by the server");
    await assert.rejects(
      connectBus({ servers: server.url, creds: old.creds, name: module }),
      BusCredentialsRefusedError,
    );
    const newProbe = new Probe(module, replacement.nc);
    const before = counter.received.length;
    assert.deepEqual([...(await newProbe.publishAll([eventSubject(module, "note.created")]))], []);
    await counter.nc.flush();
    assert.deepEqual(counter.received.slice(before), [
      `${eventSubject(module, "note.created")} from ${module}`,
    ]);
    assert.deepEqual(
      [...(await newProbe.publishAll([eventSubject("counter", "note.created")]))],
      [eventSubject("counter", "note.created")],
    );

    // A restarted server, configured from the authority file, still refuses the old key.
    const reloaded = await loadOrCreateAuthority(stateDir);
    assert.ok(old.publicKey in reloaded.revocations);
    await server.restart({ config: reloaded.serverConfig() });
    await assert.rejects(
      connectBus({ servers: server.url, creds: old.creds, name: module }),
      BusCredentialsRefusedError,
    );
    const again = await connectBus({ servers: server.url, creds: replacement.creds, name: module });
    others.push(again);
  });

  void it("a credential from another mesh's authority is refused outright", async () => {
    const stranger = await createAuthority();
    const perms = permissions.get("notes");
    assert.ok(perms);
    await assert.rejects(connectModule(server.url, stranger, "notes", perms), BusCredentialsRefusedError);
  });
});
