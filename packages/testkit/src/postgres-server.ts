// A private PostgreSQL for tests: its own data directory, a free loopback port and scram-sha-256 on,
// because the machine's own server trusts every local login and so cannot tell a right password
// from a wrong one.

import { execFile, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync } from "node:fs";
import { chown, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { tmpdir } from "node:os";
import pg from "pg";
import { freePort } from "./free-port.ts";
import { exitOnSignal } from "./exit-on-signal.ts";

/** What a test needs from a running private PostgreSQL. */
export interface PostgresServer {
  readonly host: string;
  readonly port: number;
  /** The data directory (kept by `halt()`, removed by `stop()`). */
  readonly dataDir: string;
  /** The server's log (what `log_statement` and friends write), for tests that read what it saw. */
  readonly logFile: string;
  /** A superuser URL on database `postgres` (never `template1`, which would block CREATE DATABASE). */
  readonly superuserUrl: string;
  /**
   * Makes a role that is not a superuser, with only LOGIN, CREATEROLE and CREATEDB (what a managed
   * PostgreSQL hands its customer), and answers its URL on database `postgres`.
   * @throws when the role cannot be made (for example a name that is taken).
   */
  createAdmin(name: string): Promise<string>;
  /** Runs one statement as the superuser on `database` (default `postgres`) and answers its rows. */
  query<R extends Record<string, unknown> = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
    database?: string,
  ): Promise<R[]>;
  /**
   * Whether `login` logs in with `password` (to `database`, default `postgres`): false when the
   * server refuses the login or its password, true when it gets in.
   * @throws anything else (the server away, a database that is not there), so a test never reads a
   * broken server as a refused login.
   */
  canLogin(login: string, password: string, database?: string): Promise<boolean>;
  /**
   * Locks the roles' catalog as a busy server might: everyone still reads it and logs in, but a
   * role made or changed (CREATE ROLE, ALTER ROLE … PASSWORD) waits until `release()`. For tests
   * that must see a provider in the middle of changing a login, which otherwise lasts milliseconds.
   */
  lockRoles(): Promise<{ release(): Promise<void> }>;
  /** Stops the server and keeps its data, for tests of a backend that goes away and comes back. */
  halt(): Promise<void>;
  /** Starts a halted server again on the same port with the same data. */
  resume(): Promise<void>;
  /** Stops the server and removes its files. Safe to call more than once. */
  stop(): Promise<void>;
}

/** How to start the server. */
export interface StartPostgresOptions {
  /** Extra `postgres -c` settings, added to the ones that make it fast for tests. */
  readonly settings?: Readonly<Record<string, string>>;
  /** How long to wait for the server to accept connections, in seconds (120). */
  readonly startTimeoutSeconds?: number;
}

/** The server binaries are not installed where the launcher looks. */
export class PostgresBinariesNotFoundError extends Error {
  override name = "PostgresBinariesNotFoundError";
  constructor() {
    super(
      "PostgreSQL server binaries (initdb) not found on PATH or in /usr/lib/postgresql/*/bin; " +
        "install the Debian package postgresql",
    );
  }
}

/** The server did not start, or a command of its own failed; `log` holds the server's last words. */
export class PostgresLaunchError extends Error {
  override name = "PostgresLaunchError";
  constructor(
    readonly step: string,
    readonly log: string,
    options?: { cause?: unknown },
  ) {
    super(`private PostgreSQL failed at ${step}; its last output:\n${log}`, options);
  }
}

interface Binaries {
  readonly initdb: string;
  readonly pgCtl: string;
}

/** Finds initdb and pg_ctl on PATH, else in the highest /usr/lib/postgresql/<version>/bin. */
function findBinaries(): Binaries {
  const dirs = (process.env["PATH"] ?? "").split(delimiter).filter((d) => d !== "");
  const debianRoot = "/usr/lib/postgresql";
  if (existsSync(debianRoot)) {
    const versions = readdirSync(debianRoot)
      .filter((v) => /^\d+(\.\d+)?$/.test(v))
      .sort((a, b) => Number(b) - Number(a));
    dirs.push(...versions.map((v) => join(debianRoot, v, "bin")));
  }
  for (const dir of dirs) {
    const initdb = join(dir, "initdb");
    const pgCtl = join(dir, "pg_ctl");
    if (existsSync(initdb) && existsSync(pgCtl) && existsSync(join(dir, "postgres")))
      return { initdb, pgCtl };
  }
  throw new PostgresBinariesNotFoundError();
}

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

