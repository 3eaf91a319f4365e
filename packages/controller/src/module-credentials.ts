// Every module's own bus and ledger credentials. The module's node makes its key pairs and reports
// only the public keys; the controller issues a JWT for each: the bus one with exactly the
// permissions compiled from the module's manifest, the ledger one confined to the subjects of the
// module's own ledger. The ledger itself is made beside them, in the background (`ModuleLedgers`):
// a module starts as soon as its credentials are issued, and its node's writes to its ledger wait
// until it is made. What was issued is kept in a controller-only bucket, so a restarted
// controller issues nothing again and revokes nothing that did not change. A key the controller
// stops issuing for (its module left the node or the fleet, or the node replaced it) is revoked;
// the keys to revoke are written down before anything else changes, so a crash cannot forget one.
//
// Permissions never change under a key: a JWT cannot be taken back alone, only every JWT of its key.
// So when the fleet changes a module's permissions, the delivery asks the node for new key pairs
// (`replaceKeys`), the new keys get the new permissions, and the old keys are revoked.
import { createHash } from "node:crypto";
import {
  ACCOUNT_UPDATER_IDENTITY,
  accountUpdaterPermissions,
  closeBus,
  connectBus,
  credsFor,
  inboxPrefix,
  ledgerPermissions,
  newUserKeys,
  openState,
  pushAccountClaims,
  StateValueError,
  type BusAuthority,
  type BusLogger,
  type BusState,
  type UserLimits,
} from "@mesh/bus";
import type { ModuleCredential, ModulePermissions } from "@mesh/manifest";
import type { NatsConnection } from "@nats-io/transport-node";
import type { FleetPlan } from "./fleet-plan.ts";
import type { ReportedModuleKeys } from "./node-reports.ts";

/** The controller-only bucket of the module credentials issued, keyed `<node>.<module>`. */
export const MODULE_CREDENTIALS_BUCKET = "mesh-module-credentials";

/**
 * What one connection of a module may hold on the bus, in its bus and ledger credentials: 1,000
 * subscriptions (a module's events and replies need a handful) and messages of 1 MiB (the
 * server's own default ceiling). `data` is not enforced for a user by nats-server 2.9, so it
 * promises nothing (-1). No user limit bounds how many connections a credential opens: see
 * docs/architecture.md for what does.
 */
export const MODULE_BUS_LIMITS: UserLimits = { subs: 1_000, payload: 1024 * 1024, data: -1 };

/** One credential as issued: its key and JWT. */
interface IssuedKey {
  readonly key: string;
  readonly jwt: string;
}

/** What was issued to one module on one node, and the keys of it still to revoke. */
interface IssuedRecord {
  readonly v: 1;
  readonly node: string;
  readonly module: string;
  readonly current?: {
    readonly bus: IssuedKey;
    readonly ledger: IssuedKey;
    /** A fingerprint of the bus permissions (and the limits) the bus JWT carries, and of the ledger's layout. */
    readonly permissions: string;
  };
  /** Public keys no longer issued for, to revoke; emptied once revoked. */
  readonly retired: readonly string[];
}

/** What one node's delivery carries of its modules' credentials. */
export interface NodeCredentials {
  readonly credentials: Record<string, ModuleCredential>;
  readonly replaceKeys: Record<string, string>;
}

/** How the module credentials are kept and applied. */
export interface ModuleCredentialsOptions {
  /** The controller's connection: it keeps the bucket. */
  readonly nc: NatsConnection;
  readonly authority: BusAuthority;
  readonly logger: BusLogger;
  /**
   * Whether `key` belongs to someone else (a node, the controller): never issued for as a module's,
   * so a node cannot get another's key revoked by reporting it.
   */
  readonly isReserved: (key: string) => boolean;
  /**
   * Makes the authority's revocations last and take effect (save them, push the account JWT);
   * called after `authority.revokeUser`, before the revoked keys are forgotten.
   */
  readonly applyRevocations: () => Promise<void>;
  /**
   * Makes each assigned module's ledger in the background (`ModuleLedgers.make`), never waited for:
   * the ledger credential names the ledger's subjects, which need not exist to be named.
   */
  readonly ledgers: { make(module: string): void };
}

