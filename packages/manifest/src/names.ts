// Names end up in file paths, NATS subjects, logins and SQL identifiers. Each is restricted here,
// once, to characters that mean nothing special in any of them, so no later step has to escape.

/** A module's name (as in a manifest's `name` and a fleet's `modules`): also a path segment and a subject token. */
export const MODULE_NAME_PATTERN = /^[a-z][a-z0-9-]{0,40}$/;
/** A node's name in a fleet: the same rule as a module's, for the same reasons. */
export const NODE_NAME_PATTERN = MODULE_NAME_PATTERN;
/** An interface (`postgres-database`): also a file name and a subject token. */
export const INTERFACE_PATTERN = /^[a-z][a-z0-9-]*$/;
/** A key in a provider's `spec` or `derives` (`name`, `extensions`). */
export const SPEC_KEY_PATTERN = /^[a-z][a-zA-Z0-9_]{0,63}$/;
/** A tool a module offers (`status`, `retire approve`). */
export const TOOL_PATTERN = /^[a-z][a-z0-9-]*( [a-z][a-z0-9-]*)*$/;

const EVENT_PART = /^[a-z0-9][a-z0-9_-]*$/;

/** How a module name must look, for messages. */
export const MODULE_NAME_RULE = '1–41 characters of a-z, 0-9 and "-", starting with a letter, like "notes"';
/** How a node name must look, for messages. */
export const NODE_NAME_RULE = '1–41 characters of a-z, 0-9 and "-", starting with a letter, like "node-1"';
/** How an interface name must look, for messages. */
export const INTERFACE_RULE = 'a-z, 0-9 and "-", starting with a letter, like "postgres-database"';

/** A name that would be unsafe in a path, subject or login was handed to a derivation. */
export class InvalidNameError extends Error {
  override name = "InvalidNameError";
  constructor(
    /** What the name was meant to be: `module`, `node` or `interface`. */
    readonly kind: "module" | "node" | "interface",
    readonly value: string,
    rule: string,
  ) {
    super(
      `${kind} name ${JSON.stringify(value)} is not valid: it must be ${rule}; refused before it reaches a path or a login`,
    );
  }
}

/** Whether `name` is a valid module name. */
export function isModuleName(name: unknown): name is string {
  return typeof name === "string" && MODULE_NAME_PATTERN.test(name);
}

/** Whether `name` is a valid interface name. */
export function isInterfaceName(name: unknown): name is string {
  return typeof name === "string" && INTERFACE_PATTERN.test(name);
}

/**
 * Returns `name` when it is a valid module name.
 * @throws InvalidNameError when it is not.
 */
export function assertModuleName(name: string): string {
  if (!isModuleName(name)) throw new InvalidNameError("module", String(name), MODULE_NAME_RULE);
  return name;
}

/**
 * Returns `name` when it is a valid interface name.
 * @throws InvalidNameError when it is not.
 */
export function assertInterfaceName(name: string): string {
  if (!isInterfaceName(name)) throw new InvalidNameError("interface", String(name), INTERFACE_RULE);
  return name;
}

function partsProblem(name: string): string | undefined {
  for (const part of name.split(".")) {
    if (part === "") return "has an empty part (two dots, or a dot at an end)";
    if (!EVENT_PART.test(part)) {
      return (
        `has the part ${JSON.stringify(part)}: each dot-separated part is a-z, 0-9, "_" and "-", ` +
        `starting with a letter or digit (no "*", ">", "$", spaces or uppercase)`
      );
    }
  }
  return undefined;
}

/**
 * Why `name` is not a valid local event name (`bucket.created`), or undefined when it is. A local
 * name becomes the tail of a subject under the emitting module's namespace, so it may hold no
 * wildcard (`*`, `>`), no `$`, no whitespace, no uppercase and no empty part.
 */
export function eventNameProblem(name: string): string | undefined {
  if (name === "") return "is empty";
  if (name === "**") return '"**" means every event, and only a subscription may use it';
  const why = partsProblem(name);
  return why === undefined ? undefined : `${JSON.stringify(name)} ${why}`;
}

/**
 * Why `pattern` is not a valid subscription, or undefined when it is. A subscription is `**` (every
 * event), `<module or seat>.<event>`, or `<module or seat>.**` (every event of that source).
 */
export function subscriptionProblem(pattern: string): string | undefined {
  if (pattern === "**") return undefined;
  const dot = pattern.indexOf(".");
  if (dot < 0) {
    return `${JSON.stringify(pattern)} names no event after its module`;
  }
  const source = pattern.slice(0, dot);
  const event = pattern.slice(dot + 1);
  if (!MODULE_NAME_PATTERN.test(source)) {
    return `${JSON.stringify(pattern)} starts with ${JSON.stringify(source)}, which is not a module or seat name (${MODULE_NAME_RULE})`;
  }
  if (event === "**") return undefined;
  const why = event === "" ? "is empty" : partsProblem(event);
  return why === undefined ? undefined : `${JSON.stringify(pattern)}: its event ${why}`;
}
