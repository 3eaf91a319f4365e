// The controller's own keys, made once and kept 0600 in its state directory: the sealing key every
// minted password is kept sealed to (so it can seal it again for a node that enrolls later), and
// the NATS user key it connects with. Losing this file costs a rotation of every password (the
// sealed copies can no longer be opened, so new ones are minted and the providers apply them),
// never a consumer's data.
import { join } from "node:path";
import {
  newNodeKeys,
  newUserKeys,
  readFileIfExists,
  writeFileAtomic,
  type NodeKeys,
  type UserKeys,
} from "@mesh/bus";

/** The name of the controller's key file in its state directory. */
export const CONTROLLER_KEYS_FILE = "controller-keys.json";

/** The controller's own key pairs. Neither private half ever leaves the controller's machine. */
export interface ControllerKeys {
  /** What every password is sealed to while the controller keeps it. */
  readonly seal: NodeKeys;
  /** The controller's NATS user key; it issues itself a JWT for it at each start. */
  readonly nats: UserKeys;
}

/** The controller's key file exists but cannot be used. */
export class ControllerKeysError extends Error {
  override name = "ControllerKeysError";
  constructor(
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the controller's key file ${path} is damaged (not JSON with a seal and a nats key pair): restore it ` +
        `from a backup; or move it away, and the controller makes new keys and mints every password ` +
        `again (the providers apply the new ones; no data is lost)`,
      options,
    );
  }
}

/**
 * The controller's keys, read from `<stateDir>/controller-keys.json`, or made and written there
 * (0600, atomically) when there is no such file yet.
 * @throws ControllerKeysError when the file is damaged; the file system's error when it cannot be
 * read or written.
 */
export async function loadOrCreateControllerKeys(stateDir: string): Promise<ControllerKeys> {
  const path = join(stateDir, CONTROLLER_KEYS_FILE);
  const text = await readFileIfExists(path);
  if (text === undefined) {
    const keys: ControllerKeys = { seal: await newNodeKeys(), nats: newUserKeys() };
    await writeFileAtomic(path, `${JSON.stringify({ v: 1, ...keys }, null, 2)}\n`);
    return keys;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ControllerKeysError(path, { cause: err });
  }
  const p = parsed as { v?: unknown; seal?: Partial<NodeKeys>; nats?: Partial<UserKeys> } | null;
  const seal = p?.seal;
  const nats = p?.nats;
  if (
    p?.v !== 1 ||
    typeof seal?.publicKey !== "string" ||
    typeof seal.privateKey !== "string" ||
    typeof nats?.publicKey !== "string" ||
    typeof nats.seed !== "string"
  ) {
    throw new ControllerKeysError(path);
  }
  return {
    seal: { publicKey: seal.publicKey, privateKey: seal.privateKey },
    nats: { publicKey: nats.publicKey, seed: nats.seed },
  };
}
