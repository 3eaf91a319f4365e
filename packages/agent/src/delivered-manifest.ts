// A module's manifest as its delivery carries it. The fleet is applied with every manifest it
// names, and the controller hands each node the manifests of its modules: a node needs only the
// module's code (its directory, its command and what that reads), not its module.json. The text
// comes from the bus, so it is validated here as a file would be, naming the module and the field.
import { join } from "node:path";
import { writeFileAtomic, type FileOwner } from "@mesh/bus";
import {
  loadManifest,
  MANIFEST_MAX_BYTES,
  moduleDir,
  parseManifest,
  type DeliveredModule,
  type Manifest,
} from "@mesh/manifest";

/** Where the agent keeps the delivered manifest of `module` (its MESH_MANIFEST). */
export function deliveredManifestPath(stateDir: string, module: string): string {
  return join(moduleDir(stateDir, module), "module.json");
}

/** A delivered manifest too large to be one. */
export class DeliveredManifestError extends Error {
  override name = "DeliveredManifestError";
}

/**
 * The manifest of `module`: the delivered text, validated, when the delivery carries one, else the
 * file at its path (a controller of before).
 * @throws ManifestError for a manifest that does not validate (every problem named);
 * DeliveredManifestError for one too large.
 */
export async function manifestOf(module: DeliveredModule): Promise<Manifest> {
  if (module.manifestText === undefined) return loadManifest(module.manifest);
  if (Buffer.byteLength(module.manifestText) > MANIFEST_MAX_BYTES)
    throw new DeliveredManifestError(
      `the manifest delivered for module ${module.name} is larger than ${MANIFEST_MAX_BYTES} bytes`,
    );
  // Named by its path as the fleet names it (one manifest may serve several modules of the fleet).
  return parseManifest(module.manifestText, `${module.manifest} (as applied with the fleet)`);
}

/**
 * Keeps the delivered manifest of `module` where `deliveredManifestPath` says (0644: a manifest
 * holds nothing secret, and the module's user reads it), and returns that path; without delivered
 * text, the path the fleet names.
 * @throws FileWriteError when it cannot be written.
 */
export async function keepDeliveredManifest(
  stateDir: string,
  module: DeliveredModule,
  owner?: FileOwner,
): Promise<string> {
  if (module.manifestText === undefined) return module.manifest;
  const path = deliveredManifestPath(stateDir, module.name);
  await writeFileAtomic(path, module.manifestText, 0o644, owner);
  return path;
}
