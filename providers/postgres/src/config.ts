// What is Postgres's own in the provider's settings: the admin URL's form, its TLS modes and admin
// database, the pool and its timeouts. The sdk checks the instance name and parses the URL.

import { readFileSync } from "node:fs";
import { adminUrlError, checkAdminSettings, positiveSetting } from "@mesh/sdk";
import type { AdminSettings, AdminUrlRules, CheckedAdminSettings } from "@mesh/sdk";

/** How the Postgres admin URL looks; checked by the sdk's `parseAdminUrl`. */
export const POSTGRES_ADMIN_URL: AdminUrlRules = {
  backend: "Postgres",
  ports: { "postgresql:": 5432, "postgres:": 5432 },
  env: "MESH_POSTGRES_URL",
  example: "postgresql://mesh_admin:<password>@127.0.0.1:5432/postgres",
};

/**
 * What `createPostgresAdapter` is given. The admin URL is
 * `postgresql://<admin>:<password>@<host>:<port>/<database>`; the admin must be able to CREATE ROLE
 * and CREATE DATABASE.
 */
export interface PostgresAdapterConfig extends AdminSettings {
  /** Admin connections kept open at most (5). */
  readonly poolSize?: number | undefined;
  /** How long to wait for a connection to the server, admin or consumer (10 000 ms). */
  readonly connectTimeoutMs?: number | undefined;
  /** The server-side limit on one statement (120 000 ms; CREATE DATABASE is slow on a busy disk). */
  readonly statementTimeoutMs?: number | undefined;
  /**
   * With an admin that cannot read pg_authid, over how long the consumer logins that check each
   * password are spread after a verify pass, so the next pass finds them done (54 000 ms: nine
   * tenths of the harness's default minute between verifications).
   */
  readonly loginSpreadMs?: number | undefined;
}

/** How to reach the server, without the user (the admin's or a consumer's is added per connection). */
export interface ServerAddress {
  readonly host: string;
  readonly port: number;
  readonly ssl: false | { readonly rejectUnauthorized: boolean; readonly ca?: string };
}

/** The checked configuration. */
export interface ResolvedPostgresConfig extends CheckedAdminSettings {
  readonly server: ServerAddress;
  /** The database the admin connects to; never a template, whose open sessions block CREATE DATABASE. */
  readonly adminDatabase: string;
  readonly poolSize: number;
  readonly connectTimeoutMs: number;
  readonly statementTimeoutMs: number;
  readonly loginSpreadMs: number;
}

/**
 * Checks and resolves the adapter's configuration.
 * @throws AdminSettingError naming the setting and the fix (and never the password).
 */
export function resolvePostgresConfig(config: PostgresAdapterConfig): ResolvedPostgresConfig {
  const checked = checkAdminSettings(config, POSTGRES_ADMIN_URL);
  const url = checked.admin;
  const refuse = (why: string, cause?: unknown) => adminUrlError(POSTGRES_ADMIN_URL, url.text, why, cause);
  const adminDatabase = url.path || "postgres";
  if (adminDatabase === "template0" || adminDatabase === "template1") {
    throw refuse(
      `connects to ${adminDatabase}, and an open session there makes every CREATE DATABASE fail; ` +
        `point it at postgres (or another ordinary database)`,
    );
  }
  const sslmode = url.url.searchParams.get("sslmode") ?? "prefer";
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
      const rootCert = url.url.searchParams.get("sslrootcert");
      let ca: string | undefined;
      if (rootCert) {
        try {
          ca = readFileSync(rootCert, "utf8");
        } catch (err) {
          throw refuse(`names sslrootcert ${JSON.stringify(rootCert)}, which cannot be read`, err);
        }
      }
      ssl = ca === undefined ? { rejectUnauthorized: true } : { rejectUnauthorized: true, ca };
      break;
    }
    default:
      throw refuse(`has sslmode=${JSON.stringify(sslmode)}, which is not one PostgreSQL knows`);
  }
  return {
    ...checked,
    server: { host: url.host, port: url.port, ssl },
    adminDatabase,
    poolSize: positiveSetting("poolSize", config.poolSize, 5),
    connectTimeoutMs: positiveSetting("connectTimeoutMs", config.connectTimeoutMs, 10_000),
    statementTimeoutMs: positiveSetting("statementTimeoutMs", config.statementTimeoutMs, 120_000),
    loginSpreadMs: positiveSetting("loginSpreadMs", config.loginSpreadMs, 54_000),
  };
}
