// The embedded default's bus: one local nats-server with JetStream, its state and configuration in
// the mesh's state directory, on a loopback port that is free (the one it had before, when it still is).
// It runs in its own process group, so a terminal's Ctrl-C reaches `mesh up` alone, which stops it
// last. It is recorded (PID and start time) and marked (MESH_BUS_DIR in its environment, and its own
// pid_file), so the next start stops one that a `kill -9` of `mesh up` left: never two servers on one
// JetStream store.
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync, readFileSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { dirname, join } from "node:path";
import { findNatsServer, type BusAuthority, type BusLogger } from "@mesh/bus";
import { isRunning, processStartTime, ProcessRecords, stopLeftovers, type LeftProcess } from "@mesh/agent";

/** A running embedded bus. */
export interface EmbeddedBus {
  readonly url: string;
  readonly logFile: string;
  /** nats-server's PID (the leader of its own process group). */
  readonly pid: number;
  /** Stops it: SIGTERM, SIGKILL after 10 s. Safe to call twice. */
  stop(): Promise<void>;
}

/** The variable that marks an embedded nats-server with its bus directory. */
export const BUS_DIR_MARK = "MESH_BUS_DIR";

/** How long nats-server has after SIGTERM (it syncs JetStream) before SIGKILL. */
const BUS_STOP_GRACE_MS = 10_000;

/**
 * Stops the nats-server that the last `mesh up` of bus directory `dir` left running: the one
 * recorded there, the one its pid_file names (when that process runs nats-server with this
 * directory's config), and any process marked with `MESH_BUS_DIR=dir`. SIGTERM, then SIGKILL after
 * 10 s. Said to `logger`.
 */
export async function stopLeftoverBus(dir: string, logger?: BusLogger): Promise<void> {
  const records = new ProcessRecords(dir);
  const fromPidFile = leftByPidFile(dir);
  await stopLeftovers({
    also: fromPidFile === undefined ? [] : [fromPidFile],
    records,
    kind: "bus",
    marked: (env) => env.get(BUS_DIR_MARK) === dir,
    graceMs: BUS_STOP_GRACE_MS,
    ...(logger ? { logger } : {}),
    where: `the bus in ${dir}`,
  });
}

function leftByPidFile(dir: string): LeftProcess | undefined {
  try {
    const pid = Number(readFileSync(join(dir, "nats.pid"), "utf8").trim());
    if (!Number.isInteger(pid) || pid <= 1 || pid === process.pid) return undefined;
    // A PID file outlives its process, and the PID may be another's since: only a nats-server run
    // with this directory's config is ours.
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    if (!cmdline.includes(join(dir, "nats.conf"))) return undefined;
    const start = processStartTime(pid);
    return start === undefined ? undefined : { name: "nats-server", pid, start };
  } catch {
    return undefined;
  }
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

async function choosePort(portFile: string): Promise<number> {
  const before = Number((await readFile(portFile, "utf8").catch(() => "")).trim());
  if (Number.isInteger(before) && before > 0 && (await isFree(before))) return before;
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/**
 * Starts nats-server for the mesh whose state is in `dir` (`<state>/bus`), configured by `authority`
 * (decentralized auth: a connection without credentials is refused by the server itself), listening
 * on `listen` (loopback unless other machines' agents must reach it). A server the last run left
 * is stopped first. The caller holds the state directory's lock.
 * @throws NatsNotFoundError (naming the Debian package); an Error naming the log when the server does not come up.
 */
export async function startEmbeddedBus(
  dir: string,
  authority: BusAuthority,
  listen = "127.0.0.1",
  logger?: BusLogger,
): Promise<EmbeddedBus> {
  const binary = await findNatsServer();
  await mkdir(join(dir, "jetstream"), { recursive: true, mode: 0o700 });
  await stopLeftoverBus(dir, logger);
  const records = new ProcessRecords(dir);
  const portFile = join(dir, "port");
  const port = await choosePort(portFile);
  const config = join(dir, "nats.conf");
  const pidFile = join(dir, "nats.pid");
  const text =
    authority.serverConfig({ port, host: listen, storeDir: join(dir, "jetstream") }) +
    `pid_file: ${JSON.stringify(pidFile)}\n`;
  await writeFile(`${config}.tmp`, text, { mode: 0o600 });
  await rename(`${config}.tmp`, config);
  await writeFile(portFile, `${port}\n`);
  const logFile = join(dir, "nats.log");
  const log = openSync(logFile, "a", 0o600);
  // Its own group, so Ctrl-C does not reach it; an environment of its own, with the mark.
  const child: ChildProcess = spawn(binary, ["-c", config], {
    stdio: ["ignore", log, log],
    detached: true,
    env: {
      PATH: process.env["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin",
      [BUS_DIR_MARK]: dir,
      MESH_STATE_DIR: dirname(dir),
    },
  });
  closeSync(log);
  const pid = child.pid;
  const start = pid === undefined ? undefined : processStartTime(pid);
  if (pid !== undefined && start !== undefined) records.add({ kind: "bus", name: "nats-server", pid, start });
  let exited = false;
  child.once("exit", () => {
    exited = true;
    if (pid !== undefined) records.remove(pid);
  });
  const deadline = Date.now() + 30_000;
  while (!(await accepts(port))) {
    if (exited || Date.now() > deadline) {
      if (pid !== undefined && start !== undefined && isRunning(pid, start)) process.kill(-pid, "SIGKILL");
      throw new Error(`nats-server did not start on 127.0.0.1:${port}; its log: ${logFile}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    logFile,
    pid: pid ?? 0,
    async stop() {
      if (exited) return;
      const gone = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      const group = (signal: NodeJS.Signals): void => {
        try {
          if (pid !== undefined) process.kill(-pid, signal);
        } catch {
          child.kill(signal);
        }
      };
      group("SIGTERM");
      const timer = setTimeout(() => group("SIGKILL"), BUS_STOP_GRACE_MS);
      await gone;
      clearTimeout(timer);
    },
  };
}
