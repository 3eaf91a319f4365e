// The Postgres half of the `postgres-database` provider: one role (the consumer's login, its
// minted password) and one database it owns, per consumer. The harness owns every rule; this file
// only speaks to the server, and leaves a mark (a JSON comment on the role) so the server itself
// remembers what this provider instance made, active or retired.

import type { ClientConfig } from "pg";
import {
  consoleLogger,
  DerivedChangedError,
  findInChain,
  forEachLimited,
  isValidLogin,
  markEntry,
  NETWORK_ERROR_CODES,
  readRotation,
  secondLogin,
  NotMadeHereError,
  readMinted,
  RefusalError,
  refuseUnlisted,
  ValueRefusedError,
} from "@mesh/sdk";
import type {
  BatchedAdapter,
  Deleted,
  FailureClass,
  InventoryEntry,
  Logger,
  Provision,
  Retired,
  RotationMark,
} from "@mesh/sdk";
import { resolvePostgresConfig, type PostgresAdapterConfig, type ResolvedPostgresConfig } from "./config.ts";
import pg from "./pg.cts";
import { scramVerifier, verifierMatches } from "./scram.ts";

/**
 * Extensions a consumer may ask for in `values.extensions`: the ones PostgreSQL's own contrib
 * marks trusted, which a database owner may install without a superuser. Anything else is refused
 * before a statement is sent, because an untrusted extension runs code as the superuser.
 */
export const TRUSTED_EXTENSIONS: ReadonlySet<string> = new Set([
  "btree_gin",
  "btree_gist",
  "citext",
  "cube",
  "dict_int",
  "fuzzystrmatch",
  "hstore",
  "intarray",
  "isn",
  "lo",
  "ltree",
  "pg_trgm",
  "pgcrypto",
  "plpgsql",
  "seg",
  "tablefunc",
  "tcn",
  "tsm_system_rows",
  "tsm_system_time",
  "unaccent",
  "uuid-ossp",
]);

/** What the provider writes on each role it made. Never a secret: any role can read a comment. */
export interface PostgresMark {
  readonly instance: string;
  readonly database: string;
  readonly state: "active" | "retired";
  /** ISO 8601; only on a retired one. */
  readonly retiredAt?: string | undefined;
  readonly why?: string | undefined;
  /** The rotation under way; only on an active consumer's own role. */
  readonly rotation?: RotationMark | undefined;
  /**
   * On a consumer's second login (see `secondLogin`): the consumer's own login, whose member it
   * is. Such a role is never a consumer of its own: the inventory leaves it out.
   */
  readonly of?: string | undefined;
  /** ISO 8601, only on an active one: when the password it holds was minted (never the password). */
  readonly minted?: string | undefined;
}

/** The role comment that carries `mark`. */
export function formatMark(mark: PostgresMark): string {
  const { instance, database, state, retiredAt, why, rotation, of, minted } = mark;
  if (of !== undefined) return JSON.stringify({ mesh: { instance, database, state: "active", of } });
  return JSON.stringify({
    mesh:
      state === "retired"
        ? { instance, database, state, retiredAt, why }
        : {
            instance,
            database,
            state,
            ...(rotation === undefined ? {} : { rotation }),
            ...(minted === undefined ? {} : { minted }),
          },
  });
}

/** The mark in a role comment, or undefined when the comment is not one (or not well formed). */
export function parseMark(comment: string | null | undefined): PostgresMark | undefined {
  if (typeof comment !== "string" || !comment.startsWith("{")) return undefined;
  let doc: unknown;
  try {
    doc = JSON.parse(comment);
  } catch {
    return undefined;
  }
  const mesh = (doc as { mesh?: unknown } | null)?.mesh;
  if (typeof mesh !== "object" || mesh === null) return undefined;
  const m = mesh as Record<string, unknown>;
  if (typeof m["instance"] !== "string" || !isValidLogin(m["database"])) return undefined;
  if (m["state"] !== "active" && m["state"] !== "retired") return undefined;
  return {
    instance: m["instance"],
    database: m["database"],
    state: m["state"],
    retiredAt: typeof m["retiredAt"] === "string" ? m["retiredAt"] : undefined,
    why: typeof m["why"] === "string" ? m["why"] : undefined,
    rotation: m["state"] === "active" ? readRotation(m["rotation"]) : undefined,
    of: isValidLogin(m["of"]) ? m["of"] : undefined,
    minted: m["state"] === "active" ? readMinted(m["minted"]) : undefined,
  };
}

/** The name is one PostgreSQL keeps for itself. */
export class ReservedNameError extends RefusalError {
  override name = "ReservedNameError";
  constructor(login: string) {
    super(
      login,
      `${JSON.stringify(login)} is a name PostgreSQL reserves (pg_…, public, none, current_user…); ` +
        `give the consumer another name`,
    );
  }
}

/** PUBLIC can still connect to a consumer's database after the REVOKE (the admin could not revoke it). */
export class DatabaseStillOpenError extends RefusalError {
  override name = "DatabaseStillOpenError";
  constructor(
    login: string,
    readonly database: string,
  ) {
    super(
      login,
      `database ${JSON.stringify(database)} of ${JSON.stringify(login)} still lets every role connect after ` +
        `REVOKE CONNECT … FROM PUBLIC; the admin is likely not a member of ${JSON.stringify(login)}: ` +
        `GRANT ${login} TO <admin> and apply again`,
    );
  }
}

