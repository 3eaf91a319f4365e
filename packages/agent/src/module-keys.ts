// Each module this node runs has two user key pairs of its own, made and kept here: one for its bus
// connection (its events), one for its ledger connection. Only their public keys leave the node, in
// the agent's report; the controller answers with a JWT for each in the node's delivery, and the
// agent joins JWT and seed into the module's creds file and the node's `ledgers` file. A credential
// whose JWT is for another key (one replaced since) is not written: the file keeps the last working
// pair until the JWT for the new key arrives.
import { access, readdir, rm } from "node:fs/promises";
import { join } from "node:path";
import {
  credsFor,
  newUserKeys,
  readFileIfExists,
  writeFileAtomic,
  type BusLogger,
  type FileOwner,
  type UserKeys,
  type WriteOutcome,
} from "@mesh/bus";
import type { Delivery } from "@mesh/manifest";
import { eachAtOnce, FILES_AT_ONCE } from "./at-once.ts";

/** A module's own key pairs: `bus` for its events, `ledger` for its ledger. */
export interface ModuleKeyPairs {
  readonly bus: UserKeys;
  readonly ledger: UserKeys;
}

/** What of a module's keys leaves the node: the public halves (`U…`). */
export interface ModulePublicKeys {
  readonly bus: string;
  readonly ledger: string;
}

/** One module's ledger credential in the `ledgers` file. */
export interface LedgerCredential {
  readonly jwt: string;
  readonly seed: string;
}

/**
 * `<state>/modules/<module>/keys.json` (0600, the agent's: the module never reads it, and gets only
 * its `bus.creds`): the module's two key pairs, seeds included.
 */
export function moduleKeysPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "keys.json");
}

/** `<state>/modules/<module>/bus.creds` (0600, the module's own): its bus credential (MESH_BUS_CREDS). */
export function moduleCredsPath(stateDir: string, module: string): string {
  return join(stateDir, "modules", module, "bus.creds");
}

/** `<state>/ledgers` (0600): every module's ledger credential, `{ "<module>": { jwt, seed } }`. */
export function ledgersPath(stateDir: string): string {
  return join(stateDir, "ledgers");
}

/** What writing the modules' credentials did. */
export interface ModuleCredentialsResult {
  /** Files written because their contents changed. */
  readonly written: number;
  readonly unchanged: number;
  /** Module -> the bus user (public key) its creds file holds a credential for, for each module that has one. */
  readonly busUsers: ReadonlyMap<string, string>;
}

const SECRET_MODE = 0o600;
const USER_KEY = /^U[A-Z2-7]{55}$/;

/**
 * The module key pairs of one node. `reconcile` then `writeCredentials` for each delivery; the
 * calls must not overlap.
 */
export class ModuleKeyring {
  readonly #stateDir: string;
  readonly #logger: BusLogger;
  readonly #keys = new Map<string, ModuleKeyPairs>();

  constructor(stateDir: string, logger: BusLogger) {
    this.#stateDir = stateDir;
    this.#logger = logger;
  }

