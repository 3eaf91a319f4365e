// `mesh up [mesh.yaml]`: the embedded default on one machine — a local nats-server, the controller,
// an agent for each node of the fleet (or those named), and through them the fleet's modules.
// `mesh status` asks the running controller what it knows.
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import type { Command } from "commander";
import type { Agent, IsolationMode } from "@mesh/agent";
import { ROTATE_SUBJECT } from "@mesh/bus/subjects";
import {
  askController,
  BUS_CA_OPTION,
  busCaOf,
  busOf,
  busOverride,
  stateDirOf,
  withAskFlags,
  type BusFlags,
} from "./controller-request.ts";
import { askStatus, type StatusFlags } from "./ask-status.ts";
import { paintFor } from "./colour.ts";
import { DEFAULT_GRACE, graceOf, isolationOf, STOP_MARGIN_MS } from "./daemon-flags.ts";
import { CliExit, EXIT_NOT_APPLIED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { withLogFlags, type LogFlags } from "./log-flags.ts";
import { osUserName } from "./who.ts";

export { DEFAULT_GRACE };

type DaemonFlags = {
  state?: string;
  listen?: string;
  advertise?: string;
  http?: string;
  operatorTokenFile?: string;
  bus?: string[];
  busCa?: string;
  fleetHistory?: string;
} & LogFlags;

// The flags `mesh up` and `mesh controller` share: where the state is, the bus, how it is reached.
function withDaemonFlags(command: Command): Command {
  return withLogFlags(command)
    .argument(
      "[fleet]",
      "the fleet file this machine applies (at start when it differs from the stored one, and at each save); without it, the fleet stored in the mesh is served",
    )
    .option("--state <dir>", "where the mesh keeps its state (default: $MESH_STATE_DIR, else ./.mesh-state)")
    .option(
      "--bus <url,...>",
      "an existing NATS cluster's URLs (configured by mesh bus-config from this state); no nats-server is started",
      (value: string, before: string[] | undefined) => [...(before ?? []), value],
    )
    .option(...BUS_CA_OPTION)
    .option(
      "--listen <host>",
      "the address the embedded nats-server listens on; other machines' agents reach it there (default: 127.0.0.1)",
    )
    .option(
      "--advertise <host[:port]>",
      "the address other machines reach the bus at, written into the join tokens of the nodes this machine does not run",
    )
    .option(
      "--http <host:port>",
      "where the controller serves the dashboard and /metrics, both asking for a credential (default: 127.0.0.1, a free port)",
    )
    .option(
      "--fleet-history <n>",
      "how many applied revisions of the fleet the bus keeps, for mesh fleet history and rollback (default: 100)",
    )
    .option(
      "--operator-token-file <path>",
      "the operator token's file (default: <state>/controller/operator.token; made there, 0600, when it does not exist): the dashboard's logins (mesh dashboard) and its API for scripts",
    );
}

async function daemonOptions(fleet: string | undefined, flags: DaemonFlags, io: CliIo) {
  if (flags.busCa !== undefined && flags.bus === undefined)
    throw new CliExit(
      EXIT_USAGE,
      "--bus-ca is for an existing cluster with TLS (--bus tls://…): the embedded nats-server uses no TLS",
    );
  const ca = await busCaOf(flags.busCa);
  const history = flags.fleetHistory === undefined ? undefined : Number(flags.fleetHistory);
  if (history !== undefined && (!Number.isSafeInteger(history) || history < 1))
    throw new CliExit(
      EXIT_USAGE,
      `--fleet-history ${JSON.stringify(flags.fleetHistory)}: give a whole number, 1 or more`,
    );
  const { logIo } = await import("./log-lines.ts");
  return {
    ...(fleet !== undefined ? { fleetFile: resolve(fleet) } : {}),
    ...(history !== undefined ? { fleetHistory: history } : {}),
    state: stateDirOf(flags.state, io),
    io: logIo(io, flags),
    ...(flags.bus !== undefined ? { bus: busOf(flags.bus) } : {}),
    ...(ca !== undefined ? { ca } : {}),
    ...(flags.listen !== undefined ? { listen: flags.listen } : {}),
    ...(flags.advertise !== undefined ? { advertise: flags.advertise } : {}),
    ...(flags.http !== undefined ? { http: flags.http } : {}),
    ...(flags.operatorTokenFile !== undefined ? { operatorTokenFile: flags.operatorTokenFile } : {}),
  };
}

/** Adds `mesh up`, `mesh controller`, `mesh agent`, `mesh rotate` and `mesh status` to `program`. */
export function addUpCommands(program: Command, io: CliIo): void {
  withDaemonFlags(program.command("up"))
    .summary("run the mesh on this machine, with the fleet's modules")
    .description(
      "run the mesh on this machine: nats-server (unless --bus), the controller, the agents and the fleet's modules",
    )
    .option("--node <name...>", "run agents only for these nodes of the fleet (default: every node)")
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

It makes the operator token and the scrape token at its first start (<state>/controller/operator.token
and scrape.token, 0600) and prints the dashboard's address with a code that logs a browser in once,
within 2 minutes; mesh dashboard prints another.

Examples:
  $ mesh up examples/fleet/mesh.yaml --http 127.0.0.1:9470
  then open the dashboard link it prints, or from another shell: mesh status
  $ mesh up mesh.yaml --http 127.0.0.1:9470 --operator-token-file /etc/mesh/operator.token
  $ mesh up mesh.yaml --node node-1 --listen 0.0.0.0 --advertise 10.0.0.5   # the others join with mesh agent
  $ mesh up mesh.yaml --node node-1 --bus nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222`,
    )
    .action(
      async (
        fleet: string | undefined,
        flags: DaemonFlags & { node?: string[]; isolation: string; grace?: string },
      ) => {
        // The daemon is loaded only when it runs: building the program (for --help, or any other
        // command) must not pay for the controller and the agent.
        const { runMesh } = await import("./mesh-daemon.ts");
        await runMesh({
          role: "up",
          ...(await daemonOptions(fleet, flags, io)),
          ...(flags.node !== undefined ? { nodes: flags.node } : {}),
          graceMs: graceOf(flags.grace),
          isolation: isolationOf(flags.isolation),
        });
      },
    );

  withDaemonFlags(program.command("controller"))
    .summary("run the controller alone, against the bus, for nodes that run mesh agent")
    .description(
      "run the controller as a daemon of its own (no agent here), against an existing NATS cluster or the embedded nats-server",
    )
    .addHelpText(
      "after",
      `
Without --bus it starts the embedded nats-server, as mesh up does. With --bus it uses that cluster,
which must trust this mesh's operator (mesh bus-config --state DIR wrote it): the controller needs
no credential from elsewhere, it mints its own users from the authority in <state>/controller. It
writes <state>/join/<node>.token for every node of the fleet; each node runs mesh agent with its
token. Its dashboard and /metrics ask for the operator token and the scrape token, as mesh up's do
(a standby copies both from the leader). One mesh per state directory; Ctrl-C or SIGTERM stops it
(and the embedded bus).

Examples:
  $ mesh controller mesh.yaml --state /var/lib/mesh \
      --bus nats://10.0.0.1:4222,nats://10.0.0.2:4222,nats://10.0.0.3:4222
  with TLS (mesh bus-config --tls-dir /var/lib/mesh-ca made the CA; the join tokens carry it):
  $ mesh controller mesh.yaml --state /var/lib/mesh --bus-ca /var/lib/mesh-ca/ca.pem \
      --bus tls://10.0.0.1:4222,tls://10.0.0.2:4222,tls://10.0.0.3:4222
  $ mesh controller mesh.yaml --listen 0.0.0.0 --advertise 10.0.0.1
  on a second machine, with the first one's state copied to /var/lib/mesh-leader:
  $ mesh controller mesh.yaml --state /var/lib/mesh --standby-of /var/lib/mesh-leader --bus nats://10.0.0.1:4222`,
    )
    .option(
      "--standby-of <state>",
      "stand by for the controller whose state directory this is (its authority, controller keys and HTTP tokens are copied from it): lead when its lease lapses",
    )
    .action(async (fleet: string | undefined, flags: DaemonFlags & { standbyOf?: string }) => {
      const { runMesh } = await import("./mesh-daemon.ts");
      await runMesh({
        role: "controller",
        ...(await daemonOptions(fleet, flags, io)),
        ...(flags.standbyOf !== undefined ? { standbyOf: flags.standbyOf } : {}),
      });
    });

  withLogFlags(program.command("agent"))
    .summary("run one node's agent, for a controller on another machine")
    .description("run one node's agent on this machine (a node of a fleet whose controller runs elsewhere)")
    .requiredOption("--node <name>", "the node's name, as in the fleet file")
    .option(
      "--join <file>",
      "the join token file from mesh join-token (or <state>/join/<node>.token), needed only the first time",
    )
    .option(
      "--bus <url,...>",
      "the bus's URLs, in place of the ones the join token (or the last enrollment) names",
      (value: string, before: string[] | undefined) => [...(before ?? []), value],
    )
    .option(
      "--bus-ca <file>",
      "the mesh's bus CA (ca.pem in mesh bus-config's --tls-dir), in place of the one the join token carries (or the last start kept)",
    )
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
        flags: { node: string; join?: string; state?: string; isolation: string; grace?: string } & LogFlags &
          BusFlags,
      ) => {
        const { logIo } = await import("./log-lines.ts");
        await agent(
          flags.node,
          flags.join,
          stateDirOf(flags.state, io),
          logIo(io, flags),
          graceOf(flags.grace),
          isolationOf(flags.isolation),
          busOf(flags.bus),
          await busCaOf(flags.busCa),
        );
      },
    );

  withAskFlags(program.command("rotate"))
    .summary("mint a new password for one consumer's interface")
    .description(
      "mint a new password for one consumer's interface; the provider applies it, the consumer reads " +
        "it, and both modules' ledgers record who asked (your Unix user) and when",
    )
    .argument("<consumer>", "the consumer module")
    .argument("<interface>", "the interface it needs, e.g. postgres-database")
    .option("--json", "print the controller's answer as JSON, for scripts")
    .option(
      "--wait <duration>",
      "how long to wait for the provider to apply the new password (0: do not wait)",
      DEFAULT_ROTATE_WAIT,
    )
    .option(
      "--now",
      "for a leaked password: no overlap, the old password is refused as soon as the provider takes the new one and the login's open sessions are ended (allowed during another rotation of the consumer)",
    )
    .addHelpText(
      "after",
      `
Examples:
  $ mesh rotate notes postgres-database
  $ mesh rotate notes postgres-database --now
  $ mesh rotate notes postgres-database --wait 5m
  $ mesh rotate notes postgres-database --json --state /var/lib/mesh

It ends with 0 only once the provider has applied the new password (its own status says so), and
with ${EXIT_NOT_APPLIED} when it has not by the end of --wait: the consumer then keeps its old password until it does.`,
    )
    .action(
      async (
        consumer: string,
        iface: string,
        flags: { state?: string; json?: boolean; wait: string; now?: boolean } & BusFlags,
      ) => {
        const { parseDuration, InvalidDurationError } = await import("@mesh/sdk");
        let waitMs: number;
        try {
          waitMs = flags.wait.trim() === "0" ? 0 : parseDuration(flags.wait);
        } catch (err) {
          if (err instanceof InvalidDurationError) throw new CliExit(EXIT_USAGE, `--wait: ${err.message}`);
          throw err;
        }
        const state = stateDirOf(flags.state, io);
        // Who asks goes into the consumer's and the provider's ledgers with the rotation.
        const answer = await ask<{
          ok: boolean;
          error?: string;
          busCannotStore?: boolean;
          ledger?: string;
          provider?: string;
          login?: string;
          tag?: string;
        }>(
          state,
          JSON.stringify({
            consumer,
            interface: iface,
            who: osUserName(),
            ...(flags.now === true ? { now: true } : {}),
          }),
          io,
          busOverride(flags),
        );
        if (!answer.ok)
          throw new CliExit(
            answer.busCannotStore === true ? EXIT_UNREACHABLE : EXIT_REFUSED,
            answer.error ?? "the controller refused the rotation",
          );
        if (typeof answer.ledger === "string")
          io.err(`${paintFor(io, "err").yellow("warning:")} ${answer.ledger}\n`);
        const { tag, ...shown } = answer;
        let applied: boolean | undefined;
        if (waitMs > 0) {
          if (answer.provider === undefined || answer.login === undefined || tag === undefined) {
            throw new CliExit(
              EXIT_NOT_APPLIED,
              `rotated: ${consumer}'s ${iface} has a new password, but the controller did not say which ` +
                "provider applies it (an older controller): see mesh status",
            );
          }
          applied = await appliedWithin(
            state,
            { provider: answer.provider, login: answer.login, tag },
            waitMs,
            io,
            busOverride(flags),
          );
        }
        io.out(
          flags.json === true
            ? formatJson({
                ...shown,
                consumer,
                interface: iface,
                ...(applied === undefined ? {} : { applied }),
              })
            : applied === true
              ? `rotated: ${consumer}'s ${iface} has a new password, applied by ${answer.provider ?? "its provider"}; ${consumer} reads it\n`
              : applied === false
                ? `rotated: ${consumer}'s ${iface} has a new password, which ${answer.provider ?? "its provider"} has not applied after ${flags.wait}\n`
                : `rotated: ${consumer}'s ${iface} has a new password; its provider applies it and ${consumer} reads it\n`,
        );
        if (applied === false) {
          throw new CliExit(
            EXIT_NOT_APPLIED,
            `${answer.provider ?? "the provider"} has not applied ${consumer}'s new ${iface} password within ` +
              `${flags.wait}: ${consumer} keeps its old one until it does; see mesh status and ` +
              `mesh logs ${answer.provider ?? ""}`.trimEnd(),
          );
        }
      },
    );

  withAskFlags(program.command("status"))
    .summary("the leader and standbys, nodes, modules, consumers, and the failing ones with why")
    .description(
      "what the running mesh knows: which controller leads (and its term) and which stand by, nodes, " +
        "their modules, every consumer, and the failing ones with why",
    )
    .option("--json", "print the controller's answer as JSON, for scripts (the same, errors masked)")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh status
  $ mesh status --json | jq '.failing[] | {consumer, class, since}'
  $ mesh status --bus nats://10.0.0.2:4222      # ask through this server first

