// The admin URL and the knobs of the Postgres adapter, checked once so a mistake is said in words
// (naming where the URL came from) before any connection is tried.

import { readFileSync } from "node:fs";
import { redactUrl, type Logger } from "@mesh/sdk";

/** Where the admin URL is read from when no flag gives it. */
export const ADMIN_URL_ENV = "MESH_POSTGRES_URL";

/** What `createPostgresAdapter` is given. */
export interface PostgresAdapterConfig {
  /** `postgresql://admin:password@host:port/database`; the admin must be able to CREATE ROLE and CREATE DATABASE. */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
  readonly logger?: Logger | undefined;
  /** Admin connections kept open at most (5). */
  readonly poolSize?: number | undefined;
  /** How long to wait for a connection to the server, admin or consumer (10 000 ms). */
  readonly connectTimeoutMs?: number | undefined;
  /** The server-side limit on one statement (120 000 ms; CREATE DATABASE is slow on a busy disk). */
  readonly statementTimeoutMs?: number | undefined;
}

/** How to reach the server, without the user (the admin's or a consumer's is added per connection). */
export interface ServerAddress {
  readonly host: string;
  readonly port: number;
  readonly ssl: false | { readonly rejectUnauthorized: boolean; readonly ca?: string };
}

/** The checked configuration. */
export interface ResolvedPostgresConfig {
  readonly server: ServerAddress;
  readonly adminUser: string;
  readonly adminPassword: string;
  /** The database the admin connects to; never a template, whose open sessions block CREATE DATABASE. */
  readonly adminDatabase: string;
  readonly instance: string;
  readonly poolSize: number;
  readonly connectTimeoutMs: number;
  readonly statementTimeoutMs: number;
}

/** The admin URL (or another setting) cannot be used. The message never contains the password. */
export class PostgresConfigError extends Error {
  override name = "PostgresConfigError";
  constructor(
    readonly setting: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

function badUrl(raw: string, why: string, cause?: unknown): PostgresConfigError {
  return new PostgresConfigError(
    "adminUrl",
    `the Postgres admin URL ${JSON.stringify(redactUrl(raw.trim()))} ${why}; give ` +
      `postgresql://<admin>:<password>@<host>:<port>/<database> with --admin-url or ${ADMIN_URL_ENV}`,
    cause === undefined ? undefined : { cause },
  );
}

function positive(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value <= 0) {
    throw new PostgresConfigError(name, `${name} must be a positive whole number, not ${String(value)}`);
  }
  return value;
}

const INSTANCE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$/;

/**
 * Checks and resolves the adapter's configuration.
 * @throws PostgresConfigError naming the setting and the fix (and never the password).
 */
export function resolvePostgresConfig(config: PostgresAdapterConfig): ResolvedPostgresConfig {
  const raw = config.adminUrl;
  if (typeof raw !== "string" || raw.trim() === "") {
    throw new PostgresConfigError(
      "adminUrl",
      `no Postgres admin URL: give one with --admin-url or ${ADMIN_URL_ENV} ` +
        `(postgresql://<admin>:<password>@<host>:<port>/<database>)`,
    );
  }
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch (err) {
    throw badUrl(raw, "is not a URL", err);
  }
  if (url.protocol !== "postgresql:" && url.protocol !== "postgres:") {
    throw badUrl(raw, `has the scheme ${JSON.stringify(url.protocol)}, not postgresql:`);
  }
  const decode = (part: string, what: string): string => {
    try {
      return decodeURIComponent(part);
    } catch (err) {
      throw badUrl(raw, `has a ${what} that is not properly %-encoded`, err);
    }
  };
  const adminUser = decode(url.username, "user name");
  if (adminUser === "") throw badUrl(raw, "names no admin user");
  const adminPassword = decode(url.password, "password");
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || url.searchParams.get("host") || "";
  if (host === "") throw badUrl(raw, "names no host");
  const port = url.port === "" ? Number(url.searchParams.get("port") ?? 5432) : Number(url.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw badUrl(raw, "has no valid port");
  const adminDatabase = decode(url.pathname.replace(/^\//, ""), "database name") || "postgres";
  if (adminDatabase === "template0" || adminDatabase === "template1") {
    throw badUrl(
      raw,
      `connects to ${adminDatabase}, and an open session there makes every CREATE DATABASE fail; ` +
        `point it at postgres (or another ordinary database)`,
    );
  }
  const sslmode = url.searchParams.get("sslmode") ?? "prefer";
  let ssl: ServerAddress["ssl"];
  switch (sslmode) {
    case "disable":
    case "allow":
    case "prefer":
      ssl = false;
      break;
    case "require":
      ssl = { rejectUnauthorized: false };
      break;
    case "verify-ca":
    case "verify-full": {
      const rootCert = url.searchParams.get("sslrootcert");
      let ca: string | undefined;
      if (rootCert) {
        try {
          ca = readFileSync(rootCert, "utf8");
        } catch (err) {
          throw badUrl(raw, `names sslrootcert ${JSON.stringify(rootCert)}, which cannot be read`, err);
        }
      }
      ssl = ca === undefined ? { rejectUnauthorized: true } : { rejectUnauthorized: true, ca };
      break;
    }
    default:
      throw badUrl(raw, `has sslmode=${JSON.stringify(sslmode)}, which is not one PostgreSQL knows`);
  }
  const instance = config.instance;
  if (typeof instance !== "string" || !INSTANCE.test(instance)) {
    throw new PostgresConfigError(
      "instance",
      `provider instance name ${JSON.stringify(instance)} is not valid: 1–63 characters of letters, digits, ` +
        `_ . : -, starting with a letter or digit`,
    );
  }
  return {
    server: { host, port, ssl },
    adminUser,
    adminPassword,
    adminDatabase,
    instance,
    poolSize: positive("poolSize", config.poolSize, 5),
    connectTimeoutMs: positive("connectTimeoutMs", config.connectTimeoutMs, 10_000),
    statementTimeoutMs: positive("statementTimeoutMs", config.statementTimeoutMs, 120_000),
  };
}