function run(file: string, args: readonly string[], timeoutMs = 180_000): Promise<string> {
  // PostgreSQL refuses to run as root, so as root every server command runs as `postgres`.
  const [cmd, argv] = isRoot ? ["runuser", ["-u", "postgres", "--", file, ...args]] : [file, [...args]];
  return new Promise((resolve, reject) => {
    execFile(cmd, argv, { timeout: timeoutMs, encoding: "utf8" }, (err, stdout, stderr) => {
      if (err) reject(Object.assign(err, { output: `${stdout}${stderr}` }));
      else resolve(`${stdout}${stderr}`);
    });
  });
}

async function postgresIds(): Promise<{ uid: number; gid: number }> {
  const passwd = await readFile("/etc/passwd", "utf8");
  const line = passwd.split("\n").find((l) => l.startsWith("postgres:"));
  const fields = line?.split(":");
  if (!fields || fields.length < 4) {
    throw new Error(
      "running as root but there is no `postgres` system user; install the Debian package postgresql",
    );
  }
  return { uid: Number(fields[2]), gid: Number(fields[3]) };
}

function quoteForShell(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

function urlFor(user: string, password: string, port: number, database = "postgres"): string {
  return `postgresql://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
}

// Servers still running when the process exits are stopped at once, so a test file that crashed
// past its after() leaves no postmaster behind.
const running = new Map<string, string>();
exitOnSignal();
process.once("exit", () => {
  for (const [dataDir, pgCtl] of running) {
    const argv = ["stop", "-D", dataDir, "-m", "immediate", "-w", "-t", "10"];
    if (isRoot) spawnSync("runuser", ["-u", "postgres", "--", pgCtl, ...argv], { stdio: "ignore" });
    else spawnSync(pgCtl, argv, { stdio: "ignore" });
  }
});

/**
 * Starts a private PostgreSQL from the installed binaries on a free 127.0.0.1 port, with
 * scram-sha-256 for every connection and the durability settings off (it is a test server).
 * @throws PostgresBinariesNotFoundError when initdb is not installed.
 * @throws PostgresLaunchError when the server does not initialise or start.
 */
export async function startPostgres(options: StartPostgresOptions = {}): Promise<PostgresServer> {
  const bins = findBinaries();
  const root = await mkdtemp(join(tmpdir(), "mesh-pg-"));
  const dataDir = join(root, "data");
  const logFile = join(root, "server.log");
  const pwFile = join(root, "pwfile");
  const password = randomBytes(18).toString("base64url");
  await writeFile(pwFile, `${password}\n`, { mode: 0o600 });
  if (isRoot) {
    const { uid, gid } = await postgresIds();
    await chown(root, uid, gid);
    await chown(pwFile, uid, gid);
  }

  const lastLog = async (): Promise<string> => {
    const text = await readFile(logFile, "utf8").catch(() => "");
    return text.split("\n").slice(-30).join("\n");
  };
  const fail = async (step: string, err: unknown): Promise<never> => {
    const output = (err as { output?: string }).output ?? "";
    throw new PostgresLaunchError(step, `${output}\n${await lastLog()}`.trim(), { cause: err });
  };

  try {
    await run(bins.initdb, [
      "-D",
      dataDir,
      "-A",
      "scram-sha-256",
      `--pwfile=${pwFile}`,
      "-U",
      "postgres",
      "--encoding=UTF8",
      "--locale=C",
      "--no-sync",
    ]);
  } catch (err) {
    await rm(root, { recursive: true, force: true });
    return fail("initdb", err);
  }
  await rm(pwFile, { force: true });

  const port = await freePort();
  const settings: Record<string, string> = {
    listen_addresses: "127.0.0.1",
    fsync: "off",
    synchronous_commit: "off",
    full_page_writes: "off",
    max_connections: "200",
    shared_buffers: "32MB",
    ...options.settings,
  };
  const serverOptions = [
    `-p ${port}`,
    `-k ${quoteForShell(root)}`,
    ...Object.entries(settings).map(([k, v]) => `-c ${k}=${quoteForShell(v)}`),
  ].join(" ");
  const timeout = String(options.startTimeoutSeconds ?? 120);

  let state: "running" | "halted" | "stopped" = "halted";
  const start = async (): Promise<void> => {
    try {
      await run(bins.pgCtl, [
        "start",
        "-D",
        dataDir,
        "-l",
        logFile,
        "-w",
        "-t",
        timeout,
        "-o",
        serverOptions,
      ]);
    } catch (err) {
      return fail("start", err);
    }
    running.set(dataDir, bins.pgCtl);
    state = "running";
  };
  const shutdown = async (mode: "fast" | "immediate"): Promise<void> => {
    await run(bins.pgCtl, ["stop", "-D", dataDir, "-m", mode, "-w", "-t", timeout]).catch(
      async (err: unknown) => {
        // pg_ctl says "Is server running?" when it is already down: that is the state asked for.
        const output = (err as { output?: string }).output ?? "";
        if (!/is server running|no server running|PID file .* does not exist/i.test(output)) {
          await fail("stop", err);
        }
      },
    );
    running.delete(dataDir);
  };

  await start();
  const superuserUrl = urlFor("postgres", password, port);

  const query = async <R extends Record<string, unknown>>(
    text: string,
    values: readonly unknown[] = [],
    database = "postgres",
  ): Promise<R[]> => {
    const client = new pg.Client({ connectionString: urlFor("postgres", password, port, database) });
    client.on("error", () => {});
    await client.connect();
    try {
      const result = await client.query<R>(text, [...values]);
      return result.rows;
    } finally {
      await client.end().catch(() => {});
    }
  };

  try {
    await query("SELECT 1");
  } catch (err) {
    await shutdown("immediate").catch(() => {});
    await rm(root, { recursive: true, force: true });
    return fail("first connection", err);
  }

  return {
    host: "127.0.0.1",
    port,
    dataDir,
    logFile,
    superuserUrl,
    query,
    async lockRoles(): Promise<{ release(): Promise<void> }> {
      const client = new pg.Client({ connectionString: superuserUrl });
      client.on("error", () => {});
      await client.connect();
      try {
        await client.query("BEGIN");
        await client.query("LOCK TABLE pg_catalog.pg_authid IN SHARE MODE");
      } catch (err) {
        await client.end().catch(() => {});
        throw err;
      }
      let released: Promise<void> | undefined;
      return {
        release() {
          released ??= client
            .query("COMMIT")
            .then(() => undefined)
            .catch(() => undefined)
            .finally(() => client.end().catch(() => {}));
          return released;
        },
      };
    },
    async canLogin(login: string, password: string, database = "postgres"): Promise<boolean> {
      const client = new pg.Client({ host: "127.0.0.1", port, user: login, password, database });
      client.on("error", () => {});
      try {
        await client.connect();
        return true;
      } catch (err) {
        // 28P01: wrong password or no such role; 28000: a role that may not log in (NOLOGIN).
        const code = (err as { code?: unknown }).code;
        if (code === "28P01" || code === "28000") return false;
        throw err;
      } finally {
        await client.end().catch(() => {});
      }
    },
    async createAdmin(name: string): Promise<string> {
      const adminPassword = randomBytes(18).toString("base64url");
      await query(
        `CREATE ROLE ${pg.escapeIdentifier(name)} LOGIN CREATEROLE CREATEDB PASSWORD ${pg.escapeLiteral(adminPassword)}`,
      );
      return urlFor(name, adminPassword, port);
    },
    async halt(): Promise<void> {
      if (state !== "running") return;
      await shutdown("fast");
      state = "halted";
    },
    async resume(): Promise<void> {
      if (state === "stopped")
        throw new Error(`private PostgreSQL on port ${port} was stopped; it cannot resume`);
      if (state === "running") return;
      await start();
    },
    async stop(): Promise<void> {
      if (state === "stopped") return;
      const was = state;
      state = "stopped";
      if (was === "running") await shutdown("immediate");
      await rm(root, { recursive: true, force: true });
    },
  };
}
