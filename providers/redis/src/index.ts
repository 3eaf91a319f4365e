/**
 * @mesh/provider-redis: the `redis-namespace` provider. Each consumer gets a Redis ACL user under the
 * login the mesh derived, with the password it minted, confined to the keys and channels `<login>:*`.
 *
 * ```ts
 * import { runProvisioner } from "@mesh/sdk";
 * import { createRedisAdapter } from "@mesh/provider-redis";
 * const adapter = createRedisAdapter({ adminUrl: process.env.MESH_REDIS_URL ?? "", instance: "main" });
 * const handle = runProvisioner("redis-namespace", adapter, { receives: "/run/mesh/redis-namespace.json" });
 * ```
 */
import { defineProvider } from "@mesh/sdk";
import { createRedisAdapter } from "./adapter.ts";
import { REDIS_ADMIN_URL } from "./config.ts";

export { createRedisAdapter, RedisNamespaceAdapter, type RedisBatch, type RedisClient } from "./adapter.ts";
export { CONSUMER_COMMAND_RULES, resolveRedisConfig, type RedisAdapterConfig } from "./config.ts";

/** How `mesh provider redis` finds and starts this provider. */
export const provider = defineProvider("redis", "redis-namespace", REDIS_ADMIN_URL, createRedisAdapter);
