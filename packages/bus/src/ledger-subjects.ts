// Where each module's ledger lives on the bus, named in one place for the controller that creates
// it, the agent that writes it on the module's own ledger connection, and the permissions that
// confine that connection to it.
//
//   history    JetStream stream LEDGER_<module>, subjects mesh.ledger.<module>.<kind>
//   snapshots  KV bucket mesh-ledger-<module>
//   replies    the ledger connection's own inbox, _LEDGER_INBOX.<module>
import { isModuleName, MODULE_NAME_RULE } from "@mesh/manifest";
import type { BusPermissions } from "./authority.ts";
import { kvWriteSubjects } from "./kv-permissions.ts";

/** Where every module's ledger history is published: `mesh.ledger.<module>.<kind>`. */
export const LEDGER_SUBJECT_PREFIX = "mesh.ledger";

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
 * The JetStream stream holding `module`'s history (`LEDGER_<module>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerStreamName(module: string): string {
  return `LEDGER_${assertLedgerModule(module)}`;
}

/** The module whose history `stream` is (`LEDGER_<module>`), or undefined when it is no ledger's. */
export function ledgerModuleOfStream(stream: string): string | undefined {
  const module = stream.startsWith("LEDGER_") ? stream.slice("LEDGER_".length) : undefined;
  return module !== undefined && isModuleName(module) ? module : undefined;
}

/**
 * The subject of one `kind` of `module`'s history (`mesh.ledger.<module>.<kind>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSubject(module: string, kind: LedgerKind): string {
  return `${LEDGER_SUBJECT_PREFIX}.${assertLedgerModule(module)}.${kind}`;
}

/**
 * Every subject of `module`'s history (`mesh.ledger.<module>.>`): the stream's subjects.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSubjects(module: string): string {
  return `${LEDGER_SUBJECT_PREFIX}.${assertLedgerModule(module)}.>`;
}

/**
 * The KV bucket holding `module`'s snapshots (`mesh-ledger-<module>`).
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerSnapshotBucket(module: string): string {
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
 * more: append to its own history (a JetStream publish to `ledgerSubjects(module)`, acknowledged in
 * its inbox), ask for its own stream's info, and put, get and watch the keys of its own snapshots
 * bucket. Not another module's ledger, not any event or control subject, and no other JetStream
 * call: it cannot create, delete or purge a stream (the controller makes the ledger).
 * Verified against nats-server 2.9 in test/ledger-permissions.test.ts.
 * @throws InvalidLedgerModuleError for a name that is not a module name.
 */
export function ledgerPermissions(module: string): BusPermissions {
  return {
    pub: {
      allow: [
        ledgerSubjects(module),
        `$JS.API.STREAM.INFO.${ledgerStreamName(module)}`,
        ...kvWriteSubjects(ledgerSnapshotBucket(module)),
      ],
    },
    sub: { allow: [`${ledgerInboxPrefix(module)}.>`] },
  };
}