const RESERVED = new Set(["public", "none", "current_user", "session_user", "current_role"]);

const id = (name: string): string => pg.escapeIdentifier(name);
const lit = (text: string): string => pg.escapeLiteral(text);

function codeOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

interface RoleRow {
  readonly login: string;
  readonly canLogin: boolean;
  readonly inDate: boolean;
  readonly comment: string | null;
}

interface DatabaseRow {
  readonly name: string;
  readonly owner: string;
  readonly openToPublic: boolean;
}

/** What one batched query says of a consumer: its role, mark, database, and the admin's reach. */
interface ConsumerRow {
  readonly login: string;
  readonly role: RoleRow | undefined;
  readonly database: DatabaseRow | undefined;
  /** Whether the admin is a member of the role (what a non-superuser needs to manage it). */
  readonly adminIsMember: boolean;
  /** The stored verifier, when the admin may read pg_authid. */
  readonly verifier: string | null | undefined;
}

/** A password check made by a consumer login between verify passes. */
interface LoginCheck {
  readonly password: string;
  readonly ok: boolean;
}

interface AdminFacts {
  readonly user: string;
  readonly superuser: boolean;
  readonly readsAuthid: boolean;
}

/** How many consumer logins `holdsMany` tries at once when it cannot read the stored verifiers. */
const LOGIN_CHECKS_AT_ONCE = 4;

/** What one query answers, as the adapter reads it. */
export interface PostgresResult<R> {
  readonly rows: R[];
}

/** The slice of a `pg` client or pool that sends a query. */
export interface PostgresQueryable {
  query<R extends object>(text: string, values?: unknown[]): Promise<PostgresResult<R>>;
}

/** The slice of a pooled `pg` session the adapter uses: one connection, for statements that must share it. */
export interface PostgresSession extends PostgresQueryable {
  /** Hands the session back; `true` closes it instead (after a failure). */
  release(destroy?: boolean): void;
}

/** The slice of a `pg.Client` the adapter uses: a connection of its own, to one database. */
export interface PostgresConnection extends PostgresQueryable {
  connect(): Promise<unknown>;
  end(): Promise<void>;
  on(event: "error", listener: (err: Error) => void): unknown;
}

/** The slice of `pg.Pool` the adapter uses: the admin's pooled connections. */
export interface PostgresPool extends PostgresQueryable {
  connect(): Promise<PostgresSession>;
  end(): Promise<void>;
  on(event: "error", listener: (err: Error) => void): unknown;
}

/** What the adapter talks through: the admin's pool, and single connections as anyone to any database. */
export interface PostgresClients {
  readonly pool: PostgresPool;
  /** A connection, not yet opened, as `user` to `database`. */
  connection(user: string, password: string, database: string): PostgresConnection;
}

/**
 * Makes the adapter for one provider instance, with a `pg` pool for the admin. Connects lazily:
 * nothing is opened until asked.
 * @throws AdminSettingError when the admin URL or a setting cannot be used.
 */
export function createPostgresAdapter(config: PostgresAdapterConfig): PostgresAdapter {
  const c = resolvePostgresConfig(config);
  const options = (user: string, password: string, database: string): ClientConfig => ({
    host: c.server.host,
    port: c.server.port,
    user,
    password,
    database,
    ssl: c.server.ssl === false ? false : { ...c.server.ssl },
    connectionTimeoutMillis: c.connectTimeoutMs,
    application_name: `mesh-postgres:${c.instance}`,
  });
  const pool = new pg.Pool({
    ...options(c.admin.user, c.admin.password, c.adminDatabase),
    max: c.poolSize,
    idleTimeoutMillis: 30_000,
    allowExitOnIdle: true,
    statement_timeout: c.statementTimeoutMs,
  });
  const clients: PostgresClients = {
    pool,
    connection: (user, password, database) => new pg.Client(options(user, password, database)),
  };
  return new PostgresAdapter(clients, c, config.logger ?? consoleLogger);
}

/**
 * The adapter for `postgres-database`, over clients the caller made; `close()` ends the pool.
 * Everything it knows after a restart it reads back from the server: the roles carrying this
 * instance's mark.
 */
export class PostgresAdapter implements BatchedAdapter {
  /**
   * `holdsMany` asks one query however many consumers it checks (a superuser's stored verifiers
   * included), so a verify pass asks once for all. An admin without pg_authid also logs in as each
   * consumer, but between passes (see `holdsMany`), not inside one.
   */
  readonly verifyBatch = Infinity;
  /**
   * PostgreSQL holds one password per role, so a rotation alternates between the consumer's own
   * login and its second (`secondLogin`), a member of it that acts as it.
   */
  readonly alternates = true;
  readonly #config: ResolvedPostgresConfig;
  /** Per login, the stored verifier last compared with the password, and the answer: PBKDF2 once per change. */
  readonly #compared = new Map<string, { verifier: string; password: string; matches: boolean }>();
  /** Per login, the password logins made since the last `holdsMany` (by `#spreadLogins`). */
  readonly #loginChecks = new Map<string, LoginCheck>();
  /** Which `holdsMany` the spread logins now running belong to; a newer one drops their answers. */
  #spreadRound = 0;
  #spreadTimer: ReturnType<typeof setTimeout> | undefined;
  #spreading: Promise<void> = Promise.resolve();
  #closed = false;
  readonly #logger: Logger;
  readonly #pool: PostgresPool;
  readonly #clients: PostgresClients;
  #facts: Promise<AdminFacts> | undefined;

