// What is Redis's own in the provider's settings: its admin URL's form, its timeouts, and the policy
// of what a consumer and the admin may run. The sdk checks the instance name and the URL.

import { checkAdminSettings, positiveSetting } from "@mesh/sdk";
import type { AdminSettings, AdminUrlRules, CheckedAdminSettings } from "@mesh/sdk";

/** How the Redis admin URL looks; checked by the sdk's `parseAdminUrl`. */
export const REDIS_ADMIN_URL: AdminUrlRules = {
  backend: "Redis",
  ports: { "redis:": 6379, "rediss:": 6379 },
  env: "MESH_REDIS_URL",
  example: "redis://mesh-admin:<password>@127.0.0.1:6379",
  // Redis's `default` user is the admin when the URL names none.
  needsUser: false,
  needsPassword: true,
};

/**
 * What `createRedisAdapter` is given. The admin URL is `redis://<admin>:<password>@<host>:<port>`
 * (or `rediss://` for TLS); the admin must be allowed ADMIN_RULES. The logger hears the one-time
 * warnings (no ACL file, server gone and back).
 */
export interface RedisAdapterConfig extends AdminSettings {
  /** How long to wait for a TCP connection to the server (5 000 ms). */
  readonly connectTimeoutMs?: number | undefined;
  /** How long one command may wait for its reply (15 000 ms). */
  readonly commandTimeoutMs?: number | undefined;
}

/** The checked configuration. */
export interface ResolvedRedisConfig extends CheckedAdminSettings {
  readonly connectTimeoutMs: number;
  readonly commandTimeoutMs: number;
}

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
 * What a consumer whose need says `monitoring: true` may run besides: INFO, the server-wide counters
 * (memory, clients, commands, keys per database) a metrics exporter reads. INFO names no key and no
 * other consumer; CONFIG, CLIENT LIST, SLOWLOG and the rest of `@admin` stay refused.
 */
export const MONITORING_COMMAND_RULES: readonly string[] = ["+info"];

/** The command rules of a consumer, with MONITORING_COMMAND_RULES when it asked for monitoring. */
export function consumerCommandRules(monitoring: boolean): readonly string[] {
  return monitoring ? [...CONSUMER_COMMAND_RULES, ...MONITORING_COMMAND_RULES] : CONSUMER_COMMAND_RULES;
}

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
 * @throws AdminSettingError naming the setting and the fix, never echoing the password.
 */
export function resolveRedisConfig(config: RedisAdapterConfig): ResolvedRedisConfig {
  return {
    ...checkAdminSettings(config, REDIS_ADMIN_URL),
    connectTimeoutMs: positiveSetting("connectTimeoutMs", config.connectTimeoutMs, 5_000),
    commandTimeoutMs: positiveSetting("commandTimeoutMs", config.commandTimeoutMs, 15_000),
  };
}
