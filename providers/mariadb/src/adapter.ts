// The MariaDB half of the `mysql-database` provider: one user ('<login>'@'%', the minted password)
// and one database it alone has rights on, per consumer. The harness owns every rule; this file only
// speaks to the server, and keeps a mark per consumer in a table of its own so that the server
// itself remembers what this provider instance made, active or retired.

import { createHash } from "node:crypto";
import mysql, { type SqlValue } from "mysql2/promise";
import {
  DerivedChangedError,
  errorCodes,
  isNetworkError,
  LOGIN_PATTERN,
  NotMadeHereError,
  parseJsonOrUndefined,
  readMinted,
  readRotation,
  ValueRefusedError,
} from "@mesh/sdk";
import type { BatchedAdapter, Deleted, FailureClass, InventoryEntry, Provision, Retired } from "@mesh/sdk";
import type { RotationMark } from "@mesh/sdk";
import {
  MARKS_SCHEMA,
  resolveMariadbConfig,
  type MariadbAdapterConfig,
  type MariadbPool,
  type ResolvedMariadbConfig,
} from "./config.ts";

/** Databases no consumer may be given: the server's own, and the one holding the marks. */
export const RESERVED_DATABASES: ReadonlySet<string> = new Set([
  "mysql",
  "information_schema",
  "performance_schema",
  "sys",
  MARKS_SCHEMA,
]);

// ---- helpers ------------------------------------------------------------------------------

/**
 * The mysql_native_password hash of `password`: `*` and the upper-case hex of SHA1(SHA1(utf-8)).
 * Sent instead of the password so the plaintext never reaches the server, its logs or its errors.
 */
export function nativePasswordHash(password: string): string {
  const once = createHash("sha1").update(password, "utf8").digest();
  return `*${createHash("sha1").update(once).digest("hex").toUpperCase()}`;
}

/**
 * A database name as a grant pattern: in `GRANT ... ON db.*`, `_` and `%` are wildcards, so a
 * grant on `a_b` would also reach `axb`. Escaped, it names exactly one database.
 */
export function grantPattern(database: string): string {
  return database.replace(/[\\_%]/g, "\\$&");
}

/**
 * The database a consumer gets: `values.name` when given, else its login.
 * @throws ValueRefusedError when `values.name` is not a plain name or is reserved.
 */
export function databaseFor(login: string, values: Readonly<Record<string, unknown>>): string {
  const name = values.name;
  if (name === undefined || name === null) return login;
  const refuse = (why: string): ValueRefusedError =>
    new ValueRefusedError(
      login,
      "name",
      name,
      `${why}; ask for 1–32 characters of a-z, 0-9 and _, starting with a letter (or leave it out to get ` +
        "a database named after the login)",
    );
  if (typeof name !== "string") throw refuse("is not a string");
  if (!LOGIN_PATTERN.test(name)) throw refuse("is not a plain name");
  if (RESERVED_DATABASES.has(name)) throw refuse("is reserved");
  return name;
}

interface MysqlishError {
  code?: unknown;
  errno?: unknown;
  sql?: unknown;
  message: string;
  errors?: unknown;
  cause?: unknown;
}

function errnoOf(err: unknown): number | undefined {
  const errno = (err as MysqlishError | null)?.errno;
  return typeof err === "object" && err !== null && typeof errno === "number" ? errno : undefined;
}

// mysql2's own words for a connection that went away; the operating system's are the sdk's.
const UNREACHABLE_CODES = new Set(["PROTOCOL_CONNECTION_LOST", "PROTOCOL_SEQUENCE_TIMEOUT", "POOL_CLOSED"]);
// Wrong admin password, no password, account locked.
const CREDENTIALS_ERRNOS = new Set([1045, 1698, 4151]);
// Server shutting down, connection killed, too many connections.
const UNREACHABLE_ERRNOS = new Set([1040, 1053, 1927]);
// The admin lacks a right the provider needs.
const REFUSED_ERRNOS = new Set([1044, 1142, 1227, 1396, 1410]);
const ER_NO_SUCH_TABLE = 1146;
const ER_BAD_DB_ERROR = 1049;
const ER_NO_SUCH_THREAD = 1094;
const ER_BAD_FIELD_ERROR = 1054;

