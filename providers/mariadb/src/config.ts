// What is MariaDB's own in the provider's settings: the admin URL's form, the grant the admin needs,
// the schema of the marks, the pool. The sdk checks the instance name and parses the URL.

import { checkAdminSettings, positiveSetting } from "@mesh/sdk";
import type { AdminSettings, AdminUrlRules, CheckedAdminSettings } from "@mesh/sdk";

/**
 * The subset of a mysql2 promise pool the adapter uses, beside the setting that may wrap it: a test
 * or a benchmark wraps the real one (to count queries), and the vendor stays replaceable.
 */
export interface MariadbPool {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  end(): Promise<void>;
}

/** How the MariaDB admin URL looks; checked by the sdk's `parseAdminUrl`. */
export const MARIADB_ADMIN_URL: AdminUrlRules = {
  backend: "MariaDB",
  ports: { "mysql:": 3306, "mariadb:": 3306 },
  env: "MESH_MARIADB_URL",
  example: "mysql://mesh_admin:<password>@127.0.0.1:3306",
};

/**
 * The schema holding the provider's marks. Consumers are granted only their own database, so none
 * can read or change it; no consumer may be given a database of this name.
 */
export const MARKS_SCHEMA = "mesh_provider";

/**
 * What the admin needs, as a GRANT: database-level rights on every database WITH GRANT OPTION (to
 * grant ALL on a consumer's database the grantor must hold each right with GRANT OPTION), CREATE
 * USER, PROCESS (to see a retired consumer's sessions) and CONNECTION ADMIN (to end them). SELECT
 * covers reading password hashes and grants from the `mysql` schema.
 */
export const REQUIRED_ADMIN_GRANT =
  "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, CREATE TEMPORARY TABLES, " +
  "LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, " +
  "DELETE HISTORY, CREATE USER, PROCESS, CONNECTION ADMIN ON *.* TO '<admin>'@'<host>' WITH GRANT OPTION";

/**
 * What `createMariadbAdapter` is given. The admin URL is `mysql://<admin>:<password>@<host>:<port>`;
 * the admin needs `REQUIRED_ADMIN_GRANT`.
 */
export interface MariadbAdapterConfig extends AdminSettings {
  /** Admin connections kept open at most (4). */
  readonly poolSize?: number | undefined;
  /** How long to wait for a connection to the server (10 000 ms). */
  readonly connectTimeoutMs?: number | undefined;
  /**
   * Wraps the pool the adapter makes, for a benchmark or test that counts or delays queries. The
   * adapter ends what it returns on `close()`.
   */
  readonly wrapPool?: ((pool: MariadbPool) => MariadbPool) | undefined;
}

/** The checked configuration. */
export interface ResolvedMariadbConfig extends CheckedAdminSettings {
  readonly poolSize: number;
  readonly connectTimeoutMs: number;
}

/**
 * Checks and resolves the adapter's configuration.
 * @throws AdminSettingError naming the setting and the fix, never echoing the password.
 */
export function resolveMariadbConfig(config: MariadbAdapterConfig): ResolvedMariadbConfig {
  return {
    ...checkAdminSettings(config, MARIADB_ADMIN_URL),
    poolSize: positiveSetting("poolSize", config.poolSize, 4),
    connectTimeoutMs: positiveSetting("connectTimeoutMs", config.connectTimeoutMs, 10_000),
  };
}
