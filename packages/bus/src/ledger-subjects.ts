// Where every module's ledger lives on the bus, named in one place for the controller that makes
// it, the agent that writes it on the module's own ledger connection, and the permissions that
// confine that connection to its own part of it.
//
//   history    one JetStream stream for every module, MESH_LEDGER; a module's subjects are
//              mesh.ledgers.<module>.<kind>
//   snapshots  one KV bucket for every module, mesh-ledgers; a module's keys are <module>.<key>
//   replies    the ledger connection's own inbox, _LEDGER_INBOX.<module>
//
// Before state format 3, each module had a stream (LEDGER_<module>, subjects mesh.ledger.<module>.>)
// and a bucket (mesh-ledger-<module>) of its own: on a cluster each one a raft group, made before
// the module could write. A controller copies those into the shared ones (ledger-migration.ts) and
// leaves them where they are; the legacy names below are what it looks for.
import { isModuleName, MODULE_NAME_RULE } from "@mesh/manifest/names";
import type { BusPermissions } from "./authority.ts";
import { kvStreamName } from "./subjects.ts";

/** Where every module's ledger history is published: `mesh.ledgers.<module>.<kind>`. */
export const LEDGER_SUBJECT_PREFIX = "mesh.ledgers";

/** The one JetStream stream holding every module's history (subjects `mesh.ledgers.>`). */
export const LEDGER_STREAM = "MESH_LEDGER";

/** The one KV bucket holding every module's snapshots (keys `<module>.<key>`). */
export const LEDGER_SNAPSHOTS_BUCKET = "mesh-ledgers";

/** Every module's history subjects at once: the shared stream's subjects. */
export const ALL_LEDGER_SUBJECTS = `${LEDGER_SUBJECT_PREFIX}.>`;

/** The subject prefix of a module's own stream before state format 3 (`mesh.ledger.<module>.<kind>`). */
export const LEGACY_LEDGER_SUBJECT_PREFIX = "mesh.ledger";

/**
 * The kinds of ledger history entries, each its own subject token. `action`: a line of the module's
 * own action journal, kept as its claim (the agent appends it). `tool`: a tool call the mesh carried
 * to the module, who asked and what came of it (the agent that ran it appends it, or the controller
 * when no agent did). `rotate`: a password rotation the controller carried, who asked (the
 * controller appends it, to the consumer's ledger and to its provider's).
 */
export type LedgerKind = "action" | "tool" | "rotate";

/** A name that cannot name a module's ledger (it would widen or break a subject or stream name). */
export class InvalidLedgerModuleError extends Error {
  override name = "InvalidLedgerModuleError";
  constructor(readonly module: string) {
    super(`${JSON.stringify(module)} cannot name a module's ledger: a module name is ${MODULE_NAME_RULE}`);
  }
}

function assertLedgerModule(module: string): string {
  if (!isModuleName(module)) throw new InvalidLedgerModuleError(String(module));
  return module;
}

/**
 * The JetStream stream holding `module`'s history: the shared `LEDGER_STREAM`, in which the
 * module's entries are those of its subjects (`ledgerSubjects(module)`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerStreamName(module: string): string {
  assertLedgerModule(module);
  return LEDGER_STREAM;
}

/**
 * The stream that held `module`'s history before state format 3 (`LEDGER_<module>`), left where it
 * is once copied.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function legacyLedgerStreamName(module: string): string {
  return `LEDGER_${assertLedgerModule(module)}`;
}

/** The module whose pre-format-3 history `stream` is (`LEDGER_<module>`), or undefined. */
export function ledgerModuleOfStream(stream: string): string | undefined {
  const module = stream.startsWith("LEDGER_") ? stream.slice("LEDGER_".length) : undefined;
  return module !== undefined && isModuleName(module) ? module : undefined;
}

/**
 * The subject of one `kind` of `module`'s history (`mesh.ledgers.<module>.<kind>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSubject(module: string, kind: LedgerKind): string {
  return `${LEDGER_SUBJECT_PREFIX}.${assertLedgerModule(module)}.${kind}`;
}

/**
 * Every subject of `module`'s history (`mesh.ledgers.<module>.>`): what a read of its history filters on.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSubjects(module: string): string {
  return `${LEDGER_SUBJECT_PREFIX}.${assertLedgerModule(module)}.>`;
}

/** The module and kind of a history subject (`mesh.ledgers.<module>.<kind>`, or a legacy one), or undefined. */
export function ledgerSubjectParts(subject: string): { module: string; kind: string } | undefined {
  const [prefix, scope, module, kind] = subject.split(".");
  if (`${prefix}.${scope}` !== LEDGER_SUBJECT_PREFIX && `${prefix}.${scope}` !== LEGACY_LEDGER_SUBJECT_PREFIX)
    return undefined;
  return module !== undefined && isModuleName(module) ? { module, kind: kind ?? "unknown" } : undefined;
}

/**
 * The KV bucket holding `module`'s snapshots: the shared `LEDGER_SNAPSHOTS_BUCKET`, in which the
 * module's keys are `ledgerSnapshotKey(module, key)`.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSnapshotBucket(module: string): string {
  assertLedgerModule(module);
  return LEDGER_SNAPSHOTS_BUCKET;
}

/**
 * The key in the shared snapshots bucket of `module`'s snapshot `key` (`<module>.<key>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSnapshotKey(module: string, key: string): string {
  return `${assertLedgerModule(module)}.${key}`;
}

/**
 * The bucket that held `module`'s snapshots before state format 3 (`mesh-ledger-<module>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function legacyLedgerSnapshotBucket(module: string): string {
  return `mesh-ledger-${assertLedgerModule(module)}`;
}

/**
 * The inbox prefix of `module`'s ledger connection (`_LEDGER_INBOX.<module>`): apart from every
 * node's and person's inbox, so a ledger credential reads no one else's replies.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerInboxPrefix(module: string): string {
  return `_LEDGER_INBOX.${assertLedgerModule(module)}`;
}

/**
 * What `module`'s ledger connection (inbox prefix `ledgerInboxPrefix(module)`) may do, and nothing
 * more, each named by subject so that sharing the stream and the bucket shares nothing else:
 * append to its own history (a JetStream publish to `ledgerSubjects(module)`, acknowledged in its
 * inbox), put its own snapshot keys (`$KV.mesh-ledgers.<module>.>`) and get them (a direct get
 * whose subject names the key). Not another module's subjects or keys, not the stream's info (it
 * would count the others' entries), no consumer (it could read the others'), not any event or
 * control subject, and no other JetStream call: it cannot create, delete or purge a stream.
 * Verified against nats-server 2.9 in test/ledger-permissions.test.ts.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerPermissions(module: string): BusPermissions {
  const keys = `$KV.${LEDGER_SNAPSHOTS_BUCKET}.${assertLedgerModule(module)}.>`;
  return {
    pub: {
      allow: [
        ledgerSubjects(module),
        keys,
        `$JS.API.DIRECT.GET.${kvStreamName(LEDGER_SNAPSHOTS_BUCKET)}.${keys}`,
      ],
    },
    sub: { allow: [`${ledgerInboxPrefix(module)}.>`] },
  };
}
