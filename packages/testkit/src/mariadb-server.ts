import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, createWriteStream, type WriteStream } from "node:fs";
import { mkdir, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import mysql from "mysql2/promise";
import { freePort } from "./free-port.ts";
import { exitOnSignal } from "./exit-on-signal.ts";

/**
 * What an admin made by `createAdmin` may do: everything a database owner can, on any database,
 * with GRANT OPTION (granting ALL on a consumer's database requires holding each of those
 * privileges with GRANT OPTION), plus CREATE USER, PROCESS (to see other users' sessions) and
 * CONNECTION ADMIN (to end them). No SUPER, SHUTDOWN, FILE, RELOAD or replication rights.
 */
export const MARIADB_ADMIN_PRIVILEGES =
  "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, REFERENCES, INDEX, ALTER, CREATE TEMPORARY TABLES, " +
  "LOCK TABLES, EXECUTE, CREATE VIEW, SHOW VIEW, CREATE ROUTINE, ALTER ROUTINE, EVENT, TRIGGER, " +
  "DELETE HISTORY, CREATE USER, PROCESS, CONNECTION ADMIN";

/** A private MariaDB started by `startMariadb`, listening on a free loopback port, passwords on. */
export interface MariadbServer {
  /** Always "127.0.0.1". */
  readonly host: string;
  readonly port: number;
  /** `mysql://root:<pw>@127.0.0.1:<port>`: the superuser, for checks from outside the adapter. */
  readonly rootUrl: string;
  /** Where the server keeps its files (removed by `stop`). */
  readonly dir: string;
  /**
   * Makes a non-root admin holding `MARIADB_ADMIN_PRIVILEGES` and returns its URL.
   * @throws when `name` is not a plain lowercase name, or the server refuses.
   */
  createAdmin(name?: string): Promise<string>;
  /**
   * Whether `login` logs in with `password`: false when the server refuses it (a wrong password,
   * no such account, a locked one), true when it gets in.
   * @throws anything else (the server away), so a test never reads a broken server as a refused login.
   */
  canLogin(login: string, password: string): Promise<boolean>;
  /** Stops the server (data kept) so that clients see it down. Idempotent. */
  halt(): Promise<void>;
  /** Starts it again on the same port with the same data, and waits until it answers. */
  resume(): Promise<void>;
  /** Stops the server and removes its files. Idempotent. */
  stop(): Promise<void>;
}

/** MariaDB's answers to a login it does not let in: a bad password or account (1045), a locked account (4151). */
const LOGIN_REFUSED = new Set([1045, 4151]);

/** Where to find the binaries and how long to wait; every field has a sensible default. */
export interface MariadbOptions {
  /** The server binary (default: `mariadbd` on PATH, /usr/sbin or /usr/bin). */
  readonly mariadbd?: string;
  /** The installer (default: `mariadb-install-db` beside it or on PATH). */
  readonly installDb?: string;
  /** How long to wait for the server to answer (60 s: the test machines are small and busy). */
  readonly startTimeout?: number;
}

/** The MariaDB binaries are not installed on this machine. */
export class MariadbNotFoundError extends Error {
  override name = "MariadbNotFoundError";
  constructor(readonly binary: string) {
    super(`${binary} not found; install the Debian package mariadb-server`);
  }
}

/** The server did not start or did not answer in time; `log` holds the end of its error log. */
export class MariadbStartError extends Error {
  override name = "MariadbStartError";
  constructor(
    message: string,
    readonly log: string,
    options?: { cause?: unknown },
  ) {
    super(`${message}\n--- end of the MariaDB log ---\n${log}`, options);
  }
}

// Every server this process started, so a test run that dies without its `after()` does not leave
// servers behind.
const running = new Set<ChildProcess>();
exitOnSignal();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

function findBinary(name: string, explicit?: string): string {
  if (explicit !== undefined) {
    if (!isExecutable(explicit)) throw new MariadbNotFoundError(explicit);
    return explicit;
  }
  const dirs = [...(process.env.PATH ?? "").split(delimiter), "/usr/sbin", "/usr/bin", "/usr/local/sbin"];
  for (const dir of dirs) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  throw new MariadbNotFoundError(name);
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function tail(path: string, lines = 30): Promise<string> {
  try {
    return (await readFile(path, "utf8")).split("\n").slice(-lines).join("\n");
  } catch {
    return "(no log)";
  }
}

/**
 * Starts a private MariaDB for tests: a fresh data directory under the system temp directory, a free
 * loopback port, a random root password, no anonymous accounts, settings that trade durability for
 * speed. Tear it down with `stop()` (in `after()`).
 *
 * @throws MariadbNotFoundError when mariadbd or mariadb-install-db is missing.
 * @throws MariadbStartError when the server does not start or answer in time.
 */
export async function startMariadb(options: MariadbOptions = {}): Promise<MariadbServer> {
  const mariadbd = findBinary("mariadbd", options.mariadbd);
  const installDb = findBinary("mariadb-install-db", options.installDb);
  const startTimeout = options.startTimeout ?? 60_000;

  const dir = await mkdtemp(join(tmpdir(), "mesh-mariadb-"));
  const dataDir = join(dir, "data");
  const socket = join(dir, "sock");
  const logPath = join(dir, "server.log");
  // A temporary directory of its own: a starting mariadbd removes every "#sql" file in its tmpdir,
  // and in the shared /tmp those may be the temporary tables of another server's installer.
  const tmp = join(dir, "tmp");
  await mkdir(dataDir);
  await mkdir(tmp);

  try {
    const install = spawnSync(
      installDb,
      [
        "--no-defaults",
        `--datadir=${dataDir}`,
        `--tmpdir=${tmp}`,
        "--user=root",
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        "--skip-name-resolve",
      ],
      { encoding: "utf8", timeout: startTimeout },
    );
    if (install.status !== 0) {
      throw new MariadbStartError(
        `mariadb-install-db failed in ${dataDir} (exit ${install.status ?? install.signal})`,
        `${install.stdout ?? ""}\n${install.stderr ?? ""}`.trim().split("\n").slice(-30).join("\n"),
        { cause: install.error },
      );
    }
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  const rootPassword = randomBytes(18).toString("base64url");
  let port = 0;
  let child: ChildProcess | undefined;
  let log: WriteStream | undefined;
  let stopped = false;

  const launch = async (): Promise<void> => {
    log = createWriteStream(logPath, { flags: "a" });
    const proc = spawn(
      mariadbd,
      [
        "--no-defaults",
        `--datadir=${dataDir}`,
        `--tmpdir=${tmp}`,
        "--user=root",
        `--port=${port}`,
        "--bind-address=127.0.0.1",
        `--socket=${socket}`,
        `--pid-file=${join(dir, "mariadbd.pid")}`,
        "--skip-name-resolve",
        "--skip-log-bin",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        "--innodb-buffer-pool-size=32M",
        "--innodb-log-file-size=16M",
        "--performance-schema=OFF",
        "--max-connections=500",
        "--character-set-server=utf8mb4",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    proc.stdout?.pipe(log, { end: false });
    proc.stderr?.pipe(log, { end: false });
    running.add(proc);
    proc.once("exit", () => running.delete(proc));
    child = proc;
  };

  // Before the root password is set, root logs in over the socket with none.
  const waitReady = async (password: string | undefined): Promise<void> => {
    const proc = child;
    const deadline = Date.now() + startTimeout;
    let lastError: unknown;
    while (Date.now() < deadline) {
      if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) {
        throw new MariadbStartError(`mariadbd exited while starting on port ${port}`, await tail(logPath));
      }
      try {
        const conn = await mysql.createConnection({
          socketPath: socket,
          user: "root",
          ...(password === undefined ? {} : { password }),
          connectTimeout: 2_000,
        });
        await conn.end();
        return;
      } catch (err) {
        lastError = err;
        await delay(100);
      }
    }
    throw new MariadbStartError(
      `mariadbd did not answer on port ${port} within ${startTimeout} ms`,
      await tail(logPath),
      {
        cause: lastError,
      },
    );
  };

  const halt = async (): Promise<void> => {
    const proc = child;
    child = undefined;
    if (proc !== undefined && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
      proc.kill("SIGTERM");
      // The grace timer is cleared once the server has exited: left running, it kept the test's
      // process alive for 30 s after its last test.
      let grace: NodeJS.Timeout | undefined;
      const clean = await Promise.race([
        exited.then(() => true),
        new Promise<boolean>((resolve) => (grace = setTimeout(() => resolve(false), 30_000))),
      ]);
      clearTimeout(grace);
      if (!clean) {
        proc.kill("SIGKILL");
        await exited;
      }
    }
    const stream = log;
    log = undefined;
    if (stream !== undefined) await new Promise<void>((resolve) => stream.end(() => resolve()));
  };

  // A port that was free when asked can be taken before the server binds it: try a few.
  let started = false;
  for (let attempt = 0; attempt < 3 && !started; attempt++) {
    port = await freePort();
    await launch();
    try {
      await waitReady(undefined);
      started = true;
    } catch (err) {
      await halt();
      const bindFailed = (await tail(logPath)).includes("Address already in use");
      if (!bindFailed || attempt === 2) {
        await rm(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }

  try {
    const conn = await mysql.createConnection({ socketPath: socket, user: "root" });
    try {
      // The installer may create anonymous accounts; they shadow 'user'@'%' for local logins. Its
      // root@<hostname> is ignored under --skip-name-resolve and cannot be altered: it goes too.
      const [accounts] = await conn.query<mysql.RowDataPacket[]>("SELECT User, Host FROM mysql.global_priv");
      for (const { User: user, Host: host } of accounts) {
        const loopback = host === "localhost" || host === "127.0.0.1" || host === "::1";
        if (user === "" || (user === "root" && !loopback)) await conn.query("DROP USER ?@?", [user, host]);
        else if (user === "root")
          await conn.query("ALTER USER ?@? IDENTIFIED BY ?", [user, host, rootPassword]);
      }
    } finally {
      await conn.end();
    }
  } catch (err) {
    await halt();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }

  const host = "127.0.0.1";
  const rootUrl = `mysql://root:${rootPassword}@${host}:${port}`;

  return {
    host,
    get port() {
      return port;
    },
    rootUrl,
    dir,
    async createAdmin(name = "mesh_admin") {
      if (!/^[a-z][a-z0-9_]{0,31}$/.test(name))
        throw new Error(`admin name ${JSON.stringify(name)} is not a plain name`);
      const password = randomBytes(18).toString("base64url");
      const conn = await mysql.createConnection(rootUrl);
      try {
        await conn.query("CREATE USER ?@'%' IDENTIFIED BY ?", [name, password]);
        await conn.query(`GRANT ${MARIADB_ADMIN_PRIVILEGES} ON *.* TO ?@'%' WITH GRANT OPTION`, [name]);
      } finally {
        await conn.end();
      }
      return `mysql://${name}:${password}@${host}:${port}`;
    },
    async canLogin(login: string, password: string): Promise<boolean> {
      try {
        const conn = await mysql.createConnection({
          host,
          port,
          user: login,
          password,
          connectTimeout: 10_000,
        });
        await conn.end();
        return true;
      } catch (err) {
        const errno = (err as { errno?: unknown } | null)?.errno;
        if (typeof errno === "number" && LOGIN_REFUSED.has(errno)) return false;
        throw err;
      }
    },
    halt,
    async resume() {
      if (stopped) throw new Error(`the MariaDB in ${dir} was stopped for good; start another one`);
      if (child !== undefined) return;
      await launch();
      await waitReady(rootPassword);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await halt();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
