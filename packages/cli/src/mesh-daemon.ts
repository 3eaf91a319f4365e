// What `mesh up` and `mesh controller` share: one daemon per state directory (its lock, what a
// killed one left, ordered stops), the controller with its HTTP server, and the bus — the embedded
// nats-server, or an existing cluster given with `--bus`. `mesh up` also runs the agents of the
// nodes it was asked for; `mesh controller` runs none and writes a join token for every node.
//
// Against an existing cluster the controller needs no credential from elsewhere: the cluster trusts
// the mesh's operator (`mesh bus-config` wrote it from `<state>/controller`), and the controller
// mints its own users with that authority — its controller user, and a system user for account
// updates — as it does on the embedded bus.
import { chmod, mkdir, readdir, rename, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { credsFor, newUserKeys } from "@mesh/bus";
import type { Agent, IsolationMode, StateLock } from "@mesh/agent";
import type { Controller, HttpAuth } from "@mesh/controller";
import { parseDuration } from "@mesh/sdk/client";
import { ListenError } from "@mesh/sdk/provider";
import { controllerHttpPath, type ControllerHttpRecord } from "./controller-request.ts";
import { DEFAULT_GRACE, STOP_MARGIN_MS } from "./daemon-flags.ts";
import type { EmbeddedBus } from "./embedded-bus.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";
import { agentLogOptions, prefixed } from "./log-lines.ts";

/** How `runMesh` runs. */
export interface MeshRunOptions {
  /** `up`: the controller and the agents of `nodes`; `controller`: the controller alone. */
  readonly role: "up" | "controller";
  readonly fleetFile: string;
  readonly state: string;
  readonly io: CliIo;
  /** The nodes whose agents run here (`up` only; default: every node of the fleet). */
  readonly nodes?: readonly string[];
  /** An existing bus's URLs; the embedded nats-server when absent. */
  readonly bus?: readonly string[];
  /** The mesh's bus CA (PEM) when the existing bus uses TLS (`--bus-ca`). */
  readonly ca?: string;
  /** Where the embedded nats-server listens (default loopback). */
  readonly listen?: string;
  /** The address other machines reach the bus at, for the join tokens written. */
  readonly advertise?: string;
  readonly http?: string;
  readonly operatorTokenFile?: string;
  readonly graceMs?: number;
  readonly isolation?: IsolationMode;
  /**
   * `controller` only: the state directory of the controller this one stands by for. Its
   * authority and controller keys are copied first; this controller then waits, and leads when the
   * other's lease lapses.
   */
  readonly standbyOf?: string;
}

/**
 * Runs the mesh's daemon for `options.state` until SIGINT or SIGTERM, then stops the modules, the
 * agents, the controller and the bus, in that order, in bounded time.
 * @throws CliExit: refused (exit 1) when the state directory is locked by a running mesh, the bus
 * refuses or the fleet is refused; usage (exit 2) for a bad flag.
 */
export async function runMesh(options: MeshRunOptions): Promise<void> {
  const { role, fleetFile, state, io, listen, http, operatorTokenFile, advertise } = options;
  const graceMs = options.graceMs ?? parseDuration(DEFAULT_GRACE);
  const isolation = options.isolation ?? "strict";
  const {
    loadOrCreateAuthority,
    startController,
    operatorPermissions,
    OPERATOR_IDENTITY,
    ControllerMetrics,
    metricsRoute,
    startControllerHttp,
    dashboardRoutes,
    keepScrapeTargets,
    HttpAuth,
    loadOrCreateToken,
    operatorTokenPath,
    scrapeTokenPath,
    browsableUrl,
    LOGIN_CODE_TTL_MS,
  } = await import("@mesh/controller");
  const { startAgent, AgentStartAbortedError, stopLeftoverModules } = await import("@mesh/agent");
  const { startEmbeddedBus } = await import("./embedded-bus.ts");
  const { watchStopSignals, killRecorded } = await import("./stop-signals.ts");
  const who = `mesh ${role}`;
  const say = (m: string) => io.err(`${who.padEnd(12)}│ ${m}\n`);
  const steps = role === "up" ? 4 : 3;
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
  const lock = await takeLock(state, who, say).catch((err: unknown) => {
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
    for (const dir of await nodeDirs()) await stopLeftoverModules(dir, graceMs, prefixed(io, who));
    const controllerState = join(state, "controller");
    await mkdir(controllerState, { recursive: true, mode: 0o700 });
    // A standby takes the leader's authority, keys and HTTP tokens before it makes anything of its own.
    if (options.standbyOf !== undefined) {
      const { copyStandbyState } = await import("@mesh/controller");
      await copyStandbyState(join(resolve(options.standbyOf), "controller"), controllerState).catch(
        (err: unknown) => {
          throw new CliExit(EXIT_REFUSED, `--standby-of: ${(err as Error).message}`);
        },
      );
      say(
        `    stands by for the controller of ${options.standbyOf}: its authority, keys and tokens are copied`,
      );
    }
    // The operator's token and the scrape token, made at the first start: every request to the
    // HTTP server but the page itself carries one of them (or a session begun with the operator's).
    const tokenFile =
      operatorTokenFile === undefined ? operatorTokenPath(controllerState) : resolve(operatorTokenFile);
    const scrapeTokenFile = scrapeTokenPath(controllerState);
    let auth: HttpAuth;
    let scrapeToken: string;
    try {
      const operatorToken = await loadOrCreateToken(tokenFile, "operator token");
      scrapeToken = await loadOrCreateToken(scrapeTokenFile, "scrape token");
      auth = new HttpAuth({ operatorToken, scrapeToken, logger: prefixed(io, "controller") });
    } catch (err) {
      throw new CliExit(
        EXIT_USAGE,
        (operatorTokenFile !== undefined ? "--operator-token-file: " : "") + (err as Error).message,
      );
    }
    const metrics = new ControllerMetrics();
    const server = await startControllerHttp({
      listen: http,
      routes: [metricsRoute(metrics.registry)],
      auth,
      logger: prefixed(io, "controller"),
    }).catch((err: unknown) => {
      throw new CliExit(
        err instanceof ListenError ? EXIT_REFUSED : EXIT_USAGE,
        `--http: ${(err as Error).message}`,
      );
    });
    stopping.push(() => server.close());
    // Where `mesh dashboard` finds it, and the token it asks with (the path, never the token).
    await writePrivate(
      controllerHttpPath(state),
      JSON.stringify({ url: server.url, operatorTokenFile: tokenFile } satisfies ControllerHttpRecord),
    );
    say(
      `the controller's HTTP server: ${server.url} (Prometheus metrics at ${server.url}/metrics, ` +
        `with the scrape token in ${scrapeTokenFile}; the operator token is in ${tokenFile})`,
    );
    const authority = await loadOrCreateAuthority(controllerState);
    let servers: readonly string[];
    if (options.bus !== undefined) {
      servers = options.bus;
      say(
        `1/${steps} the bus: the NATS servers at ${servers.join(", ")} (no nats-server is started here)` +
          (options.ca !== undefined ? "; TLS, trusting the bus CA given" : ""),
      );
    } else {
      say(`1/${steps} the bus: starting nats-server (state in ${busDir})`);
      let bus: EmbeddedBus;
      try {
        bus = await startEmbeddedBus(busDir, authority, listen, prefixed(io, who));
      } catch (err) {
        throw new CliExit(EXIT_REFUSED, (err as Error).message);
      }
      stopping.push(() => bus.stop());
      say(
        `    nats-server (pid ${bus.pid}) answers on ${bus.url}; a connection without credentials is refused`,
      );
      servers = [bus.url];
    }
    if (stopped()) return;

    // The operator's own credentials, for `mesh status` from another shell.
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: OPERATOR_IDENTITY,
      publicKey: keys.publicKey,
      permissions: operatorPermissions(),
    });
    await writePrivate(join(state, "operator.creds"), credsFor(jwt, keys.seed));
    // The CA with the URLs: mesh status and the other commands of this state trust the same servers.
    const ca = options.ca;
    await writePrivate(
      join(state, "bus.json"),
      JSON.stringify({ servers, ...(ca !== undefined ? { ca } : {}) }),
    );

    say(`2/${steps} the controller: reading ${fleetFile}`);
    let controller: Controller;
    try {
      controller = await startController({
        stateDir: controllerState,
        fleetFile,
        servers,
        ...(ca !== undefined ? { ca } : {}),
        authority,
        logger: prefixed(io, "controller"),
        observer: metrics.observer,
        ...(options.standbyOf !== undefined ? { standby: true } : {}),
        // Servers of a cluster started at the same time form JetStream's quorum a while later:
        // the controller waits for it (and says why), as the agents wait for the bus.
        waitForBus: { signal: stops.signal },
      });
    } catch (err) {
      if (stopped()) return;
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    stopping.push(() => controller.stop());
    if (stopped()) return;
    metrics.follow(() => controller.status());
    // Where Prometheus finds every /metrics of the fleet (file_sd), whatever ports they took.
    const scrapeTargets = scrapeTargetsPath(state);
    const targets = await keepScrapeTargets({
      file: scrapeTargets,
      status: () => controller.status(),
      controllerUrl: server.url,
      onError: (err) => say(`    cannot write the scrape targets ${scrapeTargets}: ${err.message}`),
    });
    stopping.push(() => Promise.resolve(targets.stop()));
    say(`    Prometheus finds every /metrics of the fleet in ${scrapeTargets} (file_sd)`);
    for (const route of dashboardRoutes({ sources: controller, auth })) server.route(route);
    // This process holds the operator's token: it hands the operator at its terminal a way in.
    const { osUserName } = await import("./who.ts");
    const login = auth.mintLoginCode(osUserName());
    say(
      `    the dashboard: ${browsableUrl(server.url)}/?code=${login.code} (this link logs in once, within ` +
        `${Math.round(LOGIN_CODE_TTL_MS / 60_000)} min; \`mesh dashboard --state ${state}\` prints a new one)`,
    );
    const fleet = controller.current();
    const consumers = fleet.plan.instances.reduce((n, i) => n + i.consumers.length, 0);
    say(`    ${fleet.nodes.length} node(s), ${fleet.modules.length} module(s), ${consumers} consumer(s)`);

    const nodes = role === "controller" ? [] : (options.nodes ?? fleet.nodes);
    for (const node of nodes) {
      if (!fleet.nodes.includes(node)) throw new CliExit(EXIT_USAGE, `node ${node} is not in ${fleetFile}`);
    }
    recordDirs = [...(options.bus === undefined ? [busDir] : []), ...nodes.map((n) => join(nodesDir, n))];
    // The other nodes join with `mesh agent`, from the token file written here for each: it names
    // the bus that serves now, at the address other machines reach it by.
    // A standby gives no join tokens (only the leader does): it writes them once it leads, at its next start.
    const others = controller.leading() ? fleet.nodes.filter((n) => !nodes.includes(n)) : [];
    const { writeJoinTokens } = await import("./join-token-command.ts");
    const tokenFiles = await writeJoinTokens({
      controller,
      state,
      nodes: others,
      // A token is made once; the bus it names is the one that serves now (its port may have moved).
      servers,
      ...(advertise === undefined ? {} : { advertise }),
    }).catch((err: unknown) => {
      throw new CliExit(EXIT_USAGE, `--advertise: ${(err as Error).message}`);
    });
    tokenFiles.forEach((file, i) => {
      const node = others[i] ?? "";
      say(`    node ${node} joins with: mesh agent --node ${node} --join ${file} (copy the file there)`);
    });
    const loopbackOnly = servers.every((url) => /^[a-z]+:\/\/(127\.|localhost|\[::1\])/i.test(url));
    if (
      others.length > 0 &&
      advertise === undefined &&
      loopbackOnly &&
      listen !== undefined &&
      listen !== "127.0.0.1"
    ) {
      say(
        `    warning: the join tokens name the bus at 127.0.0.1, which other machines cannot reach: ` +
          `give --advertise HOST (this machine's address on their network)`,
      );
    }
    if (role === "up") {
      say(`3/4 the agents: ${nodes.join(", ")}`);
      for (const node of nodes) {
        try {
          // The bus that serves now, never the port a stored join token remembers.
          const agent = await startAgent({
            node,
            stateDir: join(nodesDir, node),
            joinToken: await controller.joinToken(node),
            servers,
            ...(ca !== undefined ? { ca } : {}),
            logger: prefixed(io, node),
            signal: stops.signal,
            timings: { ...agentLogOptions(io).timings, stopGraceMs: graceMs },
            isolation,
            scrapeTargets,
            scrapeToken,
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
    } else {
      say(
        `3/3 the controller serves; the nodes run \`mesh agent\`. \`mesh status --state ${state}\` shows them. ` +
          "Ctrl-C stops it.",
      );
    }
    await stops.signalled;
  } finally {
    if (stopped())
      say(
        role === "up"
          ? "stopping the modules, the agents, the controller and the bus"
          : `stopping the controller${options.bus === undefined ? " and the bus" : ""}`,
      );
    await stopAll();
    await lock.release();
    stops.dispose();
  }
  say("stopped");
}

/** `<state>/scrape/targets.json`: the file_sd JSON the controller of `state` keeps. */
export function scrapeTargetsPath(state: string): string {
  return join(state, "scrape", "targets.json");
}

async function writePrivate(path: string, data: string | Uint8Array): Promise<void> {
  await writeFile(`${path}.tmp`, data, { mode: 0o600 });
  await rename(`${path}.tmp`, path);
}

/**
 * Locks `dir` for `who`: one mesh per state directory.
 * @throws CliExit (refused, exit 1) naming the process that holds it.
 */
export async function takeLock(dir: string, who: string, say: (m: string) => void): Promise<StateLock> {
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
