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
 * `<state>/modules/<module>`: the directory of everything the agent keeps for `module` (its log,
 * keys, bus credential, contributions, credentials and secrets). The agent's own (0750, group the
 * module's user): the module reads there and writes nothing.
 * @throws InvalidNameError for a name that is not a module name; StateDirError.
 */
export function moduleDir(stateDir: string, module: string): string {
  return under(stateDir, "modules", assertModuleName(module));
}

/**
 * `<state>/modules/<module>/home`: the one directory `module` writes (owned by its user): its
 * HOME, its control socket, its metrics URL and its action journal. Whatever the agent opens there
 * it opens as a file the module may have planted.
 * @throws InvalidNameError for a name that is not a module name; StateDirError.
 */
export function moduleHomePath(stateDir: string, module: string): string {
  return join(moduleDir(stateDir, module), "home");
}

/**
 * `<state>/modules/<provider>/secrets`: the provider's own flat directory of its consumers'
 * passwords (one directory watch covers them all); what the agent sets MESH_SECRETS_DIR to.
 * @throws InvalidNameError for a name that is not a module name; StateDirError.
 */
export function secretsDirPath(stateDir: string, provider: string): string {
  return join(moduleDir(stateDir, provider), "secrets");
}

/**
 * The provider's copy of `consumer`'s password for `iface`, which its contributions entry names:
 * `<state>/modules/<provider>/secrets/<consumer>.<iface>` (names hold no ".", so it is one-to-one).
 * @throws InvalidNameError for a name that is not a module or interface name; StateDirError.
 */
export function providerSecretPath(
  stateDir: string,
  provider: string,
  consumer: string,
  iface: string,
): string {
  return join(
    secretsDirPath(stateDir, provider),
    `${assertModuleName(consumer)}.${assertInterfaceName(iface)}`,
  );
}

/**
 * The consumer's own copy of its password for `iface`, which its credential file names:
 * `<state>/modules/<consumer>/passwords/<iface>`. A provider on the same node reads its own copy
 * (`providerSecretPath`): each copy is owned by the one module that reads it.
 * @throws InvalidNameError for a name that is not a module or interface name; StateDirError.
 */
export function secretPath(stateDir: string, consumer: string, iface: string): string {
  return join(moduleDir(stateDir, consumer), "passwords", assertInterfaceName(iface));
}

/**
 * Where logins alternate, the password file of the consumer's second login:
 * `<state>/modules/<consumer>/passwords/<iface>.2` (its first login's is `secretPath`). Each login
 * has its own, so a credential file and the password file it names always match.
 * @throws InvalidNameError; StateDirError.
 */
export function secondSecretPath(stateDir: string, consumer: string, iface: string): string {
  return `${secretPath(stateDir, consumer, iface)}.2`;
}

/** The password file a consumer's credential names now: its second login's when `slot` is 1. */
export function slotSecretPath(
  stateDir: string,
  consumer: string,
  iface: string,
  slot: 1 | undefined,
): string {
  return slot === 1 ? secondSecretPath(stateDir, consumer, iface) : secretPath(stateDir, consumer, iface);
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

/**
 * `<state>/modules/<module>/files/<name>`: a file the agent renders from the module's `run.files`
 * template before it starts the module, 0600 and owned by the module's user.
 * @throws StateDirError when `stateDir` is not absolute.
 */
export function renderedFilePath(stateDir: string, module: string, name: string): string {
  return join(moduleDir(stateDir, module), "files", name);
}