/** A row of the marks table as read back. */
interface MarkRow {
  login: string;
  instance: string;
  db: string;
  state: "active" | "retired";
  retired_at: string | null;
  why: string | null;
  /** The rotation under way, as JSON (a `RotationMark`); null when none. */
  rotation: string | null;
  /** ISO 8601: when the password applied was minted (`Provision.minted`); null when not known. */
  minted: string | null;
}

/** What the server says about one consumer, gathered in a constant number of queries for many. */
interface Facts {
  mark: MarkRow | undefined;
  /** The parsed `mysql.global_priv.Priv` of '<login>'@'%'. */
  user: UserPriv | undefined;
  /** Whether any account of that user name exists, on any host. */
  anyUser: boolean;
  schemaExists: (db: string) => boolean;
  markForDb: (db: string) => MarkRow | undefined;
  /** The `mysql.db` rows of '<login>'@'%'. */
  dbGrants: Record<string, unknown>[];
  /** Table, routine and role grants of '<login>'@'%': none is expected. */
  otherGrants: number;
}

interface UserPriv {
  access?: number;
  plugin?: string;
  authentication_string?: string;
  account_locked?: boolean;
  password_last_changed?: number;
  auth_or?: unknown;
}

/** Whether `auth_or` lists one method only, the user's own (an empty object), as MariaDB leaves it. */
function isOneMethod(or: unknown): boolean {
  if (!Array.isArray(or) || or.length !== 1) return false;
  const [only] = or as unknown[];
  return typeof only === "object" && only !== null && Object.keys(only).length === 0;
}

function parsePriv(raw: unknown): UserPriv {
  // mysql2 hands the column over already parsed when the server marks it JSON, as a string if not.
  if (typeof raw === "object" && raw !== null) return raw as UserPriv;
  try {
    const doc: unknown = JSON.parse(String(raw));
    return typeof doc === "object" && doc !== null ? (doc as UserPriv) : {};
  } catch {
    return {};
  }
}

/** ISO-free UTC text MariaDB's DATETIME(3) takes; independent of the server's time zone. */
function toSqlTime(at: Date): string {
  return at.toISOString().replace("T", " ").replace("Z", "");
}

/** A row's mint time for its inventory entry: only an active one's, and only an ISO 8601 date. */
function mintedOf(row: MarkRow): { minted?: string } {
  const minted = row.state === "active" ? readMinted(row.minted) : undefined;
  return minted === undefined ? {} : { minted };
}

function fromSqlTime(text: string | null): Date | undefined {
  return text === null ? undefined : new Date(`${text.replace(" ", "T")}Z`);
}

// ---- the adapter --------------------------------------------------------------------------

/**
 * The `mysql-database` adapter. Admin rights it needs: `REQUIRED_ADMIN_GRANT` (config.ts).
 * Every statement is built with mysql2's `format` (identifiers through `escapeId`, values through
 * `escape`), and logins and database names are checked against the login pattern before any SQL.
 */
export class MariadbAdapter implements BatchedAdapter {
  /** `holdsMany` asks five queries however many consumers it checks: a verify pass asks once for all. */
  readonly verifyBatch = Infinity;
  readonly #config: ResolvedMariadbConfig;
  readonly #pool: MariadbPool;
  #marksReady: Promise<void> | undefined;
  readonly #marks = `${mysql.escapeId(MARKS_SCHEMA)}.${mysql.escapeId("marks")}`;

  constructor(pool: MariadbPool, config: ResolvedMariadbConfig) {
    this.#pool = pool;
    this.#config = config;
  }

  /** The instance name this adapter writes into its marks. */
  get instance(): string {
    return this.#config.instance;
  }

