// `mesh up [mesh.yaml]`: the embedded default on one machine — a local nats-server, the controller,
// an agent for each node of the fleet (or those named), and through them the fleet's modules.
// `mesh status` asks the running controller what it knows.
import { randomBytes } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { credsFor, newUserKeys, readFileIfExists, writeFileAtomic, type BusLogger } from "@mesh/bus";
import type { Agent } from "@mesh/agent";
import type { Controller } from "@mesh/controller";
import { ListenError, untilStopSignal } from "@mesh/sdk";
import { askController, stateDirOf } from "./controller-request.ts";
import { startEmbeddedBus, type EmbeddedBus } from "./embedded-bus.ts";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { formatStatus, maskedAnswer, type StatusAnswer } from "./status-command.ts";

function prefixed(io: CliIo, who: string): BusLogger {
  const paint = paintFor(io, "err");
  const line = (level: string) => (m: string) => io.err(`${who.padEnd(12)}│ ${level}${m}\n`);
  return { info: line(""), warn: line(paint.yellow("warning: ")), error: line(paint.red("error: ")) };
}

async function writePrivate(path: string, data: string | Uint8Array): Promise<void> {
  await writeFile(`${path}.tmp`, data, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

/** Adds `mesh up` and `mesh status` to `program`. */
export function addUpCommands(program: Command, io: CliIo): void {
  program
    .command("up")
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
      "--http <host:port>",
      "where the controller serves the dashboard and /metrics; loopback unless an operator token is given (default: 127.0.0.1, a free port)",
    )
    .option(
      "--operator-token-file <path>",
      "the operator token the dashboard and /metrics ask for (made there, 0600, when the file does not exist); needed for an --http other machines reach",
    )
    .addHelpText(
      "after",
      `
It says each step as it starts (on standard error) and runs until Ctrl-C or SIGTERM.

Examples:
  $ mesh up examples/fleet/mesh.yaml --http 127.0.0.1:9470
  then open the dashboard it prints, or from another shell: mesh status
  $ mesh up mesh.yaml --http 0.0.0.0:9470 --operator-token-file .mesh-state/operator.token
  $ mesh up mesh.yaml --node node-1 --listen 0.0.0.0      # the other nodes join with mesh agent`,
    )
    .action(
      async (
        fleet: string,
        flags: {
          state?: string;
          node?: string[];
          listen?: string;
          http?: string;
          operatorTokenFile?: string;
        },
      ) => {
        await up(
          resolve(fleet),
          stateDirOf(flags.state, io),
          flags.node,
          flags.listen,
          io,
          flags.http,
          flags.operatorTokenFile,
        );
      },
    );

  program
    .command("agent")
    .summary("run one node's agent, for a controller on another machine")
    .description("run one node's agent on this machine (a node of a fleet whose controller runs elsewhere)")
    .requiredOption("--node <name>", "the node's name, as in the fleet file")
    .option("--join <file>", "the join token file `mesh up` wrote for this node (needed only the first time)")
    .option("--state <dir>", "the node's state directory (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .addHelpText(
      "after",
      `
Examples:
  on the new machine, with the token file copied from <state>/join/node-2.token:
  $ mesh agent --node node-2 --join node-2.token --state /var/lib/mesh
  after it has joined once, it reconnects with what it was issued:
  $ mesh agent --node node-2 --state /var/lib/mesh`,
    )
    .action(async (flags: { node: string; join?: string; state?: string }) => {
      await agent(flags.node, flags.join, stateDirOf(flags.state, io), io);
    });

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
  const { startAgent } = await import("@mesh/agent");
  const say = (m: string) => io.err(`${"mesh up".padEnd(12)}│ ${m}\n`);
  await mkdir(state, { recursive: true, mode: 0o700 });
  // Listening from the start: a Ctrl-C while starting still stops what has started.
  const signalled = untilStopSignal({ info: say, warn: say, error: say });
  const stopping: (() => Promise<void>)[] = [];
  const stopAll = async () => {
    for (const stop of stopping.reverse()) await stop().catch(() => {});
  };
  try {
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
    say(`1/4 the bus: starting nats-server (state in ${join(state, "bus")})`);
    const authority = await loadOrCreateAuthority(join(state, "controller"));
    let bus: EmbeddedBus;
    try {
      bus = await startEmbeddedBus(join(state, "bus"), authority, listen);
    } catch (err) {
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    stopping.push(() => bus.stop());
    say(`    nats-server answers on ${bus.url}; a connection without credentials is refused`);

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
    say(`3/4 the agents: ${nodes.join(", ")}`);
    const agents: Agent[] = [];
    for (const node of nodes) {
      const agent = await startAgent({
        node,
        stateDir: join(state, "nodes", node),
        joinToken: await controller.joinToken(node),
        logger: prefixed(io, node),
      });
      agents.push(agent);
      stopping.push(() => agent.stop());
    }
    say(
      `4/4 the modules start on their nodes; \`mesh status --state ${state}\` shows them. Ctrl-C stops everything.`,
    );
    const signal = await signalled;
    say(`${signal}: stopping the agents (and their modules), the controller and the bus`);
  } finally {
    await stopAll();
  }
  say("stopped");
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

async function agent(node: string, joinFile: string | undefined, state: string, io: CliIo): Promise<void> {
  const { startAgent } = await import("@mesh/agent");
  const say = (m: string) => io.err(`${node.padEnd(12)}│ ${m}\n`);
  const signalled = untilStopSignal({ info: say, warn: say, error: say });
  let joinToken: string | undefined;
  if (joinFile !== undefined) {
    joinToken = (
      await readFile(joinFile, "utf8").catch(() => {
        throw new CliExit(EXIT_USAGE, `cannot read the join token file ${joinFile}`);
      })
    ).trim();
  }
  const running = await startAgent({ node, stateDir: state, joinToken, logger: prefixed(io, node) }).catch(
    (err: unknown) => {
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    },
  );
  await signalled;
  await running.stop();
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
