// Turns one delivery into files on this node: each secret unsealed into a copy for each module of
// this node that reads it (the consumer's own, and its provider's when the provider runs here too),
// each provider module's contributions file and each consumer module's credential files, all
// derived here with @mesh/manifest from the plan and this node's state directory, each owned by the
// module that reads it. New secrets go first, so a provider never reads a contributions entry whose
// secret file is not there yet; a changed one (a rotation) goes after the contributions file names
// the password it replaces, kept beside it, and a consumer's copy of it may wait until the
// provider has taken it beside the old one (see `holdsBack`).
import { readdir, rm, rmdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { unseal, type BusLogger, type FileOwner, type NodeKeys } from "@mesh/bus";
import {
  contributionsFor,
  credentialsFor,
  providerSecretPath,
  secondSecretPath,
  secretPath,
  secretsDirPath,
  slotSecretPath,
} from "@mesh/manifest";
import type { Credential, Delivery, PlanEntry } from "@mesh/manifest";
import { readFileIfExists, writeFileAtomic, type WriteOutcome } from "@mesh/bus";
import { eachAtOnce, FILES_AT_ONCE } from "./at-once.ts";
import { ensureDir } from "./module-isolation.ts";
import type { PasswordGate } from "./module-launch.ts";

/**
 * How long a consumer's new password is held back while its provider (on this node, holding two
 * passwords at once) has not taken it: past this it is written anyway, and said.
 */
export const HOLD_NEW_PASSWORD_MOST_MS = 60_000;

/** Where a provider's copy of the password being retired is kept, beside its copy of the new one. */
export function retiringPath(providerSecret: string): string {
  return `${providerSecret}.retiring`;
}

/** What applying a delivery did. */
export interface ApplyResult {
  /** Files written because their contents (or mode) changed. */
  readonly written: number;
  /** Files already as the delivery says, left untouched. */
  readonly unchanged: number;
  /** Secrets refused (tampered or not addressed to this node); none of them was written. */
  readonly rejected: readonly SecretRejectedError[];
  /** Secret files removed because no module of this node uses them any more. */
  readonly removed: readonly string[];
  /**
   * Consumers' copies of a new password held back until their provider takes it beside the old
   * one (a rotation that overlaps): apply the delivery again shortly.
   */
  readonly held: readonly string[];
}

/** Where and as whom a delivery is applied. */
export interface ApplyContext {
  readonly node: string;
  /** The node's state directory (absolute). */
  readonly stateDir: string;
  /** The node's seal key pair, which opens the secrets sealed to it. */
  readonly sealKeys: NodeKeys;
  readonly logger: BusLogger;
  /** Stale files already said, so each is said once across deliveries. */
  readonly said?: Set<string>;
  /**
   * The user a module's files are handed to (the one it runs as); undefined: the agent's own. A
   * file with another owner counts as changed and is written again.
   */
  readonly ownerOf?: (module: string) => FileOwner | undefined;
  /**
   * Asks the provider on this node whether its backend took a password. When it says its backend
   * holds two passwords at once and has not taken the new one yet, the consumer's own copy keeps
   * the old password (which still logs in) until it has: an app that reads its file before each
   * connection never reads a password the backend refuses. Absent: every copy is written at once.
   */
  readonly passwordApplied?: PasswordGate;
  /** Since when each held-back copy has been held (by path), across deliveries; see HOLD_NEW_PASSWORD_MOST_MS. */
  readonly heldSince?: Map<string, number>;
  /**
   * Whether secret files no module of `delivery` reads are removed (default true). False for a
   * delivery narrowed to some of the node's modules, whose others' files are not unused.
   */
  readonly removeUnused?: boolean;
}

/**
 * A consumer's sealed password that this node could not open: changed on the way, or sealed to
 * another node's key. It is never written; the secret file keeps what it held before, if anything.
 */
export class SecretRejectedError extends Error {
  override name = "SecretRejectedError";
  constructor(
    readonly node: string,
    readonly consumer: string,
    readonly iface: string,
    options: { cause: unknown },
  ) {
    super(
      `node ${node} refused the sealed password of consumer ${consumer} for ${iface}: ` +
        `${options.cause instanceof Error ? options.cause.message : String(options.cause)}`,
      options,
    );
  }
}

const SECRET_MODE = 0o600;
const FILE_MODE = 0o644;

/**
 * Writes every file `delivery` calls for on this node, each atomically and only where it changed.
 * A refused secret or a module whose files cannot be derived is said to the logger and skipped; the
 * rest is still applied. Secret files nothing here uses any more are removed, and said.
 * @throws FileWriteError when a file cannot be written (what was written before it stays).
 */
export async function applyDelivery(delivery: Delivery, ctx: ApplyContext): Promise<ApplyResult> {
  let written = 0;
  let unchanged = 0;
  const count = (outcome: WriteOutcome): void => {
    if (outcome === "written") written++;
    else unchanged++;
  };
  const rejected: SecretRejectedError[] = [];
  const secretFiles = new Set<string>();
  // The providers' copies of passwords minted by `mesh rotate --now`: taken without an overlap.
  const cutSecrets = new Set<string>();
  const cuts = new Set(delivery.cuts ?? []);
  // The providers' copies of passwords, by file: when each was minted (said in the entry).
  const mintedOf = new Map<string, string>();
  const held: string[] = [];
  const changed: { reader: Reader; password: string }[] = [];
  const ownerOf = (module: string): FileOwner | undefined => ctx.ownerOf?.(module);
  const dirs = new Set<string>();
  // Each directory the agent writes into is the agent's, readable by the module's group alone.
  const write = async (module: string, path: string, data: string, mode: number): Promise<void> => {
    const owner = ownerOf(module);
    const dir = dirname(path);
    if (!dirs.has(dir)) {
      await ensureDir(dir, owner === undefined ? 0o700 : 0o750, agentWith(owner));
      dirs.add(dir);
    }
    count(await writeFileAtomic(path, data, mode, owner));
  };

  for (const instance of delivery.plan.instances) {
    if (instance.node !== ctx.node || !delivery.modules.some((m) => m.name === instance.provider)) continue;
    const dir = secretsDirPath(ctx.stateDir, instance.provider);
    if (dirs.has(dir)) continue;
    const owner = ownerOf(instance.provider);
    // Made when it holds nothing yet: the provider watches it from its start.
    await ensureDir(dir, owner === undefined ? 0o700 : 0o750, agentWith(owner));
    dirs.add(dir);
  }

  await eachAtOnce(Object.entries(delivery.secrets), FILES_AT_ONCE, async ([key, box]) => {
    const [consumer = "", iface = ""] = key.split("/");
    const readers = readersOf(delivery, ctx, consumer, iface);
    for (const reader of readers) secretFiles.add(reader.path);
    if (readers.length === 0) return;
    let password: string;
    try {
      password = await unseal(box, ctx.sealKeys);
    } catch (err) {
      const error = new SecretRejectedError(ctx.node, consumer, iface, { cause: err });
      ctx.logger.error(error.message);
      rejected.push(error);
      return;
    }
    // A first copy is written at once. A changed one waits: the provider's copy of the password it
    // replaces is kept first as the password being retired, then the contributions file names it,
    // and only then the new password is written (below), so a provider never sees the new password
    // without the old one beside it. A consumer's copy may wait on its provider (`holdsBack`).
    // A leaked password's replacement keeps no password being retired: a copy kept from a
    // rotation under way is left out of the contributions entry and removed below.
    const cut = cuts.has(key);
    const minted = delivery.minted?.[key];
    for (const reader of readers) {
      // Where logins alternate, both password files stay: the credential file names one of them.
      if (reader.alternates === true) {
        secretFiles.add(secretPath(ctx.stateDir, consumer, iface));
        secretFiles.add(secondSecretPath(ctx.stateDir, consumer, iface));
      }
      if (reader.role === "provider" && minted !== undefined) mintedOf.set(reader.path, minted);
      const was = await readSecretIfExists(reader.path);
      if (reader.role === "provider" && cut) cutSecrets.add(reader.path);
      if (was === undefined) await write(reader.module, reader.path, password, SECRET_MODE);
      else if (was !== password) {
        if (reader.role === "provider" && !cut)
          await write(reader.module, retiringPath(reader.path), was, SECRET_MODE);
        changed.push({ reader, password });
      } else await write(reader.module, reader.path, password, SECRET_MODE);
      if (reader.role === "provider" && !cut && (await exists(retiringPath(reader.path))))
        secretFiles.add(retiringPath(reader.path));
    }
  });

  // A credential file that moves to the other login waits until that login's password file holds
  // its password and the provider took it: a reader of the credential file, then of the password
  // file it names, always gets a pair the backend takes.
  const switches: { module: string; iface: string; path: string; contents: Credential }[] = [];
  await eachAtOnce(delivery.modules, FILES_AT_ONCE, async (module) => {
    let files: { path: string; contents: unknown }[];
    try {
      const credentials = [];
      for (const file of credentialsFor(delivery.plan, module.name, ctx.stateDir)) {
        const on = await passwordFileNamed(file.path);
        if (on !== undefined && on !== file.contents.passwordFile)
          switches.push({ module: module.name, iface: file.interface, ...file });
        else credentials.push(file);
      }
      files = [...contributionsFor(delivery.plan, module.name, ctx.stateDir), ...credentials];
    } catch (err) {
      ctx.logger.error(
        `the files of module ${module.name} on node ${ctx.node} cannot be derived from the delivery ` +
          `(${err instanceof Error ? err.message : String(err)}): its previous files are left as they were`,
      );
      return;
    }
    for (const file of files) {
      await write(
        module.name,
        file.path,
        `${JSON.stringify(withRetiring(file.contents, secretFiles, cutSecrets, mintedOf), null, 2)}\n`,
        FILE_MODE,
      );
    }
    await sayLeftInPlace(
      ctx,
      module.name,
      new Set([...files, ...switches.filter((s) => s.module === module.name)].map((f) => f.path)),
    );
  });

  for (const { reader, password } of changed.filter((c) => c.reader.role === "provider")) {
    await write(reader.module, reader.path, password, SECRET_MODE);
  }
  for (const { reader, password } of changed.filter((c) => c.reader.role === "consumer")) {
    // A password file of an alternating login is named by no credential file until it holds this.
    if (
      reader.alternates !== true &&
      reader.entry !== undefined &&
      (await holdsBack(ctx, reader.path, reader.entry, password))
    ) {
      held.push(reader.path);
      continue;
    }
    ctx.heldSince?.delete(reader.path);
    await write(reader.module, reader.path, password, SECRET_MODE);
  }

  for (const s of switches) {
    if (await switchWaits(ctx, delivery, s)) {
      held.push(s.path);
      continue;
    }
    ctx.heldSince?.delete(s.path);
    await write(s.module, s.path, `${JSON.stringify(s.contents, null, 2)}\n`, FILE_MODE);
  }

  const removed = ctx.removeUnused === false ? [] : await removeUnusedSecrets(ctx, secretFiles);
  return { written, unchanged, rejected, removed, held };
}

// Whether the consumer's copy at `path` keeps its old password for now: its provider runs on this
// node, says its backend holds two passwords at once, and has not taken the new one yet.
async function holdsBack(
  ctx: ApplyContext,
  path: string,
  entry: PlanEntry,
  password: string,
): Promise<boolean> {
  if (ctx.passwordApplied === undefined) return false;
  const was = await readSecretIfExists(path);
  if (was === undefined || was === password) return false;
  const since = ctx.heldSince?.get(path) ?? Date.now();
  if (Date.now() - since > HOLD_NEW_PASSWORD_MOST_MS) {
    ctx.logger.warn(
      `${path}: its provider ${entry.provider} has not taken the new password for ` +
        `${HOLD_NEW_PASSWORD_MOST_MS / 1000} s; it is written now (the consumer may be refused until it does)`,
    );
    return false;
  }
  const answer = await ctx.passwordApplied(entry, password);
  if (answer.applied || answer.overlaps !== true) return false;
  ctx.heldSince?.set(path, since);
  return true;
}

// Whether a consumer's credential file keeps naming its current login for now: its provider runs on
// this node and has not taken the password of the login it moves to. Past HOLD_NEW_PASSWORD_MOST_MS
// it moves anyway, and it is said.
async function switchWaits(
  ctx: ApplyContext,
  delivery: Delivery,
  file: { module: string; iface: string; path: string; contents: Credential },
): Promise<boolean> {
  const { module, iface, path } = file;
  const passwordFile = file.contents.passwordFile;
  const password = await readSecretIfExists(passwordFile);
  // Its password not delivered here yet: the credential file keeps the pair it names.
  if (password === undefined) return true;
  if (ctx.passwordApplied === undefined) return false;
  const here = new Set(delivery.modules.map((m) => m.name));
  const instance = delivery.plan.instances.find(
    (i) => i.interface === iface && i.consumers.some((c) => c.consumer === module),
  );
  const entry = instance?.consumers.find((c) => c.consumer === module);
  if (instance === undefined || entry === undefined) return false;
  if (instance.node !== ctx.node || !here.has(instance.provider)) return false;
  const since = ctx.heldSince?.get(path) ?? Date.now();
  if (Date.now() - since > HOLD_NEW_PASSWORD_MOST_MS) {
    ctx.logger.warn(
      `${module}'s credential for ${iface}: its provider ${entry.provider} has not taken the new ` +
        `password for ${HOLD_NEW_PASSWORD_MOST_MS / 1000} s; it moves to the other login now ` +
        `(the consumer may be refused until the provider does)`,
    );
    return false;
  }
  const answer = await ctx.passwordApplied(entry, password);
  if (answer.applied) return false;
  ctx.heldSince?.set(path, since);
  return true;
}

// The password file the credential file at `path` names now; undefined when there is none.
async function passwordFileNamed(path: string): Promise<string | undefined> {
  const text = await readFileIfExists(path);
  if (text === undefined) return undefined;
  try {
    const named = (JSON.parse(text) as { passwordFile?: unknown } | null)?.passwordFile;
    return typeof named === "string" ? named : undefined;
  } catch {
    return undefined;
  }
}

// A contributions file's entries, each naming the provider's copy of the password being retired
// beside its secret while that copy exists, saying `cut` for a password minted by `mesh rotate
// --now`, and `minted` when the delivery says when it was minted; any other file as it is.
function withRetiring(
  contents: unknown,
  secretFiles: ReadonlySet<string>,
  cutSecrets: ReadonlySet<string>,
  mintedOf: ReadonlyMap<string, string>,
): unknown {
  if (typeof contents !== "object" || contents === null || !("given" in contents)) return contents;
  const given = (contents as { given: unknown }).given;
  if (!Array.isArray(given)) return contents;
  return {
    ...contents,
    given: given.map((g: unknown) => {
      const secret = (g as { secret?: unknown } | null)?.secret;
      if (typeof secret !== "string") return g;
      const minted = mintedOf.get(secret);
      const entry = minted === undefined ? (g as object) : { ...(g as object), minted };
      if (cutSecrets.has(secret)) return { ...entry, cut: true };
      if (!secretFiles.has(retiringPath(secret))) return entry;
      return { ...entry, retiring: retiringPath(secret) };
    }),
  };
}

async function readSecretIfExists(path: string): Promise<string | undefined> {
  const text = await readFileIfExists(path);
  return text?.replace(/\r?\n$/, "");
}

async function exists(path: string): Promise<boolean> {
  return (await readFileIfExists(path)) !== undefined;
}

// The root-owned directory a module's files go in: the agent's, with the module's group.
function agentWith(owner: FileOwner | undefined): FileOwner | undefined {
  return owner === undefined ? undefined : { uid: process.getuid?.() ?? 0, gid: owner.gid };
}

/** One copy of a password on this node: whose, where, and (for a consumer's) the plan entry its provider here is asked about. */
interface Reader {
  readonly role: "provider" | "consumer";
  readonly module: string;
  readonly path: string;
  readonly entry?: PlanEntry;
  /** A consumer's copy where logins alternate: the password file of the login it is for. */
  readonly alternates?: boolean;
}

// Who on this node reads `consumer`'s password for `iface`: the consumer, when it runs here, in its
// own directory; its provider, when it runs here, in the provider's flat secrets directory.
function readersOf(delivery: Delivery, ctx: ApplyContext, consumer: string, iface: string): Reader[] {
  const readers: Reader[] = [];
  const here = new Set(delivery.modules.map((m) => m.name));
  for (const instance of delivery.plan.instances) {
    for (const entry of instance.consumers) {
      if (entry.consumer !== consumer || entry.interface !== iface) continue;
      if (entry.consumerNode === ctx.node && here.has(consumer)) {
        const alternates = entry.alternates === true;
        const path = alternates
          ? slotSecretPath(ctx.stateDir, consumer, iface, entry.slot)
          : secretPath(ctx.stateDir, consumer, iface);
        const mark = alternates ? { alternates } : {};
        // Its provider is asked only where it runs on this node too.
        readers.push(
          instance.node === ctx.node && here.has(instance.provider)
            ? { role: "consumer", module: consumer, path, entry, ...mark }
            : { role: "consumer", module: consumer, path, ...mark },
        );
      }
      if (instance.node === ctx.node && here.has(instance.provider)) {
        readers.push({
          role: "provider",
          module: instance.provider,
          path: providerSecretPath(ctx.stateDir, instance.provider, consumer, iface),
        });
      }
    }
  }
  return readers;
}

// A secret no longer delivered belongs to a consumer gone from this node: neither the contributions
// nor the credential files written from this delivery name it, so no module here reads it any more.
// The flat `<state>/secrets/<consumer>/<iface>` of an older agent is removed the same way.
async function removeUnusedSecrets(ctx: ApplyContext, delivered: ReadonlySet<string>): Promise<string[]> {
  const removed: string[] = [];
  const remove = async (path: string, what: string): Promise<void> => {
    if (delivered.has(path)) return;
    await rm(path, { force: true });
    removed.push(path);
    ctx.logger.info(
      `removed the secret file ${path}: ${what} is no longer delivered to node ${ctx.node}, so no ` +
        `module here uses it (its provider retires the login)`,
    );
  };
  const modules = join(ctx.stateDir, "modules");
  for (const module of await list(modules)) {
    for (const name of await list(join(modules, module, "passwords"))) {
      await remove(join(modules, module, "passwords", name), `consumer ${module}'s password for ${name}`);
    }
    for (const name of await list(join(modules, module, "secrets"))) {
      const [consumer, iface] = name.split(".");
      await remove(
        join(modules, module, "secrets", name),
        `provider ${module}'s copy of consumer ${consumer}'s password for ${iface}`,
      );
    }
  }
  const legacy = join(ctx.stateDir, "secrets");
  for (const consumer of await list(legacy)) {
    const dir = join(legacy, consumer);
    for (const iface of await list(dir)) {
      await remove(join(dir, iface), `consumer ${consumer}'s password for ${iface}`);
    }
    await rmdir(dir).catch(() => undefined);
  }
  await rmdir(legacy).catch(() => undefined);
  return removed;
}

// A credential file the plan no longer calls for is left where it is, and said: a consumer reading
// it learns its need was withdrawn when its login stops working, and a person decides what goes.
async function sayLeftInPlace(
  ctx: ApplyContext,
  module: string,
  current: ReadonlySet<string>,
): Promise<void> {
  for (const kind of ["credentials", "receives"]) {
    const dir = join(ctx.stateDir, "modules", module, kind);
    for (const name of await list(dir)) {
      const path = join(dir, name);
      if (current.has(path) || !name.endsWith(".json") || ctx.said?.has(path)) continue;
      ctx.said?.add(path);
      ctx.logger.warn(
        `${path} is no longer part of module ${module}'s delivery on node ${ctx.node}; it is left in place ` +
          `(nothing is removed silently): delete it once ${module} no longer needs it`,
      );
    }
  }
}

async function list(dir: string): Promise<string[]> {
  try {
    // Dot files are the atomic writer's temp files, not secrets.
    return (await readdir(dir)).filter((name) => !name.startsWith("."));
  } catch {
    return [];
  }
}
