// A private NATS cluster on loopback for tests: several nats-server processes, each on its own free
// client and route ports, each started from a config file the caller writes (the mesh's bus-config
// code), so a test runs exactly what an operator would. A server can be killed, started again from
// its config, or paused (SIGSTOP: a silent partition, its sockets open and nothing answering).
import type { ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { clusterServerConfigs, findNatsServer, type BusAuthority } from "@mesh/bus";
import { freePort } from "./free-port.ts";
import { awaitReady, spawnServer, terminate } from "./server-process.ts";
import { NatsStartError } from "./nats-server.ts";

/** One server of the cluster, before it starts: what its config must say. */
export interface NatsClusterMember {
  readonly name: string;
  /** Always 127.0.0.1. */
  readonly host: string;
  readonly port: number;
  readonly clusterPort: number;
}

/** How to start a cluster. */
export interface StartNatsClusterOptions {
  /** How many servers (default 3). */
  readonly size?: number;
  /**
   * Writes the servers' config files and answers their paths, one per member in order. `dir` is
   * the cluster's own temporary directory, removed by `stop()`: keep the stores and files there.
   */
  readonly configure: (members: readonly NatsClusterMember[], dir: string) => Promise<readonly string[]>;
}

/** A running private cluster. */
export interface NatsCluster {
  readonly members: readonly NatsClusterMember[];
  /** `nats://127.0.0.1:<port>` of every server, in order. */
  readonly urls: readonly string[];
  /** The cluster's temporary directory. */
  readonly dir: string;
  /** SIGKILLs server `i` (no goodbye to its peers or clients). */
  kill(i: number): Promise<void>;
  /** Starts server `i` again from its config file (after `kill`), and waits until it answers. */
  start(i: number): Promise<void>;
  /** SIGSTOPs server `i`: its connections stay open and nothing on them answers. */
  pause(i: number): void;
  /** SIGCONTs a paused server. */
  resume(i: number): void;
  /** The PID of server `i` while it runs. */
  pid(i: number): number | undefined;
  /** Stops every server and removes the directory. Idempotent. */
  stop(): Promise<void>;
}

const HOST = "127.0.0.1";
const READY_WITHIN_MS = 30_000;
const STOP_WITHIN_MS = 15_000;

/**
 * Starts `size` nats-servers on loopback from the configs `configure` writes, and waits until each
 * accepts connections (forming the JetStream meta cluster takes a few seconds more: wait for a
 * JetStream call to succeed).
 * @throws NatsNotFoundError when nats-server is not installed; NatsStartError when one does not start.
 */
export async function startNatsCluster(options: StartNatsClusterOptions): Promise<NatsCluster> {
  const binary = await findNatsServer();
  const size = options.size ?? 3;
  const dir = await mkdtemp(join(tmpdir(), "mesh-nats-cluster-"));
  const children: (ChildProcess | undefined)[] = [];
  const paused = new Set<number>();
  const killAll = async (): Promise<void> => {
    for (const [i, child] of children.entries()) {
      if (child === undefined) continue;
      if (paused.has(i)) child.kill("SIGCONT");
      await terminate(child, STOP_WITHIN_MS);
    }
  };
  try {
    const ports = new Set<number>();
    while (ports.size < size * 2) ports.add(await freePort());
    const list = [...ports];
    const members: NatsClusterMember[] = Array.from({ length: size }, (_, i) => ({
      name: `n${i + 1}`,
      host: HOST,
      port: list[2 * i] ?? 0,
      clusterPort: list[2 * i + 1] ?? 0,
    }));
    const files = await options.configure(members, dir);
    if (files.length !== size)
      throw new Error(`configure wrote ${files.length} config files for ${size} servers`);
    await mkdir(join(dir, "logs"), { recursive: true });
    const launch = (i: number): Promise<ChildProcess> => {
      const member = members[i];
      const file = files[i];
      if (member === undefined || file === undefined) throw new RangeError(`no server ${i} in the cluster`);
      const log = join(dir, "logs", `${member.name}.log`);
      return awaitReady(spawnServer(binary, ["-c", file, "-l", log]), {
        probe: () => readInfo(member.port),
        ready: (reply) => reply.startsWith("INFO "),
        expected: "INFO",
        withinMs: READY_WITHIN_MS,
        stopWithinMs: STOP_WITHIN_MS,
        log,
        fail: (detail) => new NatsStartError(member.port, detail),
      });
    };
    // All at once: each waits for its routes, and a server alone does not form JetStream.
    const launched = await Promise.allSettled(members.map((_, i) => launch(i)));
    for (const result of launched) children.push(result.status === "fulfilled" ? result.value : undefined);
    const failed = launched.find((r) => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    let stopped: Promise<void> | undefined;
    return {
      members,
      urls: members.map((m) => `nats://${HOST}:${m.port}`),
      dir,
      async kill(i) {
        const child = children[i];
        children[i] = undefined;
        paused.delete(i);
        if (child === undefined || child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
        child.kill("SIGKILL");
        await exited;
      },
      async start(i) {
        if (children[i] !== undefined) throw new Error(`server ${i} of the cluster is running`);
        children[i] = await launch(i);
      },
      pause(i) {
        children[i]?.kill("SIGSTOP");
        paused.add(i);
      },
      resume(i) {
        children[i]?.kill("SIGCONT");
        paused.delete(i);
      },
      pid: (i) => children[i]?.pid,
      stop() {
        stopped ??= (async () => {
          await killAll();
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  } catch (err) {
    await killAll();
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/** The first line a server sends on a new TCP connection (`INFO {...}` once it is ready). */
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

/**
 * A `configure` for `startNatsCluster` that writes the mesh's cluster configuration for
 * `authority` (`clusterServerConfigs`, as `mesh bus-config` does, without TLS) in the cluster's
 * directory, seeds each server's account JWT directory, and answers the config files.
 */
export function meshClusterConfigs(authority: BusAuthority): StartNatsClusterOptions["configure"] {
  return async (members, dir) => {
    const configs = clusterServerConfigs(authority, {
      cluster: "mesh",
      dataDir: dir,
      servers: members.map((m) => ({
        name: m.name,
        host: m.host,
        clientPort: m.port,
        clusterPort: m.clusterPort,
      })),
    });
    const files: string[] = [];
    for (const config of configs) {
      for (const [path, text] of Object.entries(config.seedFiles)) {
        await mkdir(dirname(join(config.dir, path)), { recursive: true, mode: 0o700 });
        await writeFile(join(config.dir, path), text, { mode: 0o600 });
      }
      const file = join(config.dir, "nats.conf");
      await writeFile(file, config.text, { mode: 0o600 });
      files.push(file);
    }
    return files;
  };
}