Each server is given 2 s: when no controller takes the request through it, the next is asked (--bus,
then the state's bus.json, then the servers the cluster names), and that is said on standard error.`,
    )
    .action(async (flags: StatusFlags) => {
      await askStatus(flags, io);
    });
}

async function agent(
  node: string,
  joinFile: string | undefined,
  state: string,
  io: CliIo,
  graceMs: number,
  isolation: IsolationMode,
  servers: readonly string[] | undefined,
  ca: string | undefined,
): Promise<void> {
  const { startAgent, AgentStartAbortedError, StateLockedError } = await import("@mesh/agent");
  const { watchStopSignals, killRecorded } = await import("./stop-signals.ts");
  const { agentLogOptions, prefixed } = await import("./log-lines.ts");
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
    // An older state is backed up beside it and migrated, a newer one refused, before the agent starts.
    const { settleStateFormat } = await import("./state-format.ts");
    await settleStateFormat(state, say);
    let running: Agent;
    try {
      running = await startAgent({
        node,
        stateDir: state,
        joinToken,
        ...(servers !== undefined ? { servers } : {}),
        ...(ca !== undefined ? { ca } : {}),
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

/** Asks the running controller for a rotation with the operator's credentials. */
async function ask<T>(
  state: string,
  body: string,
  io: CliIo,
  bus: { servers?: readonly string[]; caFile?: string },
): Promise<T> {
  return askController<T>(state, ROTATE_SUBJECT, body, {
    name: "mesh rotate",
    io,
    waiting: `waiting for the controller of the mesh in ${state}`,
    ...bus,
  });
}

/** How long `mesh rotate` waits for the provider to apply the new password, unless told. */
export const DEFAULT_ROTATE_WAIT = "2m";

// How often `mesh rotate --wait` asks the provider's status through the mesh.
const APPLIED_POLL_MS = 1_000;

// Whether the provider lists the login with the new password's tag applied before `waitMs` ends,
// asking its status through the mesh (the controller relays it to the provider's node). An ask
// that fails is only "not yet": the provider may be restarting.
async function appliedWithin(
  state: string,
  rotated: { provider: string; login: string; tag: string },
  waitMs: number,
  io: CliIo,
  bus: { servers?: readonly string[]; caFile?: string },
): Promise<boolean> {
  const { TOOL_REQUEST_SUBJECT } = await import("@mesh/bus/subjects");
  const deadline = Date.now() + waitMs;
  const body = JSON.stringify({ module: rotated.provider, tool: "status", args: [], who: osUserName() });
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) return false;
    try {
      const reply = await askController<{ ok: boolean; answer?: unknown }>(
        state,
        TOOL_REQUEST_SUBJECT,
        body,
        {
          timeoutMs: Math.max(1_000, Math.min(left, 10_000)),
          name: "mesh rotate",
          io,
          waiting: `waiting for ${rotated.provider} to apply the new password`,
          ...bus,
        },
      );
      const consumers = (reply.answer as { consumers?: unknown } | undefined)?.consumers;
      if (
        reply.ok &&
        Array.isArray(consumers) &&
        consumers.some(
          (c) =>
            (c as { login?: unknown }).login === rotated.login &&
            (c as { applied?: unknown }).applied === rotated.tag,
        )
      )
        return true;
    } catch (err) {
      if (!(err instanceof CliExit)) throw err;
    }
    await new Promise((resolve) =>
      setTimeout(resolve, Math.min(APPLIED_POLL_MS, Math.max(0, deadline - Date.now()))),
    );
  }
}
