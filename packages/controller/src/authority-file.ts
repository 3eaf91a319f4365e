// The bus authority's seeds live in one 0600 file in the controller's state directory, made once:
// with them a restarted controller issues credentials the running nats-server still trusts, so no
// node has to enroll again.
import { join } from "node:path";
import {
  createAuthority,
  loadAuthority,
  readFileIfExists,
  writeFileAtomic,
  type AuthoritySeeds,
  type BusAuthority,
} from "@mesh/bus";

/** The name of the authority file in the controller's state directory. */
export const AUTHORITY_FILE = "authority.json";

interface AuthorityFile {
  readonly v: 1;
  readonly seeds: AuthoritySeeds;
  readonly revocations: Record<string, number>;
}

/** The authority file exists but cannot be used. */
export class AuthorityFileError extends Error {
  override name = "AuthorityFileError";
  constructor(
    readonly path: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the bus authority file ${path} ${why}: restore it from a backup; or move it away, and the ` +
        `controller makes a new authority (the nats-server must then be restarted with the new ` +
        `configuration and every node enrolled again)`,
      options,
    );
  }
}

/**
 * The mesh's bus authority, read from `<stateDir>/authority.json`, or created and written there
 * (0600, atomically) when the file does not exist yet.
 * @throws AuthorityFileError when the file exists but is not an authority file or its seeds are
 * damaged; the file system's error when it cannot be read or written.
 */
export async function loadOrCreateAuthority(stateDir: string): Promise<BusAuthority> {
  const path = join(stateDir, AUTHORITY_FILE);
  const text = await readFileIfExists(path);
  if (text === undefined) {
    const authority = await createAuthority();
    await saveAuthority(stateDir, authority);
    return authority;
  }
  let parsed: Partial<AuthorityFile>;
  try {
    parsed = JSON.parse(text) as Partial<AuthorityFile>;
  } catch (err) {
    throw new AuthorityFileError(path, "is not JSON", { cause: err });
  }
  const seeds = parsed.seeds;
  if (
    parsed.v !== 1 ||
    typeof seeds?.operator !== "string" ||
    typeof seeds.account !== "string" ||
    typeof seeds.system !== "string"
  ) {
    throw new AuthorityFileError(path, "is not an authority file (version 1, with seeds)");
  }
  const revocations = isNumberRecord(parsed.revocations) ? parsed.revocations : {};
  try {
    return await loadAuthority(seeds, revocations);
  } catch (err) {
    throw new AuthorityFileError(path, "holds seeds that do not rebuild an authority", { cause: err });
  }
}

/**
 * Writes `authority`'s seeds and revocations to `<stateDir>/authority.json` (0600, atomically):
 * call it again after `revokeUser`, so a revocation outlives a restart.
 * @throws the file system's error when it cannot be written.
 */
export async function saveAuthority(stateDir: string, authority: BusAuthority): Promise<void> {
  const file: AuthorityFile = {
    v: 1,
    seeds: authority.exportSeeds(),
    revocations: { ...authority.revocations },
  };
  await writeFileAtomic(join(stateDir, AUTHORITY_FILE), `${JSON.stringify(file, null, 2)}\n`);
}

function isNumberRecord(value: unknown): value is Record<string, number> {
  return (
    typeof value === "object" &&
    value !== null &&
    !Array.isArray(value) &&
    Object.values(value).every((v) => typeof v === "number")
  );
}