/** The credentials the controller issued to the modules of every node. Calls must not overlap. */
export class ModuleCredentials {
  readonly #o: ModuleCredentialsOptions;
  readonly #bucket: BusState<IssuedRecord>;
  readonly #records = new Map<string, IssuedRecord>();
  /** What each node last reported, by module. */
  readonly #reported = new Map<string, Readonly<Record<string, ReportedModuleKeys>>>();
  readonly #said = new Set<string>();

  private constructor(options: ModuleCredentialsOptions, bucket: BusState<IssuedRecord>) {
    this.#o = options;
    this.#bucket = bucket;
  }

  /**
   * Opens the bucket (creating it) and reads what was issued before.
   * @throws StateOpenError when the bucket cannot be opened.
   */
  static async open(options: ModuleCredentialsOptions): Promise<ModuleCredentials> {
    const bucket = await openState<IssuedRecord>(options.nc, MODULE_CREDENTIALS_BUCKET, {
      parse: parseRecord,
    });
    const credentials = new ModuleCredentials(options, bucket);
    for (const key of await bucket.keys()) {
      try {
        const record = await bucket.get(key);
        if (record !== undefined) credentials.#records.set(key, record);
      } catch (err) {
        if (!(err instanceof StateValueError)) throw err;
        options.logger.warn(`${err.message}; its module is issued a credential again when its node reports`);
      }
    }
    return credentials;
  }

  /**
   * Remembers the module keys `node` reported, and says whether serving `fleet` calls for issuing
   * or replacing any of them now (so a report that changes nothing costs nothing).
   */
  report(
    node: string,
    keys: Readonly<Record<string, ReportedModuleKeys>> | undefined,
    fleet: FleetPlan,
  ): boolean {
    const now = keys ?? {};
    const changed = JSON.stringify(this.#reported.get(node)) !== JSON.stringify(now);
    this.#reported.set(node, now);
    return this.#assigned(node, fleet).some((module) => {
      const reported = now[module];
      const current = this.#records.get(recordKey(node, module))?.current;
      if (reported === undefined) return false;
      if (reported.bus === current?.bus.key && reported.ledger === current.ledger.key) return false;
      // Keys that cannot be issued for are answered once (with replaceKeys), not on every report.
      return changed || (this.#issuable(reported.bus) && this.#issuable(reported.ledger));
    });
  }

