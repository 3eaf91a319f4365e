// What is MariaDB's own in the provider's settings: the admin URL's form, the grant the admin needs,
// the schema of the marks, the pool. The sdk checks the instance name and parses the URL.

import { assertInstance, parseAdminUrl, positiveSetting, type AdminUrlRules, type Logger } from "@mesh/sdk";
import type { MariadbPool } from "./adapter.ts";

/** Where the admin URL is read from when no flag gives it. */
export const ADMIN_URL_ENV = "MESH_MARIADB_URL";

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

/** What `createMariadbAdapter` is given. */
export interface MariadbAdapterConfig {
  /** `mysql://<admin>:<password>@<host>:<port>`; the admin needs `REQUIRED_ADMIN_GRANT`. */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
  /** Accepted as every provider's config takes one; this adapter has nothing of its own to say. */
  readonly logger?: Logger | undefined;
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
export interface ResolvedMariadbConfig {
  readonly host: string;
  readonly port: number;
  readonly adminUser: string;
  readonly adminPassword: string;
  /** `host:port`, for messages: never the URL, which holds the admin's password. */
  readonly endpoint: string;
  readonly instance: string;
  readonly poolSize: number;
  readonly connectTimeoutMs: number;
}

/** How the MariaDB admin URL looks; checked by the sdk's `parseAdminUrl`. */
export const MARIADB_ADMIN_URL: AdminUrlRules = {
  backend: "MariaDB",
  schemes: ["mysql:", "mariadb:"],
  defaultPort: 3306,
  env: ADMIN_URL_ENV,
  example: "mysql://<admin>:<password>@<host>:<port>",
};

/**
 * Checks and resolves the adapter's configuration.
 * @throws AdminSettingError naming the setting and the fix, never echoing the password.
 */
export function resolveMariadbConfig(config: MariadbAdapterConfig): ResolvedMariadbConfig {
  const instance = assertInstance(config.instance);
  const url = parseAdminUrl(config.adminUrl, MARIADB_ADMIN_URL);
  return {
    host: url.host,
    port: url.port,
    adminUser: url.user,
    adminPassword: url.password,
    endpoint: url.endpoint,
    instance,
    poolSize: positiveSetting("poolSize", config.poolSize, 4),
    connectTimeoutMs: positiveSetting("connectTimeoutMs", config.connectTimeoutMs, 10_000),
  };
}
