// A node's identity is two key pairs made on the node itself (one to authenticate to the bus, one
// that secrets are sealed to) and the credentials the controller issued for the first. The private
// halves never leave this directory, and they are kept, so a restarted agent is the same node.
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { credsFor, newNodeKeys, newUserKeys, type NodeKeys, type UserKeys } from "@mesh/bus";
import { writeFileAtomic } from "@mesh/bus";

/** The node's own keys: `nats` signs its bus logins, `seal` opens the secrets sealed to it. */
export interface NodeIdentity {
  readonly nats: UserKeys;
  readonly seal: NodeKeys;
}

/** Where a node keeps its identity and bus settings, under its state directory. */
export interface IdentityFiles {
  /** `<state>/keys.json`, 0600: both key pairs. */
  readonly keys: string;
  /** `<state>/node.creds`, 0600: the issued JWT and the NATS seed. */
  readonly creds: string;
  /** `<state>/bus.json`: the bus servers learnt at enrollment. */
  readonly bus: string;
  /**
   * `<state>/bus-ca.pem`, 0644: the mesh's bus CA when the bus uses TLS (from the join token or
   * `--bus-ca`). A certificate is public: the node's modules read it too (MESH_BUS_CA).
   */
  readonly ca: string;
}

/** The identity files of the node whose state directory is `stateDir`. */
export function identityFiles(stateDir: string): IdentityFiles {
  return {
    keys: join(stateDir, "keys.json"),
    creds: join(stateDir, "node.creds"),
    bus: join(stateDir, "bus.json"),
    ca: join(stateDir, "bus-ca.pem"),
  };
}

/** A keys file that exists but cannot be used; it is never replaced silently. */
export class KeysFileError extends Error {
  override name = "KeysFileError";
  constructor(
    readonly path: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the node's keys file ${path} ${why}: restore it from a backup, or move it away and enroll the ` +
        `node again with a new join token (its secrets are sealed to the old key and will be sealed again)`,
      options,
    );
  }
}

const SECRET_MODE = 0o600;

/**
 * The node's keys from `<state>/keys.json`, made and written (0600) when there are none yet;
 * `made` says which. A file readable by others is narrowed to 0600.
 * @throws KeysFileError when the file exists but is not a keys file; FileWriteError.
 */
export async function loadOrMakeIdentity(
  files: IdentityFiles,
): Promise<{ identity: NodeIdentity; made: boolean }> {
  let text: string;
  try {
    text = await readFile(files.keys, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
      throw new KeysFileError(files.keys, "cannot be read", { cause: err });
    }
    const identity: NodeIdentity = { nats: newUserKeys(), seal: await newNodeKeys() };
    await writeFileAtomic(files.keys, `${JSON.stringify({ v: 1, ...identity }, null, 2)}\n`, SECRET_MODE);
    return { identity, made: true };
  }
  const identity = parseKeys(text, files.keys);
  if (((await stat(files.keys)).mode & 0o777) !== SECRET_MODE) {
    await writeFileAtomic(files.keys, text, SECRET_MODE);
  }
  return { identity, made: false };
}

function parseKeys(text: string, path: string): NodeIdentity {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    throw new KeysFileError(path, "is not JSON");
  }
  const k = raw as { nats?: Partial<UserKeys>; seal?: Partial<NodeKeys> } | null;
  const nats = k?.nats;
  const seal = k?.seal;
  if (
    typeof nats?.publicKey !== "string" ||
    typeof nats.seed !== "string" ||
    typeof seal?.publicKey !== "string" ||
    typeof seal.privateKey !== "string"
  ) {
    throw new KeysFileError(path, "lacks the nats or seal key pair");
  }
  try {
    credsFor("x", nats.seed);
  } catch (err) {
    throw new KeysFileError(path, "holds a NATS seed that is not a user seed", { cause: err });
  }
  return {
    nats: { publicKey: nats.publicKey, seed: nats.seed },
    seal: { publicKey: seal.publicKey, privateKey: seal.privateKey },
  };
}

/**
 * The node's issued JWT from `<state>/node.creds`, or undefined when the node has not enrolled.
 * @throws KeysFileError when the creds file cannot be read or holds no JWT.
 */
export async function readIssuedJwt(files: IdentityFiles): Promise<string | undefined> {
  let text: string;
  try {
    text = await readFile(files.creds, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new KeysFileError(files.creds, "cannot be read", { cause: err });
  }
  const jwt = /-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END NATS USER JWT------/.exec(text)?.[1];
  if (jwt === undefined) throw new KeysFileError(files.creds, "holds no NATS user JWT");
  return jwt;
}

/**
 * Writes `<state>/node.creds` (0600, atomic) for `jwt` and returns the creds bytes.
 * @throws FileWriteError.
 */
export async function writeNodeCreds(
  files: IdentityFiles,
  jwt: string,
  identity: NodeIdentity,
): Promise<Uint8Array> {
  const creds = credsFor(jwt, identity.nats.seed);
  await writeFileAtomic(files.creds, new TextDecoder().decode(creds), SECRET_MODE);
  return creds;
}

/** The bus servers recorded at the last enrollment, or undefined. */
export async function readBusServers(files: IdentityFiles): Promise<string[] | undefined> {
  try {
    const raw = JSON.parse(await readFile(files.bus, "utf8")) as { servers?: unknown };
    const servers = raw.servers;
    return Array.isArray(servers) && servers.every((s) => typeof s === "string") ? servers : undefined;
  } catch {
    return undefined;
  }
}

/** The bus CA kept from the last start, or undefined when the bus had no TLS. */
export async function readBusCa(files: IdentityFiles): Promise<string | undefined> {
  try {
    return await readFile(files.ca, "utf8");
  } catch {
    return undefined;
  }
}

/**
 * Keeps the bus CA (0644: modules read it), so a restarted agent trusts the bus without a token.
 * @throws FileWriteError.
 */
export async function writeBusCa(files: IdentityFiles, ca: string): Promise<void> {
  await writeFileAtomic(files.ca, ca, 0o644);
}

/**
 * Records the bus servers, so a restarted agent finds the bus without a join token.
 * @throws FileWriteError.
 */
export async function writeBusServers(files: IdentityFiles, servers: readonly string[]): Promise<void> {
  // The agent's own (0600): its modules learn the bus from MESH_BUS_SERVERS, and read nothing of the node's.
  await writeFileAtomic(files.bus, `${JSON.stringify({ servers }, null, 2)}\n`, SECRET_MODE);
}