  // ---- SQL plumbing ----

  async #run(sql: string, values: SqlValue[] = [], secret?: string | readonly string[]): Promise<unknown> {
    const text = mysql.format(sql, values);
    try {
      const [result] = await this.#pool.query(text);
      return result;
    } catch (err) {
      if (secret !== undefined && typeof err === "object" && err !== null) {
        // A statement carrying a password hash is not repeated in the error (a parse error quotes it).
        const e = err as MysqlishError;
        e.sql = "(statement withheld: it carries a password hash)";
        for (const hash of typeof secret === "string" ? [secret] : secret) {
          e.message = e.message.split(hash).join("*<hash>");
        }
      }
      if (errnoOf(err) === ER_NO_SUCH_TABLE || errnoOf(err) === ER_BAD_DB_ERROR) this.#marksReady = undefined;
      throw err;
    }
  }

  async #rows<T>(sql: string, values: SqlValue[] = []): Promise<T[]> {
    return (await this.#run(sql, values)) as T[];
  }

  /** Rows of the marks table, or none when it was never made (nothing was ever created here). */
  async #markRows(where: string, values: SqlValue[]): Promise<MarkRow[]> {
    const select = () =>
      this.#rows<MarkRow>(
        `SELECT login, instance, db, state, retired_at, why, rotation, minted FROM ${this.#marks} WHERE ${where}`,
        values,
      );
    try {
      return await select();
    } catch (err) {
      if (errnoOf(err) === ER_NO_SUCH_TABLE || errnoOf(err) === ER_BAD_DB_ERROR) return [];
      // A marks table made before rotations or mint times were recorded gains its columns, then is
      // read again.
      if (errnoOf(err) !== ER_BAD_FIELD_ERROR) throw err;
      this.#marksReady = undefined;
      await this.#ensureMarks();
      return select();
    }
  }

  #ensureMarks(): Promise<void> {
    this.#marksReady ??= (async () => {
      await this.#run("CREATE DATABASE IF NOT EXISTS ?? CHARACTER SET utf8mb4", [MARKS_SCHEMA]);
      // No secret ever goes here: only what was made, for which instance, and its retirement.
      await this.#run(
        `CREATE TABLE IF NOT EXISTS ${this.#marks} (` +
          "login VARCHAR(64) NOT NULL PRIMARY KEY, " +
          "instance VARCHAR(64) NOT NULL, " +
          "db VARCHAR(64) NOT NULL UNIQUE, " +
          "state ENUM('active','retired') NOT NULL, " +
          "retired_at DATETIME(3) NULL, " +
          "why TEXT NULL, " +
          "made_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), " +
          "KEY by_instance (instance)" +
          ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
      );
      // The rotation under way (phase and times, never a password); added to a table made before.
      await this.#run(`ALTER TABLE ${this.#marks} ADD COLUMN IF NOT EXISTS rotation TEXT NULL`);
      // When the password applied was minted (never the password); added to a table made before.
      await this.#run(`ALTER TABLE ${this.#marks} ADD COLUMN IF NOT EXISTS minted TEXT NULL`);
    })().catch((err: unknown) => {
      this.#marksReady = undefined;
      throw err;
    });
    return this.#marksReady;
  }

  /** Everything holds and create need to know about `logins`, in five queries whatever their number. */
  async #facts(logins: readonly string[], dbs: readonly string[]): Promise<Map<string, Facts>> {
    const facts = new Map<string, Facts>();
    if (logins.length === 0) return facts;
    const users = [...logins];
    const names = [...dbs];
    const [marks, accounts, schemata, dbGrants, other] = await Promise.all([
      this.#markRows("login IN (?) OR db IN (?)", [users, names]),
      this.#rows<{ User: string; Host: string; Priv: unknown }>(
        "SELECT User, Host, Priv FROM mysql.global_priv WHERE User IN (?)",
        [users],
      ),
      this.#rows<{ name: string }>(
        "SELECT SCHEMA_NAME AS name FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN (?)",
        [names],
      ),
      this.#rows<Record<string, unknown>>("SELECT * FROM mysql.db WHERE Host = '%' AND User IN (?)", [users]),
      this.#rows<{ User: string; n: number | string }>(
        "SELECT User, COUNT(*) AS n FROM (" +
          "SELECT User FROM mysql.tables_priv WHERE Host = '%' AND User IN (?) " +
          "UNION ALL SELECT User FROM mysql.procs_priv WHERE Host = '%' AND User IN (?) " +
          "UNION ALL SELECT User FROM mysql.roles_mapping WHERE Host = '%' AND User IN (?)" +
          ") AS g GROUP BY User",
        [users, users, users],
      ),
    ]);
    const schemaSet = new Set(schemata.map((r) => r.name));
    const markByDb = new Map(marks.map((m) => [m.db, m]));
    const markByLogin = new Map(marks.map((m) => [m.login, m]));
    const anyUser = new Set(accounts.map((a) => a.User));
    const userPriv = new Map(accounts.filter((a) => a.Host === "%").map((a) => [a.User, a.Priv]));
    const otherCount = new Map(other.map((o) => [o.User, Number(o.n)]));
    const grantsOf = new Map<string, Record<string, unknown>[]>();
    for (const g of dbGrants) {
      const user = String(g.User);
      grantsOf.set(user, [...(grantsOf.get(user) ?? []), g]);
    }
    for (const login of logins) {
      const priv = userPriv.get(login);
      facts.set(login, {
        mark: markByLogin.get(login),
        user: priv === undefined ? undefined : parsePriv(priv),
        anyUser: anyUser.has(login),
        schemaExists: (db) => schemaSet.has(db),
        markForDb: (db) => markByDb.get(db),
        dbGrants: grantsOf.get(login) ?? [],
        otherGrants: otherCount.get(login) ?? 0,
      });
    }
    return facts;
  }

  /**
   * How the user's rights stand against ALL on its one database and nothing else: `exact`,
   * `missing` (short of it, nothing beyond: a GRANT adds what lacks) or `extra` (something beyond
   * it: everything is revoked and granted again).
   */
  #grantState(f: Facts, db: string): "exact" | "missing" | "extra" {
    const pattern = grantPattern(db);
    if (f.otherGrants !== 0 || (f.user?.access ?? 0) !== 0) return "extra";
    if (f.dbGrants.some((row) => row.Db !== pattern)) return "extra";
    const row = f.dbGrants[0];
    if (row === undefined) return "missing";
    if (row.Grant_priv !== "N") return "extra";
    for (const [column, value] of Object.entries(row)) {
      if (column.endsWith("_priv") && column !== "Grant_priv" && value !== "Y") return "missing";
    }
    return "exact";
  }

  #passwordExact(user: UserPriv, hash: string): boolean {
    return (
      user.plugin === "mysql_native_password" &&
      user.authentication_string === hash &&
      // A user altered back to one password from two keeps `auth_or: [{}]`: one method, the first.
      (user.auth_or === undefined || isOneMethod(user.auth_or)) &&
      // 0 means "expired": the consumer could log in but do nothing until it changes the password.
      user.password_last_changed !== 0
    );
  }

  /** Whether the user logs in with exactly `hash` and `oldHash` (`IDENTIFIED VIA … OR …`), nothing else. */
  #passwordsExact(user: UserPriv, hash: string, oldHash: string): boolean {
    const or = user.auth_or;
    if (!Array.isArray(or) || or.length !== 2) return false;
    const [first, second] = or as unknown[];
    const isEmpty = typeof first === "object" && first !== null && Object.keys(first).length === 0;
    const old = (typeof second === "object" && second !== null ? second : {}) as UserPriv;
    return (
      user.plugin === "mysql_native_password" &&
      user.authentication_string === hash &&
      isEmpty &&
      old.plugin === "mysql_native_password" &&
      old.authentication_string === oldHash &&
      user.password_last_changed !== 0
    );
  }

  /**
   * Whether the server holds the consumer as asked: with `hash` alone and a mark recording no
   * rotation, or, with `oldHash`, with both (a rotation overlapping).
   */
  #holdsFrom(f: Facts, db: string, hash: string, oldHash?: string): boolean {
    const { mark, user } = f;
    return (
      mark !== undefined &&
      mark.instance === this.#config.instance &&
      mark.state === "active" &&
      mark.db === db &&
      user !== undefined &&
      user.account_locked !== true &&
      (oldHash === undefined
        ? this.#passwordExact(user, hash) && (mark.rotation ?? null) === null
        : this.#passwordsExact(user, hash, oldHash)) &&
      f.schemaExists(db) &&
      this.#grantState(f, db) === "exact"
    );
  }

  #notMadeHere(login: string, resource: string, madeBy: string): NotMadeHereError {
    return new NotMadeHereError(login, this.#config.instance, { resource, madeBy });
  }

  /** Throws unless this instance may (re)make `login` with `db`. */
  #assertMine(login: string, db: string, f: Facts): void {
    const { mark } = f;
    const user = `user ${login}`;
    if (mark !== undefined && mark.instance !== this.#config.instance) {
      throw this.#notMadeHere(login, user, `it was made by provider instance ${mark.instance}`);
    }
    if (mark === undefined && f.anyUser) {
      throw this.#notMadeHere(login, user, "a person or another tool made it: it carries no mesh mark");
    }
    if (mark !== undefined && mark.db !== db) throw new DerivedChangedError(login, "database", mark.db, db);
    const holder = f.markForDb(db);
    if (holder !== undefined && holder.login !== login) {
      throw this.#notMadeHere(login, `database ${db}`, `it was made for consumer ${holder.login}`);
    }
    if (mark === undefined && f.schemaExists(db)) {
      throw this.#notMadeHere(
        login,
        `database ${db}`,
        "a person or another tool made it: no mesh mark names it",
      );
    }
  }

  // ---- the Adapter contract ----

  /**
   * Makes (or repairs, or re-enables) '<login>'@'%' with exactly the password, its database and ALL
   * on it alone. Each step is idempotent and the mark is written first, so a kill at any point is
   * finished by the next call.
   * @throws ValueRefusedError before any SQL; NotMadeHereError, DerivedChangedError when the server
   *   holds something this instance must not touch.
   */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    const login = p.as;
    const db = databaseFor(login, p.values);
    const hash = nativePasswordHash(p.password);
    signal.throwIfAborted();
    await this.#ensureMarks();
    signal.throwIfAborted();
    const f = (await this.#facts([login], [db])).get(login)!;
    this.#assertMine(login, db, f);
    const minted = p.minted ?? null;
    if (this.#holdsFrom(f, db, hash) && f.mark?.minted === minted) return;

    const user: SqlValue[] = [login, "%"];
    const comingBack = f.mark?.state === "retired";
    // The mint time goes in before the password: a kill between leaves a mark no older than what
    // the server holds, so an older password is never put back over it.
    if (f.mark === undefined) {
      await this.#run(
        `INSERT INTO ${this.#marks} (login, instance, db, state, minted) VALUES (?, ?, ?, 'active', ?)`,
        [login, this.#config.instance, db, minted],
      );
    } else if (f.mark.minted !== minted) {
      await this.#run(`UPDATE ${this.#marks} SET minted = ? WHERE login = ? AND instance = ?`, [
        minted,
        login,
        this.#config.instance,
      ]);
    }
    signal.throwIfAborted();
    // Only what is not as it should be is written. A consumer coming back stays locked until its
    // password and grants are in place; a new one has no rights until its grant, so it need not be.
    if (f.user === undefined) {
      await this.#run(
        `CREATE USER IF NOT EXISTS ?@? IDENTIFIED BY PASSWORD ?${comingBack ? " ACCOUNT LOCK" : ""}`,
        [...user, hash],
        hash,
      );
    }
    if (!f.schemaExists(db)) await this.#run("CREATE DATABASE IF NOT EXISTS ?? CHARACTER SET utf8mb4", [db]);
    signal.throwIfAborted();
    const grants = this.#grantState(f, db);
    if (grants === "extra") await this.#run("REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@?", user);
    if (grants !== "exact") {
      await this.#run(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(grantPattern(db))}.* TO ?@?`, user);
    }
    const userRight =
      f.user !== undefined && f.user.account_locked !== true && this.#passwordExact(f.user, hash);
    if (!userRight && (f.user !== undefined || comingBack)) {
      await this.#run("ALTER USER ?@? IDENTIFIED BY PASSWORD ? ACCOUNT UNLOCK", [...user, hash], hash);
    }
    if (comingBack || (f.mark?.rotation ?? null) !== null) {
      // After the password: a kill before this leaves the rotation recorded, and the next pass ends it.
      await this.#run(
        `UPDATE ${this.#marks} SET state = 'active', retired_at = NULL, why = NULL, rotation = NULL WHERE login = ? AND instance = ?`,
        [login, this.#config.instance],
      );
    }
  }

  /**
   * Makes the new password valid beside the one being retired (`IDENTIFIED VIA
   * mysql_native_password USING … OR mysql_native_password USING …`, both as hashes), with the
   * database and grants as `create` makes them, and records the rotation in the mark: first as
   * `add`, then as asked once both log in, so a kill between leaves a mark the next pass finishes.
   * @throws as `create` does.
   */
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void> {
    const login = p.as;
    const db = databaseFor(login, p.values);
    const hash = nativePasswordHash(p.password);
    const oldHash = nativePasswordHash(p.retiring);
    signal.throwIfAborted();
    await this.#ensureMarks();
    let f = (await this.#facts([login], [db])).get(login)!;
    this.#assertMine(login, db, f);
    if (f.mark?.state !== "active" || f.user === undefined) {
      // Nothing of the old password to keep: made as create makes it, then overlapped.
      await this.create({ ...p, retiring: undefined }, signal);
      f = (await this.#facts([login], [db])).get(login)!;
    }
    const recorded = JSON.stringify(rotation);
    const minted = p.minted ?? null;
    const marked = f.mark?.rotation === recorded && f.mark.minted === minted;
    if (this.#holdsFrom(f, db, hash, oldHash) && marked) return;
    signal.throwIfAborted();
    const mark = `UPDATE ${this.#marks} SET rotation = ?, minted = ? WHERE login = ? AND instance = ?`;
    if (!marked) {
      await this.#run(mark, [
        JSON.stringify({ ...rotation, phase: "add" }),
        minted,
        login,
        this.#config.instance,
      ]);
    }
    const user: SqlValue[] = [login, "%"];
    if (!f.schemaExists(db)) await this.#run("CREATE DATABASE IF NOT EXISTS ?? CHARACTER SET utf8mb4", [db]);
    const grants = this.#grantState(f, db);
    if (grants === "extra") await this.#run("REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@?", user);
    if (grants !== "exact") {
      await this.#run(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(grantPattern(db))}.* TO ?@?`, user);
    }
    if (f.user?.account_locked === true || !this.#passwordsExact(f.user!, hash, oldHash)) {
      await this.#run(
        "ALTER USER ?@? IDENTIFIED VIA mysql_native_password USING ? OR mysql_native_password USING ? ACCOUNT UNLOCK",
        [...user, hash, oldHash],
        [hash, oldHash],
      );
    }
    await this.#run(mark, [recorded, minted, login, this.#config.instance]);
  }

  /**
   * Whether the server holds each consumer exactly as asked, in five queries whatever their number.
   * A consumer whose database name is not valid is answered with its error, unchecked. Read-only.
   */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    const answers = new Map<string, boolean | Error>();
    const asked: { login: string; db: string; hash: string; oldHash: string | undefined }[] = [];
    for (const p of ps) {
      try {
        asked.push({
          login: p.as,
          db: databaseFor(p.as, p.values),
          hash: nativePasswordHash(p.password),
          oldHash: p.retiring === undefined ? undefined : nativePasswordHash(p.retiring),
        });
      } catch (err) {
        answers.set(p.as, err instanceof Error ? err : new Error(String(err)));
      }
    }
    signal.throwIfAborted();
    const facts = await this.#facts(
      asked.map((a) => a.login),
      asked.map((a) => a.db),
    );
    for (const { login, db, hash, oldHash } of asked) {
      const f = facts.get(login);
      answers.set(login, f !== undefined && this.#holdsFrom(f, db, hash, oldHash));
    }
    return answers;
  }

  /**
   * Which of these logins have a session open now: one query of `information_schema.PROCESSLIST`
   * grouped by USER (the admin's PROCESS right shows every session), sampled at each verify pass.
   * The adapter never logs in as a consumer, so nothing of its own is counted. Read-only.
   */
  async seenConnected(logins: readonly string[], signal: AbortSignal): Promise<ReadonlySet<string>> {
    signal.throwIfAborted();
    const asked = new Set(logins);
    const rows = await this.#rows<{ login: string }>(
      "SELECT USER AS login FROM information_schema.PROCESSLIST GROUP BY USER",
    );
    return new Set(rows.map((r) => String(r.login)).filter((login) => asked.has(login)));
  }

  /**
   * Locks the account, ends its sessions, and marks it retired with `at` and `why`. Data is kept.
   * @throws NotMadeHereError when this instance did not make `as`.
   */
  async retire(login: string, _derived: Retired["derived"], why: string, at: Date): Promise<void> {
    const [mark] = await this.#markRows("login = ?", [login]);
    if (mark === undefined || mark.instance !== this.#config.instance) {
      const madeBy = mark ? `it was made by provider instance ${mark.instance}` : "it carries no mesh mark";
      throw this.#notMadeHere(login, `user ${login}`, madeBy);
    }
    // Locked first, then marked: a kill in between leaves a locked consumer still marked active,
    // which the next pass sees and finishes, never an open one marked retired.
    await this.#run("ALTER USER IF EXISTS ?@? ACCOUNT LOCK", [login, "%"]);
    await this.#endSessions(login);
    await this.#run(
      `UPDATE ${this.#marks} SET state = 'retired', retired_at = ?, why = ?, minted = NULL WHERE login = ? AND instance = ?`,
      [toSqlTime(at), why, login, this.#config.instance],
    );
  }

  /**
   * Ends every open session of `login` (`KILL CONNECTION` of each in the process list), after
   * `mesh rotate --now` replaced its password. Counts those ended.
   * @throws NotMadeHereError when this instance did not make `login`.
   */
  async endSessions(login: string): Promise<number> {
    const [mark] = await this.#markRows("login = ?", [login]);
    if (mark === undefined || mark.instance !== this.#config.instance) {
      const madeBy = mark ? `it was made by provider instance ${mark.instance}` : "it carries no mesh mark";
      throw this.#notMadeHere(login, `user ${login}`, madeBy);
    }
    return this.#endSessions(login);
  }

  /** Ends every open session of `login`; a locked account keeps those it already had. */
  async #endSessions(login: string): Promise<number> {
    const sessions = await this.#rows<{ id: number }>(
      "SELECT ID AS id FROM information_schema.PROCESSLIST WHERE USER = ?",
      [login],
    );
    let ended = 0;
    for (const { id } of sessions) {
      try {
        await this.#run("KILL CONNECTION ?", [Number(id)]);
        ended++;
      } catch (err) {
        if (errnoOf(err) !== ER_NO_SUCH_THREAD) throw err; // it ended by itself meanwhile
      }
    }
    return ended;
  }

  /** Active and retired consumers of this instance, from its marks. Users it did not make never appear. */
  async inventory(): Promise<InventoryEntry[]> {
    const rows = await this.#markRows("instance = ? ORDER BY login", [this.#config.instance]);
    return rows.map((row) => ({
      as: row.login,
      state: row.state,
      derived: { database: row.db },
      retiredAt: fromSqlTime(row.retired_at),
      why: row.why ?? undefined,
      ...(row.rotation === null || row.rotation === undefined
        ? {}
        : { rotation: readRotation(parseJsonOrUndefined(row.rotation)) }),
      ...mintedOf(row),
    }));
  }

  /**
   * Drops a retired consumer's database and user, then its mark; reports the bytes its tables held.
   * The guard has checked that this instance made and retired it.
   */
  async delete(r: Retired): Promise<Deleted> {
    const login = r.as;
    const db = r.derived["database"];
    if (typeof db !== "string" || !LOGIN_PATTERN.test(db)) {
      throw new Error(`mariadb: the mark of ${login} names no database`);
    }
    const [size] = await this.#rows<{ bytes: number | string | null }>(
      "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) AS bytes FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?",
      [db],
    );
    await this.#endSessions(login);
    await this.#run("DROP DATABASE IF EXISTS ??", [db]);
    await this.#run("DROP USER IF EXISTS ?@?", [login, "%"]);
    // The mark goes last: a kill before this leaves it, so asking again finishes the job.
    await this.#run(`DELETE FROM ${this.#marks} WHERE login = ? AND instance = ?`, [
      login,
      this.#config.instance,
    ]);
    return { freedBytes: Number(size?.bytes ?? 0) };
  }

  /** Whether any account of this user name exists, on any host, made by anyone. */
  async exists(login: string): Promise<boolean> {
    const rows = await this.#rows("SELECT 1 FROM mysql.global_priv WHERE User = ? LIMIT 1", [login]);
    return rows.length > 0;
  }

  /** MariaDB's word on its errors: refused credentials, a server out of reach, rights missing. */
  classify(err: unknown): FailureClass | undefined {
    const errno = errnoOf(err);
    if (errno !== undefined) {
      if (CREDENTIALS_ERRNOS.has(errno)) return "credentials-rejected";
      if (UNREACHABLE_ERRNOS.has(errno)) return "unreachable";
      if (REFUSED_ERRNOS.has(errno)) return "refused";
    }
    if (isNetworkError(err) || errorCodes(err).some((code) => UNREACHABLE_CODES.has(code)))
      return "unreachable";
    return undefined;
  }

  /** Ends the admin pool. */
  async close(): Promise<void> {
    await this.#pool.end();
  }
}