  /**
   * Brings `node`'s module credentials in line with `fleet`: issues for each assigned module whose
   * node reported keys not issued for yet (its ledger is made beside, not waited for), and marks for revocation the
   * keys of modules no longer assigned and of keys replaced. Nothing is revoked here: call
   * `revokeRetired` once the deliveries are published, so a module gets its new credential before
   * its old one stops working.
   * @returns how many modules were issued a credential.
   * @throws the bus's error when the bucket cannot be written.
   */
  async sync(node: string, fleet: FleetPlan, enrolled: boolean): Promise<number> {
    const assigned = new Set(enrolled ? this.#assigned(node, fleet) : []);
    for (const record of [...this.#records.values()]) {
      if (record.node !== node || record.current === undefined || assigned.has(record.module)) continue;
      await this.#put({
        ...withoutCurrent(record),
        retired: [...record.retired, record.current.bus.key, record.current.ledger.key],
      });
      this.#o.logger.info(
        `module ${record.module} no longer runs on node ${node}: its credentials are revoked`,
      );
    }
    let issued = 0;
    for (const module of assigned) {
      // Asked for every module, issued before or not: a leader that issued a credential and stopped
      // before its ledger was made leaves it to the next one.
      this.#o.ledgers.make(module);
      const permissions = fleet.permissions?.[module];
      const reported = this.#reported.get(node)?.[module];
      const record = this.#records.get(recordKey(node, module));
      const current = record?.current;
      if (permissions === undefined) {
        this.#sayOnce(
          `no permissions ${module}`,
          `module ${module}'s permissions are not known in the fleet being served (it was stored by an ` +
            `older controller): it is issued no new credential until the fleet file is read again`,
        );
        continue;
      }
      if (reported === undefined) continue;
      if (
        current !== undefined &&
        reported.bus === current.bus.key &&
        reported.ledger === current.ledger.key
      ) {
        continue; // issued; a change of permissions asks for new keys (see `forNode`)
      }
      if (!this.#issuable(reported.bus) || !this.#issuable(reported.ledger)) continue;
      const bus = await this.#o.authority.issueUser({
        name: `${module}@${node}`,
        publicKey: reported.bus,
        permissions,
        limits: MODULE_BUS_LIMITS,
      });
      const ledger = await this.#o.authority.issueUser({
        name: `${module}@${node} ledger`,
        publicKey: reported.ledger,
        permissions: ledgerPermissions(module),
        limits: MODULE_BUS_LIMITS,
      });
      await this.#put({
        v: 1,
        node,
        module,
        current: {
          bus: { key: reported.bus, jwt: bus },
          ledger: { key: reported.ledger, jwt: ledger },
          permissions: fingerprint(permissions),
        },
        retired: [
          ...(record?.retired ?? []),
          ...(current !== undefined ? [current.bus.key, current.ledger.key] : []),
        ],
      });
      issued++;
      this.#o.logger.info(
        `issued module ${module} on node ${node} its bus and ledger credentials (bus ${reported.bus})`,
      );
    }
    return issued;
  }

  /**
   * Revokes every key marked for revocation, makes the revocations take effect
   * (`applyRevocations`), then forgets them.
   * @returns how many keys were revoked.
   * @throws what `applyRevocations` throws; the keys stay marked, and the next call tries again.
   */
  async revokeRetired(): Promise<number> {
    const records = [...this.#records.values()].filter((r) => r.retired.length > 0);
    if (records.length === 0) return 0;
    const revoked = this.#o.authority.revocations;
    let count = 0;
    for (const record of records) {
      for (const key of record.retired) {
        if (revoked[key] !== undefined) continue;
        await this.#o.authority.revokeUser(key);
        count++;
      }
    }
    await this.#o.applyRevocations();
    for (const record of records) {
      if (record.current === undefined) await this.#delete(record);
      else await this.#put({ ...record, retired: [] });
    }
    return count;
  }

  /**
   * What `node`'s delivery carries from `fleet`: the JWTs of each assigned module issued for, and
   * the modules asked for new keys (their permissions changed, or their reported keys were revoked).
   */
  forNode(node: string, fleet: FleetPlan): NodeCredentials {
    const credentials: Record<string, ModuleCredential> = {};
    const replaceKeys: Record<string, string> = {};
    for (const module of this.#assigned(node, fleet)) {
      const current = this.#records.get(recordKey(node, module))?.current;
      const permissions = fleet.permissions?.[module];
      const reported = this.#reported.get(node)?.[module];
      if (current !== undefined) {
        credentials[module] = { bus: current.bus.jwt, ledger: current.ledger.jwt };
        if (permissions !== undefined && fingerprint(permissions) !== current.permissions) {
          replaceKeys[module] = current.bus.key;
        }
      }
      if (
        reported !== undefined &&
        reported.bus !== current?.bus.key &&
        (!this.#issuable(reported.bus) || !this.#issuable(reported.ledger))
      ) {
        replaceKeys[module] = reported.bus;
      }
    }
    return { credentials, replaceKeys };
  }

  /** Every node with a credential issued or a key still to revoke. */
  nodes(): string[] {
    return [...new Set([...this.#records.values()].map((r) => r.node))].sort();
  }

  /** The modules `fleet` assigns to `node`. */
  #assigned(node: string, fleet: FleetPlan): string[] {
    if (!fleet.nodes.includes(node)) return [];
    return fleet.modules.filter((m) => m.node === node).map((m) => m.name);
  }

  // A key can be issued for unless it was revoked, is about to be, or is someone else's.
  #issuable(key: string): boolean {
    if (this.#o.authority.revocations[key] !== undefined || this.#o.isReserved(key)) return false;
    for (const record of this.#records.values()) {
      if (record.retired.includes(key)) return false;
    }
    return true;
  }

  async #put(record: IssuedRecord): Promise<void> {
    const key = recordKey(record.node, record.module);
    await this.#bucket.put(key, record);
    this.#records.set(key, record);
  }

  async #delete(record: IssuedRecord): Promise<void> {
    const key = recordKey(record.node, record.module);
    await this.#bucket.delete(key);
    this.#records.delete(key);
  }

  #sayOnce(key: string, message: string): void {
    if (this.#said.has(key)) return;
    this.#said.add(key);
    this.#o.logger.warn(message);
  }
}

const recordKey = (node: string, module: string): string => `${node}.${module}`;

function withoutCurrent(record: IssuedRecord): IssuedRecord {
  return { v: 1, node: record.node, module: record.module, retired: record.retired };
}

// The limits count as the permissions do: a credential issued under other limits is replaced
// (new keys, the old revoked), as a JWT cannot be changed under its key. So does the ledger's
// layout, which the ledger credential's permissions name: credentials issued for a module's own
// stream (before state format 3) are replaced by ones for its subjects of the shared stream.
function fingerprint(permissions: ModulePermissions): string {
  return createHash("sha256")
    .update(JSON.stringify({ ...permissions, limits: MODULE_BUS_LIMITS, ledger: LEDGER_LAYOUT }))
    .digest("hex");
}

/** The ledger's layout the ledger credentials are issued for: 2, one stream and bucket every module shares. */
const LEDGER_LAYOUT = 2;

function parseRecord(value: unknown): IssuedRecord {
  const v = value as Partial<IssuedRecord> | null;
  const issued = (k: Partial<IssuedKey> | undefined): boolean =>
    typeof k?.key === "string" && typeof k.jwt === "string";
  if (
    v?.v !== 1 ||
    typeof v.node !== "string" ||
    typeof v.module !== "string" ||
    !Array.isArray(v.retired) ||
    !v.retired.every((k) => typeof k === "string") ||
    (v.current !== undefined &&
      (!issued(v.current.bus) || !issued(v.current.ledger) || typeof v.current.permissions !== "string"))
  ) {
    throw new Error("not an issued module credential");
  }
  return v as IssuedRecord;
}

/** Pushes the authority's account JWT to the running bus, so revocations apply without a restart. */
export interface AccountUpdates {
  /**
   * Sends the account JWT (every revocation so far) over a system-account connection, made the
   * first time and kept.
   * @throws AccountClaimsRefusedError / AccountUpdatesUnavailableError (see `pushAccountClaims`);
   * BusCredentialsRefusedError / BusUnreachableError when the connection cannot be made.
   */
  push(): Promise<void>;
  /** Closes the connection, if one was made. Idempotent. */
  close(): Promise<void>;
}

/**
 * Account updates for `authority` on the bus at `servers` (trusting the bus CA `ca`, PEM, when it
 * uses TLS), over a system user issued with a key pair made here and never written anywhere.
 */
export function accountUpdates(
  authority: BusAuthority,
  servers: readonly string[],
  logger: BusLogger,
  ca?: string,
): AccountUpdates {
  let connection: Promise<NatsConnection> | undefined;
  const connect = (): Promise<NatsConnection> => {
    const made = (connection ??= (async () => {
      const keys = newUserKeys();
      const jwt = await authority.issueSystemUser({
        name: "controller account updates",
        publicKey: keys.publicKey,
        permissions: accountUpdaterPermissions(authority),
      });
      return connectBus({
        servers,
        creds: credsFor(jwt, keys.seed),
        name: "controller-account-updates",
        inboxPrefix: inboxPrefix(ACCOUNT_UPDATER_IDENTITY),
        log: logger,
        ...(ca !== undefined ? { ca } : {}),
      });
    })());
    // A connection that could not be made is tried again next time.
    made.catch(() => {
      if (connection === made) connection = undefined;
    });
    return made;
  };
  return {
    async push() {
      await pushAccountClaims(await connect(), authority);
    },
    async close() {
      const made = connection;
      connection = undefined;
      const nc = await made?.catch(() => undefined);
      if (nc !== undefined) await closeBus(nc);
    },
  };
}
