// A private nats-server for tests and for the embedded default: its own directory, a free loopback
// port, JetStream on with its store in that directory. The machine's own NATS (4222) is never used.
// The configuration text comes from the caller (the bus package generates the mesh's), so this
// launcher knows nothing about accounts or credentials; it takes only `findNatsServer` from the bus,
// so tests and `mesh up` run the same binary.
import type { ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findNatsServer } from "@mesh/bus";
import { awaitReady, onFreePort, spawnServer, terminate } from "./server-process.ts";

/** Where the server will listen and keep its JetStream store, for a config that needs to say so. */
export interface NatsPlace {
  readonly host: string;
  readonly port: number;
  readonly storeDir: string;
}

/** How to start a private nats-server. */
export interface StartNatsOptions {
  /**
   * The server's configuration: text, or a function of where it will run. The launcher always
   * sets `-a 127.0.0.1` and the port on the command line, and appends JetStream with `store_dir`
   * in its own directory (replacing any `jetstream` settings in the text), so the text need not
   * repeat them and cannot override them.
   */
  readonly config: string | ((place: NatsPlace) => string);
  /** Keep the JetStream store in this directory instead of one inside the server's temp dir. */
  readonly storeDir?: string;
}

/** A running private nats-server. */
export interface NatsServer {
  readonly host: string;
  readonly port: number;
  /** `nats://127.0.0.1:<port>` */
  readonly url: string;
  /** The JetStream store; it survives `restart()`. */
  readonly storeDir: string;
  /** The config file the server was started with. */
  readonly configFile: string;
  /** Stops the server and removes its directory (and a store it made itself). Idempotent. */
  stop(): Promise<void>;
  /**
   * Stops the server and starts it again on the same port with the same store, so what JetStream
   * kept is still there. `whileDown` runs while the server is stopped; `config` replaces the
   * configuration for the new run.
   * @throws NatsStartError when it does not come back; Error when the server was stopped.
   */
  restart(options?: {
    whileDown?: () => Promise<void>;
    config?: string | ((place: NatsPlace) => string);
  }): Promise<void>;
  /**
   * Rewrites the config file and asks the running server to reload it (SIGHUP), for what
   * nats-server can change without a restart.
   * @throws Error when the server was stopped.
   */
  reload(config: string | ((place: NatsPlace) => string)): Promise<void>;
}

/** nats-server did not start or did not accept connections in time; the message carries its log's tail. */
export class NatsStartError extends Error {
  override name = "NatsStartError";
  constructor(
    readonly port: number,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`nats-server on 127.0.0.1:${port} did not start: ${detail}`, options);
  }
}

const HOST = "127.0.0.1";
const READY_WITHIN_MS = 30_000;
const STOP_WITHIN_MS = 15_000;

/**
 * Starts a private nats-server (from PATH, or /usr/sbin) on a free loopback port with JetStream,
 * configured by `options.config`, and waits until it accepts connections.
 * @throws NatsNotFoundError when nats-server is not installed; NatsStartError when it does not start.
 */
export async function startNats(options: StartNatsOptions): Promise<NatsServer> {
  const binary = await findNatsServer();
  const dir = await mkdtemp(join(tmpdir(), "mesh-nats-"));
  const storeDir = options.storeDir ?? join(dir, "jetstream");
  const configFile = join(dir, "nats.conf");
  const log = join(dir, "nats.log");
  try {
    await mkdir(storeDir, { recursive: true, mode: 0o700 });
    const write = (config: StartNatsOptions["config"], port: number): Promise<void> => {
      const text = typeof config === "function" ? config({ host: HOST, port, storeDir }) : config;
      return writeFile(configFile, `${text}\n${jetStreamBlock(storeDir)}`, { mode: 0o600 });
    };
    const launch = (port: number): Promise<ChildProcess> => launchNats(binary, configFile, port, log);

    const started = await onFreePort(async (port) => {
      await write(options.config, port);
      return launch(port);
    });
    const port = started.port;
    let child: ChildProcess | undefined = started.child;

    let stopped: Promise<void> | undefined;
    const alive = (): void => {
      if (stopped !== undefined) throw new Error(`nats-server on ${HOST}:${port} was stopped; start another`);
    };
    return {
      host: HOST,
      port,
      url: `nats://${HOST}:${port}`,
      storeDir,
      configFile,
      stop() {
        stopped ??= (async () => {
          if (child !== undefined) await terminate(child, STOP_WITHIN_MS);
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
      async restart(restartOptions = {}) {
        alive();
        if (child !== undefined) await terminate(child, STOP_WITHIN_MS);
        child = undefined;
        await restartOptions.whileDown?.();
        if (restartOptions.config !== undefined) await write(restartOptions.config, port);
        child = await launch(port);
      },
      async reload(config) {
        alive();
        await write(config, port);
        child?.kill("SIGHUP");
      },
    };
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * The JetStream block the launcher appends to every config. It goes in the file rather than on the
 * command line: nats-server refuses `-sd` next to a `store_dir` in the file, and refuses to reload
 * a file without the `store_dir` it started with. The last `jetstream` in a file wins.
 */
function jetStreamBlock(storeDir: string): string {
  if (/["\\\n]/.test(storeDir))
    throw new Error(`store directory ${JSON.stringify(storeDir)} cannot go in a config`);
  return `# Added by the test launcher: JetStream keeps its files here.\njetstream { store_dir: "${storeDir}" }\n`;
}

async function launchNats(
  binary: string,
  configFile: string,
  port: number,
  log: string,
): Promise<ChildProcess> {
  // Command-line flags win over the config file, so the address and port are always the launcher's.
  const server = spawnServer(binary, ["-c", configFile, "-a", HOST, "-p", String(port), "-l", log]);
  return awaitReady(server, {
    probe: () => readInfo(port),
    ready: (reply) => reply.startsWith("INFO "),
    expected: "INFO",
    withinMs: READY_WITHIN_MS,
    stopWithinMs: STOP_WITHIN_MS,
    log,
    fail: (detail) => new NatsStartError(port, detail),
  });
}

/**
 * Opens a TCP connection and returns the first line the server sends. A NATS server greets every
 * client with `INFO {...}` before any authentication, and only once it is ready to serve.
 */
function readInfo(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: HOST, port });
    let text = "";
    socket.setTimeout(2_000, () => socket.destroy(new Error("no answer within 2 s")));
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      const end = text.indexOf("\r\n");
      if (end >= 0) {
        socket.destroy();
        resolve(text.slice(0, end));
      }
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(text));
  });
}
