import assert from "node:assert/strict";
import { rm } from "node:fs/promises";
import { until } from "@mesh/testkit";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { connectBus, ledgerInboxPrefix, type ModuleLedger } from "@mesh/bus";
import {
  followLedgerCredentials,
  ledgersFileOf,
  LedgerDialError,
  MissingLedgerCredentialError,
  type LedgerCredentials,
} from "../src/ledger-credentials.ts";
import { startLedgerMesh, type LedgerCredential, type LedgerMesh } from "./ledger-mesh.ts";
import { recordingLogger } from "./test-mesh.ts";

void describe("the agent's ledger credentials follow its ledgers secret", () => {
  let mesh: LedgerMesh;
  let notes: LedgerCredential;
  let audit: LedgerCredential;
  const followed: LedgerCredentials[] = [];

  const follow = async (file: string) => {
    const logger = recordingLogger();
    const dialled: string[] = [];
    const credentials = await followLedgerCredentials({
      file,
      servers: [mesh.server.url],
      logger,
      dial: (module, creds) => {
        dialled.push(module);
        return connectBus({
          servers: mesh.server.url,
          creds,
          name: `${module} ledger`,
          inboxPrefix: ledgerInboxPrefix(module),
        });
      },
    });
    followed.push(credentials);
    return { credentials, logger, dialled };
  };

  before(async () => {
    mesh = await startLedgerMesh();
    notes = await mesh.credentialFor("notes");
    audit = await mesh.credentialFor("audit");
  });
  after(async () => {
    await Promise.all(followed.map((c) => c.stop()));
    await mesh.stop();
  });

  it("is read from MESH_LEDGERS_FILE when set, else from the agent's state directory", () => {
    assert.equal(ledgersFileOf("/var/lib/mesh/n1", {}), "/var/lib/mesh/n1/ledgers");
    assert.equal(ledgersFileOf("/var/lib/mesh/n1", { MESH_LEDGERS_FILE: "/run/l" }), "/run/l");
  });

  it("dials a module's own ledger connection once, the first time it is asked for, and writes on it", async () => {
    const file = join(mesh.dir, "dial-once");
    await mesh.writeLedgers(file, { notes, audit });
    const { credentials, dialled } = await follow(file);
    assert.deepEqual(credentials.modules(), ["audit", "notes"]);
    assert.deepEqual(dialled, []);
    const [a, b] = await Promise.all([credentials.writer("notes"), credentials.writer("notes")]);
    assert.equal(a, b);
    assert.equal(await credentials.writer("notes"), a);
    assert.deepEqual(dialled, ["notes"]);
    const seq = await a.append("action", { action: "created", login: "app_db", who: "provisioner" });
    const history = await mesh.history("notes");
    assert.deepEqual(
      history.map((r) => [r.seq, r.entry["login"]]),
      [[seq, "app_db"]],
    );
  });

  it("refuses a module with no credential, naming the module, the file and where it comes from", async () => {
    const file = join(mesh.dir, "refuse");
    const { credentials, logger } = await follow(file);
    await assert.rejects(credentials.writer("notes"), (err: unknown) => {
      assert.ok(err instanceof MissingLedgerCredentialError);
      assert.equal(err.module, "notes");
      assert.match(err.message, /notes's ledger credential is missing/);
      assert.ok(err.message.includes(file));
      assert.match(err.message, /not there yet/);
      assert.match(err.message, /controller issues/);
      return true;
    });
    await mesh.writeLedgers(file, { audit });
    await assert.rejects(credentials.writer("notes"), (err: unknown) => {
      assert.ok(err instanceof MissingLedgerCredentialError);
      assert.doesNotMatch(err.message, /not there yet/);
      return true;
    });
    // The refusal re-reads the file, so a credential that has just arrived is taken at once.
    await mesh.writeLedgers(file, { audit, notes });
    await (await credentials.writer("notes")).append("action", { action: "approved" });
    assert.ok(logger.lines.every((l) => !l.includes(notes.seed) && !l.includes(notes.jwt)));
  });

  it("closes a module's connection when its credential changes or goes, and redials from the new one", async () => {
    const file = join(mesh.dir, "change");
    await mesh.writeLedgers(file, { notes });
    const { credentials, dialled } = await follow(file);
    const first: ModuleLedger = await credentials.writer("notes");

    const renewed = await mesh.credentialFor("notes");
    await mesh.writeLedgers(file, { notes: renewed });
    await until("the old ledger connection to close", () => first.isClosed);
    const second = await credentials.writer("notes");
    assert.notEqual(second, first);
    assert.deepEqual(dialled, ["notes", "notes"]);
    await second.append("tool", { tool: "status", args: [], ok: true });

    await mesh.writeLedgers(file, {});
    await until("the ledger connection of a credential gone to close", () => second.isClosed);
    await assert.rejects(credentials.writer("notes"), MissingLedgerCredentialError);
  });

  it("says an unreadable file once, and again only when the reason changes", async () => {
    const file = join(mesh.dir, "unreadable");
    const { credentials, logger } = await follow(file);
    const said = () => logger.lines.filter((l) => l.includes("ledger credentials cannot be read"));
    await credentials.reread();
    // A file not there yet on a first start is no fault: said once, as information.
    assert.deepEqual(said(), []);
    assert.deepEqual(
      logger.lines.filter((l) => l.includes("not there yet")).map((l) => l.slice(0, 5)),
      ["info:"],
    );
    assert.ok(!logger.lines.some((l) => l.startsWith("warn:")), logger.lines.join("\n"));

    await mesh.writeLedgers(file, "{ not json");
    await credentials.reread();
    await mesh.writeLedgers(file, "[still not json");
    await credentials.reread();
    assert.equal(said().length, 1);
    assert.match(said()[0] ?? "", /is not JSON/);

    await mesh.writeLedgers(file, " \n");
    await credentials.reread();
    await mesh.writeLedgers(file, "[]");
    await credentials.reread();
    await mesh.writeLedgers(file, '"a string"');
    await credentials.reread();
    assert.deepEqual(
      said()
        .slice(1)
        .map((l) => /(is empty|is not a map)/.exec(l)?.[1]),
      ["is empty", "is not a map"],
    );

    await mesh.writeLedgers(file, { notes });
    await credentials.reread();
    assert.ok(logger.lines.some((l) => l.includes("readable again")));
    assert.deepEqual(credentials.modules(), ["notes"]);

    // Gone after it was there: that is a fault, and a warning.
    await rm(file);
    await credentials.reread();
    assert.match(said().at(-1) ?? "", /^warn: .*not there yet/);
  });

  it("refuses, and dials nothing for, an entry that is not a credential", async () => {
    const file = join(mesh.dir, "bad-entry");
    await mesh.writeLedgers(file, JSON.stringify({ notes: { jwt: "x" }, audit }));
    const { credentials } = await follow(file);
    await assert.rejects(credentials.writer("notes"), /not \{"jwt", "seed"\}/);
    await mesh.writeLedgers(file, JSON.stringify({ notes: { jwt: notes.jwt, seed: "SUNOTASEED" } }));
    await credentials.reread();
    await assert.rejects(credentials.writer("notes"), (err: unknown) => {
      assert.ok(err instanceof LedgerDialError);
      assert.doesNotMatch(err.message, /SUNOTASEED/);
      return true;
    });
  });

  it("closes every connection on stop, and writes nothing after", async () => {
    const file = join(mesh.dir, "stop");
    await mesh.writeLedgers(file, { notes, audit });
    const { credentials } = await follow(file);
    const ledgers = await Promise.all([credentials.writer("notes"), credentials.writer("audit")]);
    await credentials.stop();
    assert.ok(ledgers.every((l) => l.isClosed));
    await assert.rejects(credentials.writer("notes"), /stopped/);
  });
});
