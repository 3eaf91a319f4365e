// Turns one delivery into files on this node: each secret unsealed into a copy for each module of
// this node that reads it (the consumer's own, and its provider's when the provider runs here too),
// each provider module's contributions file and each consumer module's credential files, all
// derived here with @mesh/manifest from the plan and this node's state directory, each owned by the
// module that reads it. Secrets go first, so a provider never reads a contributions entry whose
// secret file is not there yet.
import { readdir, rm, rmdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { unseal, type BusLogger, type FileOwner, type NodeKeys } from "@mesh/bus";
import {
  contributionsFor,
  credentialsFor,
  providerSecretPath,
  secretPath,
  secretsDirPath,
} from "@mesh/manifest";
import type { Delivery } from "@mesh/manifest";
import { writeFileAtomic, type WriteOutcome } from "@mesh/bus";
import { ensureDir } from "./module-isolation.ts";

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

  for (const [key, box] of Object.entries(delivery.secrets)) {
    const [consumer = "", iface = ""] = key.split("/");
    const readers = readersOf(delivery, ctx, consumer, iface);
    for (const reader of readers) secretFiles.add(reader.path);
    if (readers.length === 0) continue;
    let password: string;
    try {
      password = await unseal(box, ctx.sealKeys);
    } catch (err) {
      const error = new SecretRejectedError(ctx.node, consumer, iface, { cause: err });
      ctx.logger.error(error.message);
      rejected.push(error);
      continue;
    }
    for (const reader of readers) await write(reader.module, reader.path, password, SECRET_MODE);
  }

  for (const module of delivery.modules) {
    let files: { path: string; contents: unknown }[];
    try {
      files = [
        ...contributionsFor(delivery.plan, module.name, ctx.stateDir),
        ...credentialsFor(delivery.plan, module.name, ctx.stateDir),
      ];
    } catch (err) {
      ctx.logger.error(
        `the files of module ${module.name} on node ${ctx.node} cannot be derived from the delivery ` +
          `(${err instanceof Error ? err.message : String(err)}): its previous files are left as they were`,
      );
      continue;
    }
    for (const file of files) {
      await write(module.name, file.path, `${JSON.stringify(file.contents, null, 2)}\n`, FILE_MODE);
    }
    await sayLeftInPlace(ctx, module.name, new Set(files.map((f) => f.path)));
  }

  const removed = await removeUnusedSecrets(ctx, secretFiles);
  return { written, unchanged, rejected, removed };
}

// The root-owned directory a module's files go in: the agent's, with the module's group.
function agentWith(owner: FileOwner | undefined): FileOwner | undefined {
  return owner === undefined ? undefined : { uid: process.getuid?.() ?? 0, gid: owner.gid };
}

// Who on this node reads `consumer`'s password for `iface`: the consumer, when it runs here, in its
// own directory; its provider, when it runs here, in the provider's flat secrets directory.
function readersOf(
  delivery: Delivery,
  ctx: ApplyContext,
  consumer: string,
  iface: string,
): { module: string; path: string }[] {
  const readers: { module: string; path: string }[] = [];
  const here = new Set(delivery.modules.map((m) => m.name));
  for (const instance of delivery.plan.instances) {
    for (const entry of instance.consumers) {
      if (entry.consumer !== consumer || entry.interface !== iface) continue;
      if (entry.consumerNode === ctx.node && here.has(consumer)) {
        readers.push({ module: consumer, path: secretPath(ctx.stateDir, consumer, iface) });
      }
      if (instance.node === ctx.node && here.has(instance.provider)) {
        readers.push({
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
