// A private Redis for tests: its own directory, a free loopback port, authentication on, nothing
// saved to disk. The machine's own Redis (6379) is never used: tests must tell a right password from
// a wrong one and must be free to break, restart and fill their server.
import type { ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { awaitReady, onFreePort, spawnServer, terminate } from "./server-process.ts";

/** How to start a private Redis. */
export interface StartRedisOptions {
  /**
   * Configure an ACL file (`aclfile`) in the server's directory, so `ACL SAVE` works and ACL users
   * survive `restart()`. Without it ACL users live only in memory, as on a Redis with no ACL file.
   */
  readonly aclFile?: boolean;
}

/** A running private Redis. */
export interface RedisServer {
  readonly host: string;
  readonly port: number;
  /** `redis://admin:<password>@127.0.0.1:<port>`: an ACL user allowed everything. */
  readonly adminUrl: string;
  /** The ACL file's path when started with `aclFile: true`. */
  readonly aclFile: string | undefined;
  /** Stops the server and removes its directory. Idempotent. */
  stop(): Promise<void>;
  /**
   * Stops the server and starts it again on the same port and with the same ACL file (if any).
   * Data is lost, since nothing is saved. `whileDown` runs while the server is stopped, for tests
   * of what a client does when its server is gone.
   * @throws RedisStartError when it does not come back; Error when the server was stopped.
   */
  restart(options?: { whileDown?: () => Promise<void> }): Promise<void>;
}

/** redis-server is not installed where the tests look for it. */
export class RedisNotFoundError extends Error {
  override name = "RedisNotFoundError";
  constructor(readonly searched: string) {
    super("redis-server not found on PATH; install the Debian package redis-server");
  }
}

/** redis-server did not start or did not answer PING in time; the message carries its log's tail. */
export class RedisStartError extends Error {
  override name = "RedisStartError";
  constructor(
    readonly port: number,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`redis-server on 127.0.0.1:${port} did not start: ${detail}`, options);
  }
}

const HOST = "127.0.0.1";
const ADMIN = "admin";
const READY_WITHIN_MS = 30_000;
const STOP_WITHIN_MS = 10_000;

/**
 * Starts a private redis-server from PATH on a free loopback port with authentication on: the
 * `default` user is disabled and an `admin` user with a random password may do everything.
 * @throws RedisNotFoundError when redis-server is not on PATH; RedisStartError when it does not answer.
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const binary = await findOnPath("redis-server");
  const dir = await mkdtemp(join(tmpdir(), "mesh-redis-"));
  try {
    const password = randomBytes(24).toString("hex");
    const hash = createHash("sha256").update(password).digest("hex");
    // The admin's password is written as its hash, so the plaintext is in no file.
    const users = [
      "user default off resetpass resetkeys resetchannels -@all",
      `user ${ADMIN} on #${hash} ~* &* +@all`,
    ].join("\n");
    const config = join(dir, "redis.conf");
    const aclFile = options.aclFile === true ? join(dir, "users.acl") : undefined;
    if (aclFile !== undefined) {
      // Redis refuses `user` lines in the config file together with an ACL file.
      await writeFile(aclFile, `${users}\n`, { mode: 0o600 });
      await writeFile(config, `aclfile ${aclFile}\n`, { mode: 0o600 });
    } else {
      await writeFile(config, `${users}\n`, { mode: 0o600 });
    }
    const launch = (port: number): Promise<ChildProcess> => launchRedis(binary, config, dir, port, password);

    const started = await onFreePort(launch);
    const port = started.port;
    let child: ChildProcess | undefined = started.child;

    let stopped: Promise<void> | undefined;
    return {
      host: HOST,
      port,
      adminUrl: `redis://${ADMIN}:${password}@${HOST}:${port}`,
      aclFile,
      stop() {
        stopped ??= (async () => {
          if (child !== undefined) await terminate(child, STOP_WITHIN_MS);
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
      async restart(restartOptions = {}) {
        if (stopped !== undefined)
          throw new Error(`redis-server on ${HOST}:${port} was stopped; start another`);
        if (child !== undefined) await terminate(child, STOP_WITHIN_MS);
        child = undefined;
        await restartOptions.whileDown?.();
        child = await launch(port);
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

async function findOnPath(name: string): Promise<string> {
  const searched = process.env["PATH"] ?? "";
  for (const dir of searched.split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  throw new RedisNotFoundError(searched);
}

async function launchRedis(
  binary: string,
  config: string,
  dir: string,
  port: number,
  password: string,
): Promise<ChildProcess> {
  const log = join(dir, "redis.log");
  const server = spawnServer(binary, [
    config,
    "--bind",
    HOST,
    "--port",
    String(port),
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    dir,
    "--daemonize",
    "no",
    "--logfile",
    log,
  ]);
  return awaitReady(server, {
    probe: () => pingAsAdmin(port, password),
    ready: (reply) => reply.includes("+PONG"),
    expected: "PONG",
    withinMs: READY_WITHIN_MS,
    stopWithinMs: STOP_WITHIN_MS,
    log,
    fail: (detail) => new RedisStartError(port, detail),
  });
}

/** Sends AUTH and PING as RESP arrays, then QUIT, and returns everything the server said. */
function pingAsAdmin(port: number, password: string): Promise<string> {
  const encode = (args: string[]): string =>
    `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("")}`;
  return new Promise((resolve, reject) => {
    const socket = connect({ host: HOST, port });
    let reply = "";
    socket.setTimeout(2_000, () => socket.destroy(new Error("no answer within 2 s")));
    socket.on("connect", () => {
      socket.write(encode(["AUTH", ADMIN, password]) + encode(["PING"]) + encode(["QUIT"]));
    });
    socket.on("data", (chunk: Buffer) => (reply += chunk.toString("utf8")));
    socket.on("error", reject);
    socket.on("close", () => resolve(reply));
  });
}
