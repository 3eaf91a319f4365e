// The embedded default's bus: one local nats-server with JetStream, its state and configuration in
// the mesh's state directory, on a loopback port that is free (the one it had before, when it still is).
import { spawn, type ChildProcess } from "node:child_process";
import { openSync, closeSync } from "node:fs";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { join } from "node:path";
import { findNatsServer, type BusAuthority } from "@mesh/bus";

/** A running embedded bus. */
export interface EmbeddedBus {
  readonly url: string;
  readonly logFile: string;
  stop(): Promise<void>;
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
 * on `listen` (loopback unless other machines' agents must reach it).
 * @throws NatsNotFoundError (naming the Debian package); an Error naming the log when the server does not come up.
 */
export async function startEmbeddedBus(
  dir: string,
  authority: BusAuthority,
  listen = "127.0.0.1",
): Promise<EmbeddedBus> {
  const binary = await findNatsServer();
  await mkdir(join(dir, "jetstream"), { recursive: true, mode: 0o700 });
  const portFile = join(dir, "port");
  const port = await choosePort(portFile);
  const config = join(dir, "nats.conf");
  const text = authority.serverConfig({ port, host: listen, storeDir: join(dir, "jetstream") });
  await writeFile(`${config}.tmp`, text, { mode: 0o600 });
  await rename(`${config}.tmp`, config);
  await writeFile(portFile, `${port}\n`);
  const logFile = join(dir, "nats.log");
  const log = openSync(logFile, "a", 0o600);
  const child: ChildProcess = spawn(binary, ["-c", config], { stdio: ["ignore", log, log] });
  closeSync(log);
  let exited = false;
  child.once("exit", () => (exited = true));
  const deadline = Date.now() + 30_000;
  while (!(await accepts(port))) {
    if (exited || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`nats-server did not start on 127.0.0.1:${port}; its log: ${logFile}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `nats://127.0.0.1:${port}`,
    logFile,
    async stop() {
      if (exited) return;
      const gone = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await gone;
      clearTimeout(timer);
    },
  };
}
