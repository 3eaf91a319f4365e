// `mesh up [mesh.yaml]`: the embedded default on one machine — a local nats-server, the controller,
// an agent for each node of the fleet (or those named), and through them the fleet's modules.
// `mesh status` asks the running controller what it knows.
import { randomBytes } from "node:crypto";
import { chmod, mkdir, readdir, readFile, rename, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { credsFor, newUserKeys, readFileIfExists, writeFileAtomic } from "@mesh/bus";
import type { Agent, IsolationMode, StateLock } from "@mesh/agent";
import type { Controller } from "@mesh/controller";
import { ListenError, parseDuration } from "@mesh/sdk";
import { askController, stateDirOf } from "./controller-request.ts";
import type { EmbeddedBus } from "./embedded-bus.ts";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { agentLogOptions, logIo, prefixed, withLogFlags, type LogFlags } from "./log-lines.ts";
import { formatStatus, maskedAnswer, type StatusAnswer } from "./status-command.ts";

async function writePrivate(path: string, data: string | Uint8Array): Promise<void> {
  await writeFile(`${path}.tmp`, data, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

/** How long a module has after SIGTERM before SIGKILL, when `--grace` does not say. */
export const DEFAULT_GRACE = "10s";

/** How much longer than the grace period a whole stop may take: the agents, the controller, the bus. */
const STOP_MARGIN_MS = 4_000;

function graceOf(text: string | undefined): number {
  try {
    return parseDuration(text ?? DEFAULT_GRACE);
  } catch (err) {
    throw new CliExit(EXIT_USAGE, `--grace: ${(err as Error).message}`);
  }
}

/** Adds `mesh up` and `mesh status` to `program`. */
export function addUpCommands(program: Command, io: CliIo): void {
  withLogFlags(program.command("up"))
    .summary("run the mesh on this machine, with the fleet's modules")
    .description(
      "run the mesh on this machine: nats-server, the controller, the agents and the fleet's modules",
    )
    .argument("[fleet]", "the fleet file", "mesh.yaml")
    .option("--state <dir>", "where the mesh keeps its state (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option("--node <name...>", "run agents only for these nodes of the fleet (default: every node)")
    .option(
      "--listen <host>",
      "the address nats-server listens on; other machines' agents reach it there (default: 127.0.0.1)",
    )
    .option(
      "--advertise <host[:port]>",
      "the address other machines reach the bus at, written into the join tokens of the nodes this machine does not run",
    )
    .option(
      "--http <host:port>",
      "where the controller serves the dashboard and /metrics; loopback unless an operator token is given (default: 127.0.0.1, a free port)",
    )
    .option(
      "--operator-token-file <path>",
      "the operator token the dashboard and /metrics ask for (made there, 0600, when the file does not exist); needed for an --http other machines reach",
    )
    .option(
      "--isolation <mode>",
      "strict: a module its own user cannot run (its directory unreadable to it) is refused; auto: it runs as the agent's user, and mesh status says so",
      "strict",
    )
    .option(
      "--grace <duration>",
      `how long a module has to stop after SIGTERM before SIGKILL; mesh up stops within this plus 5 s (default: ${DEFAULT_GRACE})`,
    )
    .addHelpText(
      "after",
      `
It says each step as it starts (on standard error) and runs until Ctrl-C or SIGTERM (once or twice):
then it stops the modules, the agents, the controller and the bus, in that order. One mesh per
state directory: a second mesh up on it refuses, naming the process that holds it; what a mesh
killed with -9 left running (nats-server, modules) is stopped when the next one starts.

Examples:
  $ mesh up examples/fleet/mesh.yaml --http 127.0.0.1:9470
  then open the dashboard it prints, or from another shell: mesh status
  $ mesh up mesh.yaml --http 0.0.0.0:9470 --operator-token-file .mesh-state/operator.token
  $ mesh up mesh.yaml --node node-1 --listen 0.0.0.0 --advertise 10.0.0.5   # the others join with mesh agent`,
    )
    .action(
      async (
        fleet: string,
        flags: {
          state?: string;
          node?: string[];
          listen?: string;
          advertise?: string;
          http?: string;
          operatorTokenFile?: string;
          isolation: string;
          grace?: string;
        } & LogFlags,
      ) => {
        isolationOf(flags.isolation);
        await up(
          resolve(fleet),
          stateDirOf(flags.state, io),
          flags.node,
          flags.listen,
          logIo(io, flags),
          flags.http,
          flags.operatorTokenFile,
          graceOf(flags.grace),
          isolationOf(flags.isolation),
          flags.advertise,
        );
      },
    );

  withLogFlags(program.command("agent"))
    .summary("run one node's agent, for a controller on another machine")
    .description("run one node's agent on this machine (a node of a fleet whose controller runs elsewhere)")
    .requiredOption("--node <name>", "the node's name, as in the fleet file")
    .option("--join <file>", "the join token file `mesh up` wrote for this node (needed only the first time)")
    .option("--state <dir>", "the node's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option(
      "--grace <duration>",
      `how long a module has to stop after SIGTERM before SIGKILL (default: ${DEFAULT_GRACE})`,
    )
    .option(
      "--isolation <mode>",
      "strict: a module its own user cannot run (its directory unreadable to it) is refused; auto: it runs as the agent's user, and mesh status says so",
      "strict",
    )
    .addHelpText(
      "after",
      `
Examples:
  on the new machine, with the token file copied from <state>/join/node-2.token:
  $ mesh agent --node node-2 --join node-2.token --state /var/lib/mesh
  after it has joined once, it reconnects with what it was issued:
  $ mesh agent --node node-2 --state /var/lib/mesh

One agent per state directory: a second one refuses, naming the process that holds it; the modules
a killed agent left running are stopped when the next one starts. SIGINT or SIGTERM (once or twice)
stops the modules (SIGKILL after --grace), then the agent.`,
    )
    .action(
      async (
        flags: { node: string; join?: string; state?: string; isolation: string; grace?: string } & LogFlags,
      ) => {
        await agent(
          flags.node,
          flags.join,
          stateDirOf(flags.state, io),
          logIo(io, flags),
          graceOf(flags.grace),
          isolationOf(flags.isolation),
        );
      },
    );

  program
    .command("rotate")
    .summary("mint a new password for one consumer's interface")
    .description(
      "mint a new password for one consumer's interface; the provider applies it, the consumer reads it",
    )
    .argument("<consumer>", "the consumer module")
    .argument("<interface>", "the interface it needs, e.g. postgres-database")
    .option("--state <dir>", "the mesh's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option("--json", "print the controller's answer as JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh rotate notes postgres-database
  $ mesh rotate notes postgres-database --json --state /var/lib/mesh`,
    )
    .action(async (consumer: string, iface: string, flags: { state?: string; json?: boolean }) => {
      const answer = await ask<{ ok: boolean; error?: string; busCannotStore?: boolean }>(
        stateDirOf(flags.state, io),
        "rotate",
        JSON.stringify({ consumer, interface: iface }),
        io,
      );
      if (!answer.ok)
        throw new CliExit(
          answer.busCannotStore === true ? EXIT_UNREACHABLE : EXIT_REFUSED,
          answer.error ?? "the controller refused the rotation",
        );
      io.out(
        flags.json === true
          ? formatJson({ ...answer, consumer, interface: iface })
          : `rotated: ${consumer}'s ${iface} has a new password; its provider applies it and ${consumer} reads it\n`,
      );
    });

  program
    .command("status")
    .summary("nodes, modules, consumers, and the failing ones with why")
    .description(
      "what the running mesh knows: nodes, their modules, every consumer, and the failing ones with why",
    )
    .option("--state <dir>", "the mesh's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option("--json", "print the controller's answer as JSON, for scripts (the same, errors masked)")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh status
  $ mesh status --json | jq '.failing[] | {consumer, class, since}'`,
    )
    .action(async (flags: { state?: string; json?: boolean }) => {
      await status(stateDirOf(flags.state, io), flags.json === true, io);
    });
}

async function up(
  fleetFile: string,
  state: string,
  only: string[] | undefined,
  listen: string | undefined,
  io: CliIo,
  http?: string,
  operatorTokenFile?: string,
  graceMs = parseDuration(DEFAULT_GRACE),
  isolation: IsolationMode = "strict",
  advertise?: string,
): Promise<void> {
  const {
    loadOrCreateAuthority,
    startController,
    operatorPermissions,
    OPERATOR_IDENTITY,
    ControllerMetrics,
    metricsRoute,
    startControllerHttp,
    dashboardRoutes,
  } = await import("@mesh/controller");
  const { startAgent, AgentStartAbortedError, stopLeftoverModules } = await import("@mesh/agent");
  const { startEmbeddedBus } = await import("./embedded-bus.ts");
  const { watchStopSignals, killRecorded } = await import("./stop-signals.ts");
  const say = (m: string) => io.err(`${"mesh up".padEnd(12)}│ ${m}\n`);
  await mkdir(state, { recursive: true, mode: 0o700 });
  // Traverse only, down to each node's state: a module reaches its own directory and lists nothing.
  await mkdir(join(state, "nodes"), { recursive: true, mode: 0o711 });
  await chmod(state, 0o711);
  await chmod(join(state, "nodes"), 0o711);
  const busDir = join(state, "bus");
  const nodesDir = join(state, "nodes");
  const nodeDirs = async (): Promise<string[]> =>
    (await readdir(nodesDir).catch(() => [] as string[])).map((n) => join(nodesDir, n));
  let recordDirs: string[] = [busDir];
  // Listening from the start: a Ctrl-C while starting still stops what has started, in order.
  const stops = watchStopSignals({
    say,
    withinMs: graceMs + STOP_MARGIN_MS,
    onDeadline: () => killRecorded(recordDirs),
  });
  const lock = await takeLock(state, "mesh up", say).catch((err: unknown) => {
    stops.dispose();
    throw err;
  });
  const agents: Agent[] = [];
  const stopping: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    // Modules first (each agent stops its own, all nodes at once), then the controller, the bus last.
    await Promise.all(agents.map((a) => a.stop().catch(() => {})));
    for (const stop of stopping.reverse()) await stop().catch(() => {});
  };
  const stopped = (): boolean => stops.signal.aborted;
  try {
    // What a mesh killed with -9 left: its modules first (they use the bus), then its nats-server.
    recordDirs = [busDir, ...(await nodeDirs())];
    for (const dir of await nodeDirs()) await stopLeftoverModules(dir, graceMs, prefixed(io, "mesh up"));
    // First: an address it must not listen on is refused before anything starts; an operator token
    // lets it listen elsewhere, and the dashboard and /metrics then ask for it.
    const operatorToken =
      operatorTokenFile === undefined
        ? undefined
        : await loadOrCreateOperatorToken(resolve(operatorTokenFile));
    const metrics = new ControllerMetrics();
    const server = await startControllerHttp({
      listen: http,
      routes: [metricsRoute(metrics.registry)],
      operatorToken,
      logger: prefixed(io, "controller"),
    }).catch((err: unknown) => {
      throw new CliExit(
        err instanceof ListenError ? EXIT_REFUSED : EXIT_USAGE,
        `--http: ${(err as Error).message}` +
          (operatorToken === undefined ? " (--operator-token-file FILE gives it one)" : ""),
      );
    });
    stopping.push(() => server.close());
    say(`the controller's HTTP server: ${server.url} (Prometheus metrics at ${server.url}/metrics)`);
    say(`1/4 the bus: starting nats-server (state in ${busDir})`);
    const authority = await loadOrCreateAuthority(join(state, "controller"));
    let bus: EmbeddedBus;
    try {
      bus = await startEmbeddedBus(busDir, authority, listen, prefixed(io, "mesh up"));
    } catch (err) {
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    stopping.push(() => bus.stop());
    say(
      `    nats-server (pid ${bus.pid}) answers on ${bus.url}; a connection without credentials is refused`,
    );
    if (stopped()) return;

    // The operator's own credentials, for `mesh status` from another shell.
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: OPERATOR_IDENTITY,
      publicKey: keys.publicKey,
      permissions: operatorPermissions(),
    });
    await writePrivate(join(state, "operator.creds"), credsFor(jwt, keys.seed));
    await writePrivate(join(state, "bus.json"), JSON.stringify({ servers: [bus.url] }));

    say(`2/4 the controller: reading ${fleetFile}`);
    let controller: Controller;
    try {
      controller = await startController({
        stateDir: join(state, "controller"),
        fleetFile,
        servers: [bus.url],
        authority,
        logger: prefixed(io, "controller"),
        observer: metrics.observer,
      });
    } catch (err) {
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    stopping.push(() => controller.stop());
    if (stopped()) return;
    metrics.follow(() => controller.status());
    for (const route of dashboardRoutes({ sources: controller, tokenRequired: operatorToken !== undefined }))
      server.route(route);
    say(
      `    the dashboard: ${server.url}/` +
        (operatorToken === undefined
          ? ""
          : ` (it asks for the operator token in ${resolve(operatorTokenFile ?? "")})`),
    );
    const fleet = controller.current();
    const consumers = fleet.plan.instances.reduce((n, i) => n + i.consumers.length, 0);
    say(`    ${fleet.nodes.length} node(s), ${fleet.modules.length} module(s), ${consumers} consumer(s)`);

    const nodes = only ?? fleet.nodes;
    for (const node of nodes) {
      if (!fleet.nodes.includes(node)) throw new CliExit(EXIT_USAGE, `node ${node} is not in ${fleetFile}`);
    }
    recordDirs = [busDir, ...nodes.map((n) => join(nodesDir, n))];
    // The other nodes join with `mesh agent`, from the token file written here for each: it names
    // the bus that serves now (the controller's), at the address other machines reach it by.
    const others = fleet.nodes.filter((n) => !nodes.includes(n));
    const { writeJoinTokens } = await import("./join-token-command.ts");
    const tokenFiles = await writeJoinTokens({
      controller,
      state,
      nodes: others,
      // A token is made once; the bus it names is the one that serves now (its port may have moved).
      servers: [bus.url],
      ...(advertise === undefined ? {} : { advertise }),
    }).catch((err: unknown) => {
      throw new CliExit(EXIT_USAGE, `--advertise: ${(err as Error).message}`);
    });
    tokenFiles.forEach((file, i) => {
      const node = others[i] ?? "";
      say(`    node ${node} joins with: mesh agent --node ${node} --join ${file} (copy the file there)`);
    });
    if (others.length > 0 && advertise === undefined && listen !== undefined && listen !== "127.0.0.1") {
      say(
        `    warning: the join tokens name the bus at 127.0.0.1, which other machines cannot reach: ` +
          `give --advertise HOST (this machine's address on their network)`,
      );
    }
    say(`3/4 the agents: ${nodes.join(", ")}`);
    for (const node of nodes) {
      try {
        // The bus that serves now, never the port a stored join token remembers.
        const agent = await startAgent({
          node,
          stateDir: join(nodesDir, node),
          joinToken: await controller.joinToken(node),
          servers: [bus.url],
          logger: prefixed(io, node),
          signal: stops.signal,
          timings: { ...agentLogOptions(io).timings, stopGraceMs: graceMs },
          isolation,
        });
        agents.push(agent);
      } catch (err) {
        if (err instanceof AgentStartAbortedError) return;
        throw new CliExit(EXIT_REFUSED, (err as Error).message);
      }
      if (stopped()) return;
    }
    say(
      `4/4 the modules start on their nodes; \`mesh status --state ${state}\` shows them. Ctrl-C stops everything.`,
    );
    await stops.signalled;
  } finally {
    if (stopped()) say("stopping the modules, the agents, the controller and the bus");
    await stopAll();
    await lock.release();
    stops.dispose();
  }
  say("stopped");
}

// One mesh per state directory: a second one refuses (exit 1) naming the process that holds it.
async function takeLock(dir: string, who: string, say: (m: string) => void): Promise<StateLock> {
  const { lockStateDir, StateLockedError } = await import("@mesh/agent");
  try {
    const lock = await lockStateDir(dir, who);
    if (lock.tookOver !== undefined) {
      say(
        `took over the lock of ${dir} from ${lock.tookOver.who} (${lock.tookOver.why}); ` +
          "what it left running is stopped before anything starts",
      );
    }
    return lock;
  } catch (err) {
    if (err instanceof StateLockedError) throw new CliExit(EXIT_REFUSED, err.message);
    throw err;
  }
}

// `--isolation`: strict or auto, anything else a usage error.
function isolationOf(value: string): IsolationMode {
  if (value === "strict" || value === "auto") return value;
  throw new CliExit(EXIT_USAGE, `--isolation must be strict or auto, not ${JSON.stringify(value)}`);
}

/** How many random bytes an operator token holds (as base64url). */
const OPERATOR_TOKEN_BYTES = 32;

/**
 * The operator token in `path`, or a new one written there (0600, atomically) when the file does
 * not exist. A token is never printed: the operator reads it from the file.
 */
async function loadOrCreateOperatorToken(path: string): Promise<string> {
  const kept = await readFileIfExists(path).catch((err: unknown) => {
    throw new CliExit(EXIT_USAGE, `--operator-token-file: cannot read ${path}: ${(err as Error).message}`);
  });
  if (kept !== undefined) {
    const token = kept.trim();
    if (token.length < 16 || /\s/.test(token)) {
      throw new CliExit(
        EXIT_USAGE,
        `--operator-token-file: ${path} does not hold a token (one line of at least 16 characters, no spaces): ` +
          "remove it and mesh up makes a new one",
      );
    }
    return token;
  }
  const token = randomBytes(OPERATOR_TOKEN_BYTES).toString("base64url");
  await writeFileAtomic(path, `${token}\n`, 0o600);
  return token;
}

async function agent(
  node: string,
  joinFile: string | undefined,
  state: string,
  io: CliIo,
  graceMs: number,
  isolation: IsolationMode,
): Promise<void> {
  const { startAgent, AgentStartAbortedError, StateLockedError } = await import("@mesh/agent");
  const { watchStopSignals, killRecorded } = await import("./stop-signals.ts");
  const say = (m: string) => io.err(`${node.padEnd(12)}│ ${m}\n`);
  const stops = watchStopSignals({
    say,
    withinMs: graceMs + STOP_MARGIN_MS,
    onDeadline: () => killRecorded([state]),
  });
  try {
    let joinToken: string | undefined;
    if (joinFile !== undefined) {
      joinToken = (
        await readFile(joinFile, "utf8").catch(() => {
          throw new CliExit(EXIT_USAGE, `cannot read the join token file ${joinFile}`);
        })
      ).trim();
    }
    let running: Agent;
    try {
      running = await startAgent({
        node,
        stateDir: state,
        joinToken,
        logger: prefixed(io, node),
        signal: stops.signal,
        timings: { ...agentLogOptions(io).timings, stopGraceMs: graceMs },
        isolation,
      });
    } catch (err) {
      if (err instanceof AgentStartAbortedError) return;
      if (err instanceof StateLockedError) throw new CliExit(EXIT_REFUSED, err.message);
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    await stops.signalled;
    say("stopping the modules, then the agent");
    await running.stop();
  } finally {
    stops.dispose();
  }
}

/** Asks the running controller `what` (status or rotate) with the operator's credentials. */
async function ask<T>(state: string, what: "status" | "rotate", body: string, io: CliIo): Promise<T> {
  const { STATUS_SUBJECT, ROTATE_SUBJECT } = await import("@mesh/controller");
  const subject = what === "status" ? STATUS_SUBJECT : ROTATE_SUBJECT;
  return askController<T>(state, subject, body, {
    name: `mesh ${what}`,
    io,
    waiting: `waiting for the controller of the mesh in ${state}`,
  });
}

async function status(state: string, json: boolean, io: CliIo): Promise<void> {
  const answer = maskedAnswer(await ask<StatusAnswer>(state, "status", "{}", io));
  io.out(json ? formatJson(answer) : formatStatus(answer, Date.now(), paintFor(io, "out")));
}