  constructor(clients: PostgresClients, config: ResolvedPostgresConfig, logger: Logger) {
    this.#clients = clients;
    this.#pool = clients.pool;
    this.#config = config;
    this.#logger = logger;
    // An idle connection whose server went away must not take the process down with it.
    this.#pool.on("error", (err) => {
      this.#logger.warn(
        `postgres: an idle admin connection to ${config.server.host}:${config.server.port} failed ` +
          `(${err.message}); the next request opens a new one`,
      );
    });
  }

  #admin(database: string): PostgresConnection {
    const c = this.#config;
    return this.#clients.connection(c.admin.user, c.admin.password, database);
  }

  #adminFacts(): Promise<AdminFacts> {
    this.#facts ??= this.#pool
      .query<{ user: string; superuser: boolean; reads_authid: boolean }>(
        `SELECT current_user AS user, r.rolsuper AS superuser,
                has_table_privilege('pg_catalog.pg_authid', 'SELECT') AS reads_authid
           FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`,
      )
      .then(({ rows: [row] }) => {
        if (!row) throw new Error("postgres: the admin's own role is not in pg_roles");
        return { user: row.user, superuser: row.superuser, readsAuthid: row.reads_authid };
      });
    // A failed ask (server down) is asked again next time rather than remembered.
    this.#facts.catch(() => (this.#facts = undefined));
    return this.#facts;
  }

  async #roles(logins: readonly string[]): Promise<Map<string, RoleRow>> {
    const { rows } = await this.#pool.query<{
      login: string;
      can_login: boolean;
      in_date: boolean;
      comment: string | null;
    }>(
      `SELECT r.rolname AS login, r.rolcanlogin AS can_login,
              (r.rolvaliduntil IS NULL OR r.rolvaliduntil > now()) AS in_date,
              pg_catalog.shobj_description(r.oid, 'pg_authid') AS comment
         FROM pg_catalog.pg_roles r WHERE r.rolname = ANY($1::text[])`,
      [logins],
    );
    return new Map(
      rows.map((r) => [
        r.login,
        { login: r.login, canLogin: r.can_login, inDate: r.in_date, comment: r.comment },
      ]),
    );
  }

  async #databases(names: readonly string[]): Promise<Map<string, DatabaseRow>> {
    const { rows } = await this.#pool.query<{ name: string; owner: string; open_to_public: boolean }>(
      `SELECT d.datname AS name, pg_catalog.pg_get_userbyid(d.datdba) AS owner,
              pg_catalog.has_database_privilege('public', d.oid, 'CONNECT') AS open_to_public
         FROM pg_catalog.pg_database d WHERE d.datname = ANY($1::text[])`,
      [names],
    );
    return new Map(
      rows.map((r) => [r.name, { name: r.name, owner: r.owner, openToPublic: r.open_to_public }]),
    );
  }

  /**
   * Everything `holdsMany` checks but the password, for every consumer asked, in one query: role,
   * LOGIN and validity, mark, the admin's membership, database, owner and PUBLIC's access; and the
   * stored verifier when the admin may read pg_authid.
   */
  async #consumerRows(
    asked: readonly { login: string; database: string }[],
    readsAuthid: boolean,
  ): Promise<Map<string, ConsumerRow>> {
    const { rows } = await this.#pool.query<{
      login: string;
      role: string | null;
      can_login: boolean | null;
      in_date: boolean | null;
      comment: string | null;
      database: string | null;
      owner: string | null;
      open_to_public: boolean | null;
      admin_is_member: boolean | null;
      verifier?: string | null;
    }>(
      `SELECT a.login, r.rolname AS role, r.rolcanlogin AS can_login,
              (r.rolvaliduntil IS NULL OR r.rolvaliduntil > now()) AS in_date,
              pg_catalog.shobj_description(r.oid, 'pg_authid') AS comment,
              d.datname AS database, pg_catalog.pg_get_userbyid(d.datdba) AS owner,
              pg_catalog.has_database_privilege('public', d.oid, 'CONNECT') AS open_to_public,
              pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER') AS admin_is_member
              ${readsAuthid ? ", s.rolpassword AS verifier" : ""}
         FROM unnest($1::text[], $2::text[]) AS a(login, database)
         LEFT JOIN pg_catalog.pg_roles r ON r.rolname = a.login
         LEFT JOIN pg_catalog.pg_database d ON d.datname = a.database
         ${readsAuthid ? "LEFT JOIN pg_catalog.pg_authid s ON s.rolname = a.login" : ""}`,
      [asked.map((a) => a.login), asked.map((a) => a.database)],
    );
    return new Map(
      rows.map((r) => [
        r.login,
        {
          login: r.login,
          role:
            r.role === null
              ? undefined
              : {
                  login: r.role,
                  canLogin: r.can_login === true,
                  inDate: r.in_date === true,
                  comment: r.comment,
                },
          database:
            r.database === null
              ? undefined
              : { name: r.database, owner: r.owner ?? "", openToPublic: r.open_to_public !== false },
          adminIsMember: r.admin_is_member === true,
          verifier: readsAuthid ? (r.verifier ?? null) : undefined,
        },
      ]),
    );
  }

  /** Whether `stored` is `password`'s verifier; PBKDF2 runs only when either changed since last asked. */
  async #verifierMatches(login: string, stored: string | null, password: string): Promise<boolean> {
    if (stored === null) return false;
    const was = this.#compared.get(login);
    if (was !== undefined && was.verifier === stored && was.password === password) return was.matches;
    const matches = await verifierMatches(stored, password);
    this.#compared.set(login, { verifier: stored, password, matches });
    return matches;
  }

  async #storedVerifiers(logins: readonly string[]): Promise<Map<string, string | null>> {
    const { rows } = await this.#pool.query<{ login: string; verifier: string | null }>(
      `SELECT rolname AS login, rolpassword AS verifier FROM pg_catalog.pg_authid WHERE rolname = ANY($1::text[])`,
      [logins],
    );
    return new Map(rows.map((r) => [r.login, r.verifier]));
  }

  /** This instance's mark on `role`, or undefined when the role is not this instance's. */
  #ownMark(role: RoleRow | undefined): PostgresMark | undefined {
    const mark = parseMark(role?.comment);
    return mark?.instance === this.#config.instance ? mark : undefined;
  }

  #foreign(role: RoleRow): NotMadeHereError {
    const madeBy = parseMark(role.comment)?.instance;
    return new NotMadeHereError(role.login, this.#config.instance, {
      resource: `role ${JSON.stringify(role.login)}`,
      madeBy:
        madeBy === undefined
          ? "it carries no mesh mark"
          : `it is marked by instance ${JSON.stringify(madeBy)}`,
      fix: "rename the consumer, or drop or rename the role by hand if it is unused",
    });
  }

  #foreignDatabase(login: string, database: string, owner: string): NotMadeHereError {
    return new NotMadeHereError(login, this.#config.instance, {
      resource: `database ${JSON.stringify(database)}`,
      madeBy: `it is owned by ${JSON.stringify(owner)}`,
      fix: "ask for another name (values.name)",
    });
  }

  async #transaction(work: (client: PostgresSession) => Promise<void>): Promise<void> {
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      await work(client);
      await client.query("COMMIT");
    } catch (err) {
      await client.query("ROLLBACK").catch(() => {});
      client.release(true);
      throw err;
    }
    client.release();
  }

  async #onDatabase(database: string, work: (client: PostgresConnection) => Promise<void>): Promise<void> {
    const client = this.#admin(database);
    client.on("error", () => {});
    await client.connect();
    try {
      await work(client);
    } finally {
      await client.end().catch(() => {});
    }
  }

  async #createDatabase(client: PostgresSession, login: string, database: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        // Alone, outside any transaction: PostgreSQL refuses CREATE DATABASE anywhere else.
        await client.query(`CREATE DATABASE ${id(database)} OWNER ${id(login)}`);
        return;
      } catch (err) {
        const code = codeOf(err);
        if (code === "42P04") {
          const owner = (await this.#databases([database])).get(database)?.owner;
          if (owner === login) return;
          throw this.#foreignDatabase(login, database, owner ?? "(unknown)");
        }
        // Any open session on template1 blocks the copy; it is usually gone a moment later.
        if (code === "55006" && attempt < 10) {
          await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
          continue;
        }
        throw err;
      }
    }
  }

  /**
   * Brings the consumer's role and database into being, in an order a crash at any point can be
   * re-run from: role with its mark (one transaction), the admin's membership, the database, the
   * REVOKE, the extensions.
   * @throws ReservedNameError, ValueRefusedError before any statement is sent; NotMadeHereError,
   *   DerivedChangedError when the server holds something this instance did not make;
   *   DatabaseStillOpenError; the server's own errors.
   */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    await this.#apply(p, undefined, undefined, signal);
  }

  /**
   * Makes `p.password` log in on `p.login` (the consumer's own login or its second, see
   * `secondLogin`) beside `p.retiring` on the other one, both owning nothing but acting as the
   * consumer's own role, and records `rotation` in its mark: passwords and mark in one transaction,
   * so the mark never says more than the server holds. Idempotent; `create` ends it.
   * @throws as `create` does; NotMadeHereError when the second login exists but was not made here.
   */
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void> {
    await this.#apply(p, p.retiring, rotation, signal);
  }

  /**
   * Whether no session is open any more on the login `p.retiring` lives on (the one that is not
   * `p.login`), leaving out this provider's own checks: `pg_stat_activity` names every session's
   * user. Read-only.
   */
  async drained(p: Provision & { readonly retiring: string }, _signal: AbortSignal): Promise<boolean> {
    const slot = p.login ?? p.as;
    const old = slot === p.as ? secondLogin(p.as) : p.as;
    const { rows } = await this.#pool.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_catalog.pg_stat_activity
        WHERE usename = $1 AND application_name IS DISTINCT FROM $2`,
      [old, `mesh-postgres:${this.#config.instance}`],
    );
    return Number(rows[0]?.n ?? 0) === 0;
  }

  async #apply(
    p: Provision,
    retiring: string | undefined,
    rotation: RotationMark | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    const login = refuseReserved(p.as);
    const second = secondLogin(login);
    const slot = p.login ?? login;
    const database = databaseFor(p);
    const extensions = extensionsFor(p);
    signal.throwIfAborted();
    const verifier = await scramVerifier(p.password);
    const retiringVerifier = retiring === undefined ? undefined : await scramVerifier(retiring);
    const facts = await this.#adminFacts();
    const roles = await this.#roles([login, second]);
    const role = roles.get(login);
    const mark = this.#ownMark(role);
    if (role && (!mark || mark.of !== undefined || login === facts.user)) throw this.#foreign(role);
    const secondRole = roles.get(second);
    const secondMark = this.#ownMark(secondRole);
    if (secondRole && (secondMark?.of !== login || second === facts.user)) throw this.#foreign(secondRole);
    if (mark && mark.database !== database) {
      throw new DerivedChangedError(login, "database", mark.database, database);
    }
    const existing = (await this.#databases([database])).get(database);
    if (existing && existing.owner !== login) throw this.#foreignDatabase(login, database, existing.owner);
    signal.throwIfAborted();

    const instance = this.#config.instance;
    const active = formatMark({ instance, database, state: "active", rotation, minted: p.minted });
    // Each login takes its password, or (the one that holds none now) cannot log in at all.
    const passwordOf = (name: string): string | undefined => (name === slot ? verifier : retiringVerifier);
    const loginClause = (name: string): string => {
      const v = passwordOf(name);
      return v === undefined ? "NOLOGIN PASSWORD NULL" : `LOGIN PASSWORD ${lit(v)} VALID UNTIL 'infinity'`;
    };
    await this.#transaction(async (client) => {
      // The password goes as its SCRAM verifier: the plaintext never reaches the server or its log.
      await client.query(
        role
          ? `ALTER ROLE ${id(login)} ${loginClause(login)}`
          : `CREATE ROLE ${id(login)} ${loginClause(login)}`,
      );
      await client.query(`COMMENT ON ROLE ${id(login)} IS ${lit(active)}`);
      if (secondRole || passwordOf(second) !== undefined) {
        await client.query(
          secondRole
            ? `ALTER ROLE ${id(second)} ${loginClause(second)}`
            : `CREATE ROLE ${id(second)} ${loginClause(second)}`,
        );
        // A member that acts as the consumer's own role from its first statement: whatever it
        // makes belongs to the consumer, whichever of the two logins made it.
        await client.query(`GRANT ${id(login)} TO ${id(second)}`);
        await client.query(`ALTER ROLE ${id(second)} SET role = ${lit(login)}`);
        const of = formatMark({ instance, database, state: "active", of: login });
        await client.query(`COMMENT ON ROLE ${id(second)} IS ${lit(of)}`);
      }
    });
    this.#loginChecks.delete(login);
    // The verifier just stored is this password's: the next check need not run PBKDF2 for it.
    this.#compared.set(slot, { verifier, password: p.password, matches: true });
    signal.throwIfAborted();

    // One session for the membership and what needs it: under concurrent creates, a membership
    // granted on one pooled session was at times not yet seen by another.
    const client = await this.#pool.connect();
    try {
      // A non-superuser admin may make a database owned by the role, drop it, or end its sessions
      // only as a member of the role.
      if (!facts.superuser) await client.query(`GRANT ${id(login)} TO ${id(facts.user)}`);
      signal.throwIfAborted();

      if (!existing) await this.#createDatabase(client, login, database);
      signal.throwIfAborted();

      // By a non-owner, REVOKE only warns, so whether it took is read back.
      await client.query(`REVOKE CONNECT, TEMPORARY ON DATABASE ${id(database)} FROM PUBLIC`);
    } catch (err) {
      client.release(true); // a session that failed is not handed to the next create
      throw err;
    }
    client.release();
    if ((await this.#databases([database])).get(database)?.openToPublic !== false) {
      throw new DatabaseStillOpenError(login, database);
    }

    if (extensions.length > 0) {
      signal.throwIfAborted();
      await this.#onDatabase(database, async (client) => {
        // As the owner, so the extension is the consumer's to alter or drop.
        await client.query(`SET ROLE ${id(login)}`);
        for (const extension of extensions)
          await client.query(`CREATE EXTENSION IF NOT EXISTS ${id(extension)}`);
      });
    }
  }

  /**
   * Whether the consumer's role carries this instance's active mark, can log in with exactly its
   * password, and owns its database, closed to PUBLIC: one catalog query, and (for an admin that
   * cannot read pg_authid) one consumer login. Exact at the moment it is asked. Read-only.
   */
  async holds(p: Provision, signal: AbortSignal): Promise<boolean> {
    const answer = (await this.#check([p], signal, false)).get(p.as);
    if (answer instanceof Error) throw answer;
    return answer === true;
  }

  /**
   * `holds` for many consumers with one catalog query. With a superuser (or any admin that may read
   * pg_authid) that query also reads the stored verifiers, compared here (PBKDF2 only for a verifier
   * or password not compared before), so nothing else is asked. An admin that cannot read pg_authid
   * can check a password only by logging in as the consumer: those logins are spread evenly over
   * `loginSpreadMs` after each call, and the next call takes their answers, logging in itself only
   * for a consumer not reached (or whose password has changed) since. A drift by hand is so found by
   * the second verify pass after it at the latest. Read-only.
   */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    return this.#check(ps, signal, true);
  }

  async #check(
    ps: readonly Provision[],
    signal: AbortSignal,
    spread: boolean,
  ): Promise<Map<string, boolean | Error>> {
    const answers = new Map<string, boolean | Error>();
    const asked: { p: Provision; database: string }[] = [];
    for (const p of ps) {
      try {
        asked.push({ p, database: databaseFor(p) });
      } catch {
        // What create would refuse is not held; create says why.
        answers.set(p.as, false);
      }
    }
    if (asked.length === 0) return answers;
    const facts = await this.#adminFacts();
    const rows = await this.#consumerRows(
      asked.map((a) => ({ login: a.p.as, database: a.database })),
      facts.readsAuthid,
    );
    // The second logins, where a consumer has one: a constant two questions more for all of them.
    const seconds = asked.map((a) => secondLogin(a.p.as));
    const secondRoles = await this.#roles(seconds);
    const secondVerifiers =
      facts.readsAuthid && secondRoles.size > 0
        ? await this.#storedVerifiers([...secondRoles.keys()])
        : new Map<string, string | null>();

    // Per consumer, each password that must log in, and on which login.
    const toTry: { key: string; login: string; password: string; database: string }[] = [];
    for (const { p, database } of asked) {
      const row = rows.get(p.as);
      const role = row?.role;
      const mark = this.#ownMark(role);
      const db = row?.database;
      const second = secondLogin(p.as);
      const secondRole = secondRoles.get(second);
      const secondIsOurs = secondRole !== undefined && this.#ownMark(secondRole)?.of === p.as;
      const slot = p.login ?? p.as;
      const other = slot === p.as ? second : p.as;
      const roleOf = (name: string): RoleRow | undefined => (name === p.as ? role : secondRole);
      const opens = (name: string): boolean => {
        const r = roleOf(name);
        return r !== undefined && r.canLogin && r.inDate && (name === p.as || secondIsOurs);
      };
      const shaped =
        role !== undefined &&
        mark?.state === "active" &&
        mark.of === undefined &&
        mark.database === database &&
        (facts.superuser || row?.adminIsMember === true) &&
        db?.owner === p.as &&
        !db.openToPublic &&
        opens(slot) &&
        // While a rotation overlaps both log in; otherwise only the one that holds the password.
        (p.retiring !== undefined ? opens(other) : roleOf(other)?.canLogin !== true);
      if (!shaped) {
        answers.set(p.as, false);
        continue;
      }
      const pairs: [string, string][] = [[slot, p.password]];
      if (p.retiring !== undefined) pairs.push([other, p.retiring]);
      if (facts.readsAuthid) {
        let all = true;
        for (const [name, password] of pairs) {
          const stored = name === p.as ? (row?.verifier ?? null) : (secondVerifiers.get(name) ?? null);
          if (!(await this.#verifierMatches(name, stored, password))) all = false;
        }
        answers.set(p.as, all);
      } else {
        for (const [name, password] of pairs) toTry.push({ key: p.as, login: name, password, database });
      }
    }

    const stillToLog: typeof toTry = [];
    for (const item of toTry) {
      const done = spread ? this.#loginChecks.get(item.login) : undefined;
      if (done !== undefined && done.password === item.password) {
        if (!done.ok) answers.set(item.key, false);
        else if (!answers.has(item.key)) answers.set(item.key, true);
      } else stillToLog.push(item);
    }
    await forEachLimited(stillToLog, LOGIN_CHECKS_AT_ONCE, async (item) => {
      if (answers.get(item.key) === false || answers.get(item.key) instanceof Error) return;
      if (signal.aborted) {
        answers.set(item.key, new Error("postgres: the check was stopped before this consumer's turn"));
        return;
      }
      try {
        const ok = await this.#canLogIn(item.login, item.password, item.database);
        if (!ok) answers.set(item.key, false);
        else if (!answers.has(item.key)) answers.set(item.key, true);
      } catch (err) {
        answers.set(item.key, err instanceof Error ? err : new Error(String(err)));
      }
    });
    if (spread && !facts.readsAuthid) this.#spreadLogins(toTry);
    return answers;
  }

  /**
   * Logs in as each of `items`, one at a time and evenly spaced over `loginSpreadMs`, keeping each
   * answer (by login) for the next `holdsMany`. A newer call replaces the list; answers of the old
   * one are dropped.
   */
  #spreadLogins(items: readonly { login: string; password: string; database: string }[]): void {
    const round = ++this.#spreadRound;
    this.#loginChecks.clear();
    if (this.#spreadTimer !== undefined) clearTimeout(this.#spreadTimer);
    this.#spreadTimer = undefined;
    if (items.length === 0 || this.#closed) return;
    const gap = this.#config.loginSpreadMs / items.length;
    const startedAt = performance.now();
    let next = 0;
    const step = (): void => {
      this.#spreadTimer = undefined;
      if (round !== this.#spreadRound || this.#closed) return;
      const item = items[next++];
      if (item === undefined) return;
      this.#spreading = (async () => {
        try {
          const ok = await this.#canLogIn(item.login, item.password, item.database);
          if (round === this.#spreadRound) this.#loginChecks.set(item.login, { password: item.password, ok });
        } catch {
          // Unable to ask: the next verify pass logs in itself.
        }
      })();
      void this.#spreading.then(() => {
        if (round !== this.#spreadRound || this.#closed || next >= items.length) return;
        const due = startedAt + gap * (next + 0.5);
        this.#spreadTimer = setTimeout(step, Math.max(0, due - performance.now()));
        this.#spreadTimer.unref?.();
      });
    };
    this.#spreadTimer = setTimeout(step, gap / 2);
    this.#spreadTimer.unref?.();
  }

  /** Logs in as the consumer: the only exact password check open to an admin without pg_authid. */
  async #canLogIn(login: string, password: string, database: string): Promise<boolean> {
    const client = this.#clients.connection(login, password, database);
    client.on("error", () => {});
    try {
      await client.connect();
      return true;
    } catch (err) {
      const code = codeOf(err);
      const message = err instanceof Error ? err.message : String(err);
      if (code === "28P01" || code === "3D000") return false;
      // 28000 is also pg_hba.conf refusing this host, which says nothing about the consumer.
      if (code === "28000" && !/pg_hba/i.test(message)) return false;
      throw err;
    } finally {
      await client.end().catch(() => {});
    }
  }

  /**
   * Disables the consumer's login (NOLOGIN), marks it retired with `at` and `why`, and ends its
   * open sessions. Its database and data stay. A role that is gone has nothing to retire.
   * @throws NotMadeHereError for a role this instance did not make.
   */
  async retire(login: string, _derived: Retired["derived"], why: string, at: Date): Promise<void> {
    const role = (await this.#roles([login])).get(login);
    if (!role) {
      this.#logger.warn(`postgres: ${login} has no role any more; there is nothing of it to retire`);
      return;
    }
    const mark = this.#ownMark(role);
    if (!mark || mark.of !== undefined || login === (await this.#adminFacts()).user)
      throw this.#foreign(role);
    // Retired again keeps the first retirement's when and why.
    const retired: PostgresMark =
      mark.state === "retired" ? mark : { ...mark, state: "retired", retiredAt: at.toISOString(), why };
    const second = secondLogin(login);
    const secondRole = (await this.#roles([second])).get(second);
    const secondIsOurs = secondRole !== undefined && this.#ownMark(secondRole)?.of === login;
    await this.#transaction(async (client) => {
      await client.query(`ALTER ROLE ${id(login)} NOLOGIN`);
      // Its second login too, where it has one: neither logs in while it is retired.
      if (secondIsOurs) await client.query(`ALTER ROLE ${id(second)} NOLOGIN`);
      await client.query(`COMMENT ON ROLE ${id(login)} IS ${lit(formatMark(retired))}`);
    });
    // NOLOGIN refuses new sessions only; the open ones are ended here.
    await this.#pool.query(
      `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
        WHERE usename = ANY($1::text[])`,
      [secondIsOurs ? [login, second] : [login]],
    );
  }

  /**
   * Ends every open session of `login` (`pg_terminate_backend`, found by user name in
   * `pg_stat_activity`), after `mesh rotate --now` replaced its password. Counts those ended.
   * @throws NotMadeHereError for a role this instance did not make.
   */
  async endSessions(login: string): Promise<number> {
    const role = (await this.#roles([login])).get(login);
    if (!role) return 0;
    if (!this.#ownMark(role) || login === (await this.#adminFacts()).user) throw this.#foreign(role);
    // Its second login's sessions too, where it has one: the leaked password may be on either.
    const second = secondLogin(login);
    const secondRole = (await this.#roles([second])).get(second);
    const logins = this.#ownMark(secondRole)?.of === login ? [login, second] : [login];
    const { rows } = await this.#pool.query<{ ended: string }>(
      `SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid)) AS ended ` +
        `FROM pg_catalog.pg_stat_activity WHERE usename = ANY($1::text[]) AND pid <> pg_catalog.pg_backend_pid()`,
      [logins],
    );
    return Number(rows[0]?.ended ?? 0);
  }

  /**
   * Which of these logins have a session open now (`pg_stat_activity`, which shows every session's
   * user to any role), leaving out this provider's own checks of a consumer's password. Read-only.
   */
  async seenConnected(logins: readonly string[], _signal: AbortSignal): Promise<ReadonlySet<string>> {
    // A session on a consumer's second login is the consumer's.
    const ownerOf = new Map<string, string>();
    for (const login of logins) {
      ownerOf.set(login, login);
      if (isValidLogin(login)) ownerOf.set(secondLogin(login), login);
    }
    const { rows } = await this.#pool.query<{ login: string }>(
      `SELECT DISTINCT usename AS login FROM pg_catalog.pg_stat_activity
        WHERE usename = ANY($1::text[]) AND application_name IS DISTINCT FROM $2`,
      [[...ownerOf.keys()], `mesh-postgres:${this.#config.instance}`],
    );
    return new Set(rows.flatMap((r) => ownerOf.get(r.login) ?? []));
  }

  /** The roles carrying this instance's mark, active and retired, with their database. */
  async inventory(): Promise<InventoryEntry[]> {
    const { rows } = await this.#pool.query<{ login: string; comment: string }>(
      `SELECT r.rolname AS login, pg_catalog.shobj_description(r.oid, 'pg_authid') AS comment
         FROM pg_catalog.pg_roles r
        WHERE pg_catalog.shobj_description(r.oid, 'pg_authid') LIKE '{%'
        ORDER BY r.rolname`,
    );
    return rows.flatMap(({ login, comment }) => {
      const mark = parseMark(comment);
      // A second login is its consumer's, never a consumer of its own.
      if (mark?.instance !== this.#config.instance || mark.of !== undefined) return [];
      return [markEntry(login, { ...mark, derived: { database: mark.database } })];
    });
  }

  /**
   * Drops a retired consumer's database (ending its sessions) and then its role, and answers the
   * database's size as the bytes freed. The guard has checked that this instance made and retired it.
   * @throws NotMadeHereError when its database belongs to another role.
   */
  async delete(r: Retired): Promise<Deleted> {
    const login = r.as;
    const database = r.derived["database"];
    if (!isValidLogin(database)) throw new Error(`postgres: the mark of ${login} names no database`);
    const db = (await this.#databases([database])).get(database);
    let freedBytes = 0;
    if (db) {
      if (db.owner !== login) throw this.#foreignDatabase(login, database, db.owner);
      const { rows } = await this.#pool.query<{ size: string }>(
        `SELECT pg_catalog.pg_database_size($1)::text AS size`,
        [database],
      );
      freedBytes = Number(rows[0]?.size ?? 0);
      await this.#pool.query(`DROP DATABASE IF EXISTS ${id(database)} WITH (FORCE)`);
    }
    try {
      // Its second login first (a member of it, owning nothing while it acts as the consumer).
      const second = secondLogin(login);
      const secondRole = (await this.#roles([second])).get(second);
      if (secondRole !== undefined && this.#ownMark(secondRole)?.of === login)
        await this.#pool.query(`DROP ROLE IF EXISTS ${id(second)}`);
      await this.#pool.query(`DROP ROLE IF EXISTS ${id(login)}`);
    } catch (err) {
      if (codeOf(err) !== "2BP01") throw err;
      throw new Error(
        `postgres: database ${JSON.stringify(database)} of ${login} was dropped, but the role still owns ` +
          `objects or holds privileges elsewhere (${err instanceof Error ? err.message : String(err)}); ` +
          `run DROP OWNED BY ${id(login)} in those databases, then delete again`,
        { cause: err },
      );
    }
    return { freedBytes };
  }

  /** Whether a role of this name exists, made by anyone. */
  async exists(login: string): Promise<boolean> {
    return (await this.#roles([login])).has(login);
  }

  /** `credentials-rejected` for a refused login, `unreachable` for a server gone or out of reach. */
  classify(err: unknown): FailureClass | undefined {
    return classifyPostgresError(err);
  }

  /** Stops the spread logins and ends the admin connections. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#spreadTimer !== undefined) clearTimeout(this.#spreadTimer);
    await this.#spreading;
    await this.#pool.end();
  }
}

// The server's own codes for "going away" or "cannot connect"; the operating system's are the sdk's.
// 57P03 is "the database system is starting up", 57P01 "terminating connection due to administrator command".
const UNREACHABLE_CODES = new Set(["57P01", "57P02", "57P03", "08000", "08001", "08003", "08006"]);
const UNREACHABLE_WORDS =
  /Connection terminated|timeout expired|connection timeout|Client has encountered a connection error|the database system is (starting up|shutting down)/i;

/** The failure class of an error from `pg` or the network, or undefined when it is neither. */
export function classifyPostgresError(err: unknown): FailureClass | undefined {
  const code = (e: unknown): string => codeOf(e) ?? "";
  if (findInChain(err, (e) => code(e) === "28P01" || code(e) === "28000")) return "credentials-rejected";
  const unreachable = (e: unknown): boolean =>
    UNREACHABLE_CODES.has(code(e)) ||
    NETWORK_ERROR_CODES.has(code(e)) ||
    (e instanceof Error && UNREACHABLE_WORDS.test(e.message));
  return findInChain(err, unreachable) === undefined ? undefined : "unreachable";
}

function refuseReserved(login: string): string {
  if (login.startsWith("pg_") || RESERVED.has(login)) throw new ReservedNameError(login);
  return login;
}

/** The consumer's database: `values.name` when given (held to the login pattern), else the login. */
function databaseFor(p: Provision): string {
  const name = p.values["name"];
  if (name === undefined || name === null) return p.as;
  if (!isValidLogin(name)) {
    throw new ValueRefusedError(
      p.as,
      "name",
      name,
      "is not a valid database name (1–32 characters of a-z, 0-9 and _, starting with a letter)",
    );
  }
  if (name.startsWith("pg_") || RESERVED.has(name)) {
    throw new ValueRefusedError(p.as, "name", name, "is a name PostgreSQL reserves");
  }
  return name;
}

/** The extensions asked for, each on the trusted allow-list. */
function extensionsFor(p: Provision): string[] {
  const asked = p.values["extensions"];
  if (asked === undefined || asked === null) return [];
  if (!Array.isArray(asked) || !asked.every((e): e is string => typeof e === "string")) {
    throw new ValueRefusedError(p.as, "extensions", asked, "is not a list of extension names");
  }
  refuseUnlisted(p.as, "extensions", asked, TRUSTED_EXTENSIONS, (names) => {
    return `is not on the allow-list of trusted extensions (${names})`;
  });
  return [...new Set(asked)];
}
