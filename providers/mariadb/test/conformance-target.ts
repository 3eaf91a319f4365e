// The MariaDB provider as the conformance kit sees it: a private server, a non-root admin for the
// adapter, and root for looking from outside (as a person would).

import mysql from "mysql2/promise";
import type { Provision } from "@mesh/sdk";
import {
  providerTarget,
  quietLogger,
  startMariadb,
  type ConformanceTarget,
  type MariadbServer,
} from "@mesh/testkit";
import { grantPattern, MARKS_SCHEMA, provider } from "../src/index.ts";
import { databaseFor } from "../src/adapter.ts";

function errnoOf(err: unknown): number | undefined {
  const errno = (err as { errno?: unknown } | null)?.errno;
  return typeof errno === "number" ? errno : undefined;
}

/** Values that try to break out of quoting: every one must be refused before it reaches SQL. */
export const HOSTILE_VALUES: readonly Readonly<Record<string, unknown>>[] = [
  { name: "x`; DROP DATABASE mysql; --" },
  { name: "a'b" },
  { name: 'a"b' },
  { name: "a b" },
  { name: "a%" },
  { name: "a\nb" },
  { name: "a\\" },
  { name: "*" },
  { name: "Upper" },
  { name: "" },
  { name: "mysql" },
  { name: "information_schema" },
  { name: MARKS_SCHEMA },
  { name: 42 },
  { name: ["a"] },
];

/** Connects as a consumer; the caller ends the connection. */
export async function connectAs(
  server: MariadbServer,
  login: string,
  password: string,
  database?: string,
): Promise<mysql.Connection> {
  return mysql.createConnection({
    host: server.host,
    port: server.port,
    user: login,
    password,
    connectTimeout: 10_000,
    ...(database === undefined ? {} : { database }),
  });
}

/** Whether `run` succeeded: a refusal is false; anything else unexpected is thrown. */
async function allowed(run: () => Promise<unknown>): Promise<boolean> {
  try {
    await run();
    return true;
  } catch (err) {
    // Access denied (database, table, command), or the table is not visible to this user at all.
    if ([1044, 1142, 1143, 1146, 1049, 1227].includes(errnoOf(err) ?? 0)) return false;
    throw err;
  }
}

/** This provider's conformance target. */
export const target: ConformanceTarget = providerTarget(provider, async () => {
  const server = await startMariadb();
  let adminUrl: string;
  let root: mysql.Pool;
  try {
    adminUrl = await server.createAdmin("mesh_admin");
    root = mysql.createPool({ uri: server.rootUrl, connectionLimit: 2 });
  } catch (err) {
    await server.stop();
    throw err;
  }
  const dbOf = (p: Provision): string => databaseFor(p.as, p.values);

  return {
    adminUrl,
    logger: quietLogger,
    canLogin: (p, password = p.password) => server.canLogin(p.as, password),
    async writeData(p, marker) {
      const conn = await connectAs(server, p.as, p.password, dbOf(p));
      try {
        await conn.query("CREATE TABLE IF NOT EXISTS conformance (marker TEXT NOT NULL)");
        await conn.query("DELETE FROM conformance");
        await conn.query("INSERT INTO conformance (marker) VALUES (?)", [marker]);
      } finally {
        await conn.end();
      }
    },
    async readData(p) {
      try {
        const [rows] = await root.query<mysql.RowDataPacket[]>(
          mysql.format("SELECT marker FROM ??.conformance LIMIT 1", [dbOf(p)]),
        );
        const marker: unknown = rows[0]?.marker;
        return typeof marker === "string" ? marker : undefined;
      } catch (err) {
        if ([1146, 1049].includes(errnoOf(err) ?? 0)) return undefined;
        throw err;
      }
    },
    async canReachOther(p, other) {
      const conn = await connectAs(server, p.as, p.password);
      try {
        const theirs = dbOf(other);
        const reads = await allowed(() => conn.query(mysql.format("SELECT * FROM ??.conformance", [theirs])));
        const writes = await allowed(() =>
          conn.query(mysql.format("CREATE TABLE ??.intruder (v INT)", [theirs])),
        );
        const uses = await allowed(() => conn.query(mysql.format("USE ??", [theirs])));
        const marks = await allowed(() => conn.query(mysql.format("SELECT * FROM ??.marks", [MARKS_SCHEMA])));
        const changesMarks = await allowed(() =>
          conn.query(mysql.format("DELETE FROM ??.marks", [MARKS_SCHEMA])),
        );
        return reads || writes || uses || marks || changesMarks;
      } finally {
        await conn.end();
      }
    },
    async changePassword(as, password) {
      await root.query(mysql.format("ALTER USER ?@'%' IDENTIFIED BY ?", [as, password]));
    },
    async dropLogin(as) {
      await root.query(mysql.format("DROP USER ?@'%'", [as]));
    },
    async createForeign(as, password) {
      await root.query(mysql.format("CREATE USER ?@'%' IDENTIFIED BY ?", [as, password]));
      await root.query(mysql.format("CREATE DATABASE IF NOT EXISTS ??", [as]));
      await root.query(mysql.format(`GRANT ALL ON ${mysql.escapeId(grantPattern(as))}.* TO ?@'%'`, [as]));
    },
    hostileValues: HOSTILE_VALUES,
    plainValues: {},
    halt: () => server.halt(),
    resume: () => server.resume(),
    async stop() {
      await root.end().catch(() => {});
      await server.stop();
    },
  };
});
