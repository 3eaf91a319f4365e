// The short id that tells this node's mesh apart from any other on the same machine: its modules'
// system users and cgroups are named with it (`mesh-<id>-<module>`), so two meshes never share a
// uid or a cgroup. Random, made once and kept in the state directory, never derived from the
// directory's path: a state restored or moved elsewhere keeps its users and finds its cgroups.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { readFileIfExists, writeFileAtomic } from "@mesh/bus";

/** `<state>/mesh-id`: the id, alone on its line. */
export const MESH_ID_FILE = "mesh-id";

/** Six characters of lowercase base32: short enough to leave a module 20 of a user name's 32. */
export const MESH_ID_PATTERN = /^[a-z2-7]{6}$/;

const ALPHABET = "abcdefghijklmnopqrstuvwxyz234567";

/** The state directory's mesh id cannot be read as one. */
export class MeshIdError extends Error {
  override name = "MeshIdError";
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(
      `${path} ${why}: it names this mesh's module users and cgroups, so the agent does not start ` +
        `with another; put back the six characters it held (they follow "mesh-" in the names of this ` +
        `mesh's users in /etc/passwd), or remove the file to make a new id (the modules then move to new users)`,
    );
  }
}

/** A new id: six characters of `[a-z2-7]` from the CSPRNG. */
export function newMeshId(): string {
  const bytes = randomBytes(6);
  return [...bytes].map((b) => ALPHABET[b % 32]).join("");
}

/**
 * The mesh id kept in `stateDir`, made (and written atomically) when there is none.
 * @throws MeshIdError when the file holds something else; the filesystem's error when it cannot be
 * read or written.
 */
export async function loadOrMakeMeshId(stateDir: string): Promise<{ id: string; made: boolean }> {
  const path = join(stateDir, MESH_ID_FILE);
  const text = await readFileIfExists(path);
  if (text !== undefined) {
    const id = text.trim();
    if (!MESH_ID_PATTERN.test(id)) throw new MeshIdError(path, "does not hold a mesh id");
    return { id, made: false };
  }
  const id = newMeshId();
  await writeFileAtomic(path, `${id}\n`, 0o600);
  return { id, made: true };
}
