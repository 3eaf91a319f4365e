// The admin URL, the instance name and the policy of what a consumer may run, checked once so a
// mistake is said in words before any connection is tried.

import type { Logger } from "@mesh/sdk";

/** Where the admin URL is read from when no flag gives it. */
export const ADMIN_URL_ENV = "MESH_REDIS_URL";

/** What `createRedisAdapter` is given. */
export interface RedisAdapterConfig {
  /**
   * `redis://<admin>:<password>@<host>:<port>` (or `rediss://` for TLS). The admin must be allowed
   * ACL, CLIENT KILL, CONFIG GET, SCAN, MEMORY USAGE, UNLINK and INFO.
   */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
  /** Where the one-time warnings (no ACL file, server gone and back) are said. */
  readonly logger?: Logger | undefined;
  /** How long to wait for a TCP connection to the server (5 000 ms). */
  readonly connectTimeoutMs?: number | undefined;
  /** How long one command may wait for its reply (15 000 ms). */
  readonly commandTimeoutMs?: number | undefined;
}

/** The checked configuration. */
export interface ResolvedRedisConfig {
  readonly adminUrl: string;
  /** `host:port`, for messages: never the URL, which holds the admin's password. */
  readonly endpoint: string;
  readonly instance: string;
  readonly connectTimeoutMs: number;
  readonly commandTimeoutMs: number;
}

/** A setting cannot be used. The message never contains the admin's password. */
export class RedisConfigError extends Error {
  override name = "RedisConfigError";
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * What an instance name may be: it becomes part of an ACL user name, which may hold no space, and
 * the `:` that separates it from the login must stay unambiguous.
 */
export const INSTANCE_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The commands every consumer may run, as ACL rules. Everything but administration and what
 * reaches past the consumer's own keys: `@admin` and `@dangerous` (ACL, CONFIG, CLIENT KILL/LIST,
 * DEBUG, MODULE, SHUTDOWN, MIGRATE, FLUSHALL/FLUSHDB, KEYS, SWAPDB, INFO, SLOWLOG, MONITOR, SORT),
 * `@scripting` (a script is one more way past per-command checks), and the few commands Redis does
 * not confine to the key and channel patterns, which would list other consumers' key and channel
 * names: SCAN, RANDOMKEY, PUBSUB CHANNELS and PUBSUB SHARDCHANNELS. A consumer iterates its own keys
 * in its own sets, hashes or sorted sets (SSCAN, HSCAN and ZSCAN are confined to the key).
 */
export const CONSUMER_COMMAND_RULES: readonly string[] = [
  "+@all",
  "-@admin",
  "-@dangerous",
  "-@scripting",
  "-scan",
  "-randomkey",
  "-pubsub|channels",
  "-pubsub|shardchannels",
];

/**
 * The least an admin user needs, as ACL rules after its name, `on` and its password: ACL to make
 * users, CLIENT KILL to end a retired consumer's connections, CONFIG GET to see whether there is an
 * ACL file, and INFO, SELECT, SCAN, MEMORY USAGE and UNLINK on every key to delete a consumer's keys.
 * Whoever may run ACL SETUSER can give itself anything, so this limits mistakes, not trust.
 */
export const ADMIN_RULES: readonly string[] = [
  "~*",
  "resetchannels",
  "-@all",
  "+acl",
  "+client|kill",
  "+config|get",
  "+info",
  "+ping",
  "+select",
  "+scan",
  "+memory|usage",
  "+unlink",
  "+multi",
  "+exec",
];

/**
 * Checks the configuration.
 * @throws RedisConfigError naming the setting and the fix, never echoing the password.
 */
export function resolveRedisConfig(config: RedisAdapterConfig): ResolvedRedisConfig {
  const instance = config.instance;
  if (!INSTANCE_PATTERN.test(instance)) {
    throw new RedisConfigError(
      "instance",
      `provider instance name ${JSON.stringify(instance)} is not usable: it names this provider in ACL ` +
        `user names, so give 1–64 characters of letters, digits, "_", "." and "-"`,
    );
  }
  let url: URL;
  try {
    url = new URL(config.adminUrl.trim());
  } catch {
    // Not shown at all: a string that is not a URL may be a password pasted in the wrong place.
    throw badUrl("is not a URL");
  }
  if (url.protocol !== "redis:" && url.protocol !== "rediss:") {
    throw badUrl(`has scheme ${JSON.stringify(url.protocol)}, not redis: or rediss:`);
  }
  if (url.hostname === "") throw badUrl("names no host");
  if (url.password === "") throw badUrl("has no password: the admin must authenticate");
  const port = url.port === "" ? "6379" : url.port;
  return {
    adminUrl: config.adminUrl.trim(),
    endpoint: `${url.hostname}:${port}`,
    instance,
    connectTimeoutMs: positive(config.connectTimeoutMs, 5_000, "connectTimeoutMs"),
    commandTimeoutMs: positive(config.commandTimeoutMs, 15_000, "commandTimeoutMs"),
  };
}

function badUrl(why: string): RedisConfigError {
  return new RedisConfigError(
    "adminUrl",
    `the Redis admin URL ${why}; give redis://<admin>:<password>@<host>:<port> with --admin-url or ${ADMIN_URL_ENV}`,
  );
}

function positive(value: number | undefined, fallback: number, setting: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0) {
    throw new RedisConfigError(setting, `${setting} is ${value}; give a positive number of milliseconds`);
  }
  return value;
}
