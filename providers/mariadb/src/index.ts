/**
 * @mesh/provider-mariadb: the `mysql-database` provider. Each consumer gets a MariaDB user under
 * the login the mesh derived, with the password it minted, and one database it alone has rights on.
 *
 * ```ts
 * import { runProvisioner } from "@mesh/sdk";
 * import { createMariadbAdapter } from "@mesh/provider-mariadb";
 * const adapter = createMariadbAdapter({ adminUrl: process.env.MESH_MARIADB_URL ?? "", instance: "main" });
 * const handle = runProvisioner("mysql-database", adapter, { receives: "/run/mesh/mysql-database.json" });
 * ```
 */
import { defineProvider } from "@mesh/sdk";
import { createMariadbAdapter } from "./adapter.ts";
import { MARIADB_ADMIN_URL } from "./config.ts";

export { createMariadbAdapter, grantPattern, MariadbAdapter, nativePasswordHash } from "./adapter.ts";
export { MARKS_SCHEMA, type MariadbAdapterConfig, type MariadbPool } from "./config.ts";

/** How `mesh provider mariadb` finds and starts this provider. */
export const provider = defineProvider("mariadb", "mysql-database", MARIADB_ADMIN_URL, createMariadbAdapter);