/**
 * Makes the MariaDB adapter with a mysql2 pool for the admin (wrapped by `config.wrapPool` when
 * given). Connects lazily: nothing is opened until asked.
 * @throws AdminSettingError when the configuration cannot be used.
 */
export function createMariadbAdapter(config: MariadbAdapterConfig): MariadbAdapter {
  const c = resolveMariadbConfig(config);
  const pool = mysql.createPool({
    host: c.admin.host,
    port: c.admin.port,
    user: c.admin.user,
    password: c.admin.password,
    connectionLimit: c.poolSize,
    maxIdle: c.poolSize,
    idleTimeout: 60_000,
    connectTimeout: c.connectTimeoutMs,
    enableKeepAlive: true,
    dateStrings: true,
    multipleStatements: false,
    charset: "utf8mb4",
  });
  // Values are escaped with backslashes; a server running NO_BACKSLASH_ESCAPES would read them
  // differently, so every admin session turns it off first (queued before any other statement).
  pool.pool.on("connection", (conn) => {
    conn.query("SET SESSION sql_mode = REPLACE(@@sql_mode, 'NO_BACKSLASH_ESCAPES', '')", () => {});
  });
  const plain: MariadbPool = { query: (sql: string) => pool.query(sql), end: () => pool.end() };
  return new MariadbAdapter(config.wrapPool ? config.wrapPool(plain) : plain, c);
}
