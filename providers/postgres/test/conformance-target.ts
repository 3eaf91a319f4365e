// The Postgres provider as the conformance kit sees it: a private PostgreSQL 15 with scram-sha-256,
// an admin that is NOT a superuser (CREATEROLE + CREATEDB, as a managed PostgreSQL hands out), and
// an outside view of the server through the superuser and the consumers' own logins.

import pg from "pg";
import type { Provision } from "@mesh/sdk";
import {
  startPostgres,
  type ConformanceTarget,
  type PostgresServer,
  type TargetServer,
  quietLogger,
} from "@mesh/testkit";
import { createPostgresAdapter } from "../src/index.ts";

/** The database a consumer's resource lives in, as the adapter derives it. */
export function databaseOf(p: Provision): string {
  const name = p.values["name"];
  return typeof name === "string" ? name : p.as;
}

const REFUSED_LOGIN = new Set(["28P01", "28000", "3D000", "42501"]);

/** Runs `work` as `user` on `database`; undefined when the server refuses the login. */
export async function asUser<T>(
  server: PostgresServer,
  user: string,
  password: string,
  database: string,
  work: (client: pg.Client) => Promise<T>,
): Promise<{ refused: true } | { refused: false; value: T }> {
  const client = new pg.Client({
    host: server.host,
    port: server.port,
    user,
    password,
    database,
    connectionTimeoutMillis: 15_000,
  });
  client.on("error", () => {});
  try {
    await client.connect();
  } catch (err) {
    if (REFUSED_LOGIN.has((err as { code?: string }).code ?? "")) return { refused: true };
    throw err;
  }
  try {
    return { refused: false, value: await work(client) };
  } finally {
    await client.end().catch(() => {});
  }
}

async function databasesOwnedBy(server: PostgresServer, login: string): Promise<string[]> {
  const rows = await server.query<{ datname: string }>(
    "SELECT d.datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE r.rolname = $1",
    [login],
  );
  return rows.map((r) => r.datname);
}

/** Starts a server and answers it with the kit's outside view; `adminUrl` is the non-superuser admin. */
export async function startTargetServer(): Promise<TargetServer & { pg: PostgresServer; adminUrl: string }> {
  const server = await startPostgres();
  const adminUrl = await server.createAdmin("mesh_admin");
  const id = pg.escapeIdentifier;
  return {
    pg: server,
    adminUrl,
    makeAdapter: (instance) => createPostgresAdapter({ adminUrl, instance, logger: quietLogger }),
    async canLogin(p, password = p.password) {
      const r = await asUser(server, p.login ?? p.as, password, databaseOf(p), async (c) =>
        c.query("SELECT 1"),
      );
      return !r.refused;
    },
    async writeData(p, marker) {
      const r = await asUser(server, p.login ?? p.as, p.password, databaseOf(p), async (c) => {
        await c.query("CREATE TABLE IF NOT EXISTS mesh_conformance (marker text)");
        await c.query("DELETE FROM mesh_conformance");
        await c.query("INSERT INTO mesh_conformance (marker) VALUES ($1)", [marker]);
      });
      if (r.refused) throw new Error(`${p.as} could not log in to write its data`);
    },
    async readData(p) {
      try {
        const rows = await server.query<{ marker: string }>(
          "SELECT marker FROM mesh_conformance",
          [],
          databaseOf(p),
        );
        return rows[0]?.marker;
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code === "3D000" || code === "42P01") return undefined;
        throw err;
      }
    },
    async canReachOther(p, other) {
      const r = await asUser(server, p.login ?? p.as, p.password, databaseOf(other), async (c) => {
        try {
          await c.query("SELECT marker FROM mesh_conformance");
          return true;
        } catch (err) {
          if ((err as { code?: string }).code === "42501") return false;
          throw err;
        }
      });
      // Being let in to another's database at all is already a reach too far.
      return !r.refused;
    },
    async changePassword(as, password) {
      await server.query(`ALTER ROLE ${id(as)} PASSWORD ${pg.escapeLiteral(password)}`);
    },
    async dropLogin(as) {
      // A role that owns a database cannot be dropped: a person removing it by hand drops both.
      for (const db of await databasesOwnedBy(server, as)) {
        await server.query(`DROP DATABASE ${id(db)} WITH (FORCE)`);
      }
      await server.query(`DROP ROLE IF EXISTS ${id(as)}`);
    },
    async createForeign(as, password) {
      await server.query(`CREATE ROLE ${id(as)} LOGIN PASSWORD ${pg.escapeLiteral(password)}`);
      await server.query(`CREATE DATABASE ${id(as)} OWNER ${id(as)}`);
    },
    hostileValues: [
      { name: "x'; DROP DATABASE postgres; --" },
      { name: 'x"; DROP ROLE mesh_admin; --' },
      { name: "Upper" },
      { name: "has space" },
      { name: "x\0y" },
      { name: "a".repeat(64) },
      { name: "pg_catalog" },
      { name: "template1" },
      { name: "postgres" },
      { name: "person_made_this" },
      { name: 42 },
      { name: ["a"] },
      { name: { toString: "x" } },
      { extensions: ["pgcrypto; DROP ROLE mesh_admin"] },
      { extensions: ['pgcrypto"; DROP ROLE mesh_admin; --'] },
      { extensions: ["plperlu"] },
      { extensions: ["adminpack"] },
      { extensions: "pgcrypto" },
      { extensions: [{}] },
    ],
    plainValues: {},
    halt: () => server.halt(),
    resume: () => server.resume(),
    stop: () => server.stop(),
  };
}

/** This provider's conformance target. */
export const target: ConformanceTarget = {
  name: "postgres",
  interface: "postgres-database",
  start: startTargetServer,
};
