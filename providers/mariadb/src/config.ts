// The admin URL and the knobs of the MariaDB adapter, checked once so a mistake is said in words
// before any connection is tried.

import type { Logger } from "@mesh/sdk";

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

/**
 * The subset of a mysql2 promise pool the adapter uses. Typed here so a test or a benchmark can
 * wrap the real one (to count queries) and so the vendor stays replaceable.
 */
export interface MariadbPool {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  end(): Promise<void>;
}

/** What `createMariadbAdapter` is given. */
export interface MariadbAdapterConfig {
  /** `mysql://<admin>:<password>@<host>:<port>`; the admin needs `REQUIRED_ADMIN_GRANT`. */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
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

/** A setting cannot be used. The message never contains the admin's password. */
export class MariadbConfigError extends Error {
  override name = "MariadbConfigError";
  constructor(
    readonly setting: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What an instance name may be: it is stored in the marks table's `instance` column. */
export const INSTANCE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

/**
 * Checks and resolves the adapter's configuration.
 * @throws MariadbConfigError naming the setting and the fix, never echoing the password.
 */
export function resolveMariadbConfig(config: MariadbAdapterConfig): ResolvedMariadbConfig {
  const instance = config.instance;
  if (typeof instance !== "string" || !INSTANCE_PATTERN.test(instance)) {
    throw new MariadbConfigError(
      "instance",
      `provider instance name ${JSON.stringify(instance)} is not usable: give 1–64 characters of letters, ` +
        `digits, "_", ".", ":" and "-", starting with a letter or digit`,
    );
  }
  const raw = typeof config.adminUrl === "string" ? config.adminUrl.trim() : "";
  if (raw === "") {
    throw new MariadbConfigError(
      "adminUrl",
      `no MariaDB admin URL: give mysql://<admin>:<password>@<host>:<port> with --admin-url or ${ADMIN_URL_ENV}`,
    );
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch (err) {
    // Not shown at all: a string that is not a URL may be a password pasted in the wrong place.
    throw badUrl("is not a URL", err);
  }
  if (url.protocol !== "mysql:" && url.protocol !== "mariadb:") {
    throw badUrl(`has the scheme ${JSON.stringify(url.protocol)}, not mysql: or mariadb:`);
  }
  const decode = (part: string, what: string): string => {
    try {
      return decodeURIComponent(part);
    } catch (err) {
      throw badUrl(`has a ${what} that is not properly %-encoded`, err);
    }
  };
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
  if (host === "") throw badUrl("names no host");
  const port = url.port === "" ? 3306 : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw badUrl("has no valid port");
  const adminUser = decode(url.username, "user name");
  if (adminUser === "") throw badUrl("names no admin user");
  return {
    host,
    port,
    adminUser,
    adminPassword: decode(url.password, "password"),
    endpoint: `${host}:${port}`,
    instance,
    poolSize: positive("poolSize", config.poolSize, 4),
    connectTimeoutMs: positive("connectTimeoutMs", config.connectTimeoutMs, 10_000),
  };
}

function badUrl(why: string, cause?: unknown): MariadbConfigError {
  return new MariadbConfigError(
    "adminUrl",
    `the MariaDB admin URL ${why}; give mysql://<admin>:<password>@<host>:<port> with --admin-url or ${ADMIN_URL_ENV}`,
    cause === undefined ? undefined : { cause },
  );
}

function positive(setting: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value <= 0) {
    throw new MariadbConfigError(setting, `${setting} must be a positive whole number, not ${String(value)}`);
  }
  return value;
}