  /**
   * Gives each module of `delivery` its key pairs: read from its keys file, or made and written
   * there when it has none, when the file is damaged, or when the delivery asks to replace its bus
   * key. The keys and creds file of a module no longer delivered are removed (the controller revokes
   * them), so a module that comes back gets new ones.
   * @returns whether any module's public keys changed (the agent reports them).
   * @throws FileWriteError when a keys file cannot be written.
   */
  async reconcile(delivery: Delivery): Promise<boolean> {
    let changed = false;
    const delivered = new Set(delivery.modules.map((m) => m.name));
    for (const module of await this.#modulesWithKeys()) {
      if (delivered.has(module)) continue;
      this.#keys.delete(module);
      await rm(moduleKeysPath(this.#stateDir, module), { force: true });
      await rm(moduleCredsPath(this.#stateDir, module), { force: true });
      changed = true;
      this.#logger.info(
        `removed the key pairs and bus credential of module ${module}: it no longer runs on this ` +
          `node, and the controller revokes them`,
      );
    }
    // Each module's keys file is its own: read, and made when needed, a few at once.
    await eachAtOnce([...delivered], FILES_AT_ONCE, async (module) => {
      const keys = this.#keys.get(module) ?? (await this.#read(module));
      const replace = delivery.replaceKeys?.[module];
      if (keys !== undefined && replace !== keys.bus.publicKey) {
        this.#keys.set(module, keys);
        return;
      }
      const made: ModuleKeyPairs = { bus: newUserKeys(), ledger: newUserKeys() };
      await writeFileAtomic(
        moduleKeysPath(this.#stateDir, module),
        `${JSON.stringify({ v: 1, ...made }, null, 2)}\n`,
        SECRET_MODE,
      );
      this.#keys.set(module, made);
      changed = true;
      this.#logger.info(
        keys === undefined
          ? `made module ${module}'s bus and ledger key pairs (bus ${made.bus.publicKey}); the private halves stay in ${moduleKeysPath(this.#stateDir, module)}`
          : `made module ${module} new key pairs (bus ${made.bus.publicKey}), as the controller asked: it no longer issues for ${keys.bus.publicKey}`,
      );
    });
    return changed;
  }

  /** The public keys of every module with keys, by module: what the agent reports. */
  publicKeys(): Record<string, ModulePublicKeys> {
    const out: Record<string, ModulePublicKeys> = {};
    for (const [module, keys] of [...this.#keys].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      out[module] = { bus: keys.bus.publicKey, ledger: keys.ledger.publicKey };
    }
    return out;
  }

  /**
   * Writes each delivered module's `bus.creds` from its bus JWT and the `ledgers` file from the
   * ledger JWTs (`{}` when none), both 0600, atomically, only when changed. A JWT issued for a key
   * other than the module's current one is skipped, and what the files held for the module stays.
   * Each `bus.creds` is handed to `ownerOf(module)` (the user the module runs as), when given.
   * @throws FileWriteError when a file cannot be written.
   */
  async writeCredentials(
    delivery: Delivery,
    ownerOf: (module: string) => FileOwner | undefined = () => undefined,
  ): Promise<ModuleCredentialsResult> {
    let written = 0;
    let unchanged = 0;
    const count = (outcome: WriteOutcome): void => {
      if (outcome === "written") written++;
      else unchanged++;
    };
    const previous = await this.#readLedgers();
    const ledgerOf = new Map<string, LedgerCredential>();
    const busUsers = new Map<string, string>();
    // Each module's creds file is its own: written a few at once.
    await eachAtOnce(delivery.modules, FILES_AT_ONCE, async ({ name: module }) => {
      const keys = this.#keys.get(module);
      const issued = delivery.credentials?.[module];
      const credsPath = moduleCredsPath(this.#stateDir, module);
      if (keys !== undefined && issued !== undefined && subjectOf(issued.bus) === keys.bus.publicKey) {
        count(
          await writeFileAtomic(
            credsPath,
            new TextDecoder().decode(credsFor(issued.bus, keys.bus.seed)),
            SECRET_MODE,
            ownerOf(module),
          ),
        );
      }
      const user = subjectOf(jwtIn((await readFileIfExists(credsPath)) ?? ""));
      if (user !== undefined) busUsers.set(module, user);

      const kept = previous[module];
      if (keys !== undefined && issued !== undefined && subjectOf(issued.ledger) === keys.ledger.publicKey) {
        ledgerOf.set(module, { jwt: issued.ledger, seed: keys.ledger.seed });
      } else if (kept !== undefined) {
        ledgerOf.set(module, kept);
      }
    });
    // In the delivery's order, so the same credentials give the same file.
    const ledgers: Record<string, LedgerCredential> = {};
    for (const { name: module } of delivery.modules) {
      const ledger = ledgerOf.get(module);
      if (ledger !== undefined) ledgers[module] = ledger;
    }
    count(
      await writeFileAtomic(
        ledgersPath(this.#stateDir),
        `${JSON.stringify(ledgers, null, 2)}\n`,
        SECRET_MODE,
      ),
    );
    return { written, unchanged, busUsers };
  }

  async #read(module: string): Promise<ModuleKeyPairs | undefined> {
    const path = moduleKeysPath(this.#stateDir, module);
    let text: string | undefined;
    try {
      text = await readFileIfExists(path);
    } catch (err) {
      this.#logger.warn(
        `module ${module}'s keys file ${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"}): ` +
          `new key pairs are made, and the controller issues for them`,
      );
      return undefined;
    }
    if (text === undefined) return undefined;
    const keys = parseKeyPairs(text);
    if (keys === undefined) {
      this.#logger.warn(
        `module ${module}'s keys file ${path} is not a keys file: new key pairs are made, and the controller issues for them`,
      );
    }
    return keys;
  }

  async #modulesWithKeys(): Promise<string[]> {
    let names: string[];
    try {
      names = await readdir(join(this.#stateDir, "modules"));
    } catch {
      return [];
    }
    const found: string[] = [];
    for (const name of names) {
      const there = await access(moduleKeysPath(this.#stateDir, name)).then(
        () => true,
        () => false,
      );
      if (there) found.push(name);
    }
    return found;
  }

  // The ledgers file as it is, so a module whose new ledger JWT has not come yet keeps its old pair.
  async #readLedgers(): Promise<Record<string, LedgerCredential>> {
    try {
      const raw = JSON.parse((await readFileIfExists(ledgersPath(this.#stateDir))) ?? "{}") as unknown;
      const out: Record<string, LedgerCredential> = {};
      if (typeof raw !== "object" || raw === null) return out;
      for (const [module, value] of Object.entries(raw)) {
        const v = value as Partial<LedgerCredential> | null;
        if (typeof v?.jwt === "string" && typeof v.seed === "string")
          out[module] = { jwt: v.jwt, seed: v.seed };
      }
      return out;
    } catch {
      return {};
    }
  }
}

function parseKeyPairs(text: string): ModuleKeyPairs | undefined {
  try {
    const raw = JSON.parse(text) as { bus?: Partial<UserKeys>; ledger?: Partial<UserKeys> } | null;
    const pair = (k: Partial<UserKeys> | undefined): UserKeys | undefined => {
      if (typeof k?.publicKey !== "string" || !USER_KEY.test(k.publicKey) || typeof k.seed !== "string") {
        return undefined;
      }
      credsFor("x", k.seed); // throws for a seed that is not a user seed
      return { publicKey: k.publicKey, seed: k.seed };
    };
    const bus = pair(raw?.bus);
    const ledger = pair(raw?.ledger);
    return bus !== undefined && ledger !== undefined ? { bus, ledger } : undefined;
  } catch {
    return undefined;
  }
}

// The JWT of a creds file's text, or "" when it holds none.
function jwtIn(creds: string): string {
  return /-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------/.exec(creds)?.[1] ?? "";
}

/**
 * The user public key a JWT was issued for (its `sub`), or undefined when it is not a JWT. Only to
 * pair a JWT with the right seed: the server checks the signature.
 */
export function subjectOf(jwt: string): string | undefined {
  const payload = jwt.split(".")[1];
  if (payload === undefined) return undefined;
  try {
    const sub = (JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { sub?: unknown }).sub;
    return typeof sub === "string" && USER_KEY.test(sub) ? sub : undefined;
  } catch {
    return undefined;
  }
}
