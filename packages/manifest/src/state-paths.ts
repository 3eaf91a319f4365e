import { isAbsolute, join } from "node:path";
import { assertInterfaceName, assertModuleName } from "./names.ts";

// Every file the agent writes for a module lives under the node's state directory, at a path
// derived from names that cannot hold "/", "." or "..": a module can never be made to write, or
// be handed, a path outside its own directories.

/** A state directory that is not absolute: paths in contributions files must not depend on a cwd. */
export class StateDirError extends Error {
  override name = "StateDirError";
  constructor(readonly stateDir: string) {
    super(
      `state directory ${JSON.stringify(stateDir)} is not an absolute path: a provider reads secret ` +
        `files from another working directory; give the node's state directory as an absolute path`,
    );
  }
}

function under(stateDir: string, ...parts: string[]): string {
  if (!isAbsolute(stateDir)) throw new StateDirError(stateDir);
  return join(stateDir, ...parts);
}

/**
 * The contributions file the agent writes for `provider`'s interface `iface`:
 * `<state>/modules/<provider>/receives/<iface>.json`.
 * @throws InvalidNameError for a name that is not a module or interface name; StateDirError.
 */
export function receivesPath(stateDir: string, provider: string, iface: string): string {
  return under(
    stateDir,
    "modules",
    assertModuleName(provider),
    "receives",
    `${assertInterfaceName(iface)}.json`,
  );
}

/**
 * The secret file holding `consumer`'s password for `iface`, on every node that needs it (the
 * consumer's and the provider's): `<state>/secrets/<consumer>/<iface>`.
 * @throws InvalidNameError for a name that is not a module or interface name; StateDirError.
 */
export function secretPath(stateDir: string, consumer: string, iface: string): string {
  return under(stateDir, "secrets", assertModuleName(consumer), assertInterfaceName(iface));
}

/**
 * The credential file the agent writes for `consumer`'s need `iface`:
 * `<state>/modules/<consumer>/credentials/<iface>.json`.
 * @throws InvalidNameError for a name that is not a module or interface name; StateDirError.
 */
export function credentialPath(stateDir: string, consumer: string, iface: string): string {
  return under(
    stateDir,
    "modules",
    assertModuleName(consumer),
    "credentials",
    `${assertInterfaceName(iface)}.json`,
  );
}
