/**
 * @mesh/provider-postgres: the `postgres-database` provider. Each consumer gets a role under the
 * login the mesh derived, with the password it minted, and a database it owns.
 *
 * ```ts
 * import { runProvisioner } from "@mesh/sdk";
 * import { createPostgresAdapter } from "@mesh/provider-postgres";
 * const adapter = createPostgresAdapter({ adminUrl: process.env.MESH_POSTGRES_URL ?? "", instance: "main" });
 * const handle = runProvisioner("postgres-database", adapter, { receives: "/run/mesh/postgres-database.json" });
 * ```
 */
import { defineProvider } from "@mesh/sdk";
import { createPostgresAdapter } from "./adapter.ts";
import { POSTGRES_ADMIN_URL } from "./config.ts";

export { createPostgresAdapter, formatMark, PostgresAdapter } from "./adapter.ts";
export type { PostgresAdapterConfig } from "./config.ts";
export { scramVerifier } from "./scram.ts";

/** How `mesh provider postgres` finds and starts this provider. */
export const provider = defineProvider(
  "postgres",
  "postgres-database",
  POSTGRES_ADMIN_URL,
  createPostgresAdapter,
);
