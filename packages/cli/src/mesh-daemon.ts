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
import type { Controller, ControllerMetrics, HttpAuth } from "@mesh/controller";
import type * as ControllerFace from "@mesh/controller";
import type * as AgentFace from "@mesh/agent";
import type * as EmbeddedBusFace from "./embedded-bus.ts";
import type * as StateFormatFace from "./state-format.ts";
import type { watchStopSignals } from "./stop-signals.ts";
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
  /** The fleet file this machine applies; absent, the fleet stored in the mesh is served. */
  readonly fleetFile?: string;
  /** How many applied fleet revisions the bus keeps (default 100). */
  readonly fleetHistory?: number;
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
  const daemon = await openMeshDaemon(options);
  try {
    if (await daemon.start()) await daemon.stopAsked;
  } finally {
    await daemon.close();
  }
  // Said only when it ended as asked: a start refused ends with its error, not "stopped".
  daemon.say("stopped");
}

/**
 * The daemon of `options.state`, not started yet: its directories made, stop signals watched from
 * here on (a Ctrl-C while starting still stops what has started, in order), its lock taken.
 * @throws CliExit (refused) when another mesh holds the state directory.
 */
export async function openMeshDaemon(options: MeshRunOptions): Promise<MeshDaemon> {
  const parts: DaemonParts = {
    controller: await import("@mesh/controller"),
    agent: await import("@mesh/agent"),
    bus: await import("./embedded-bus.ts"),
    format: await import("./state-format.ts"),
  };
  const { watchStopSignals, killRecorded } = await import("./stop-signals.ts");
  const who = `mesh ${options.role}`;
  const say = (m: string): void => options.io.err(`${who.padEnd(12)}│ ${m}\n`);
  const { state } = options;
  await mkdir(state, { recursive: true, mode: 0o700 });
  // Traverse only, down to each node's state: a module reaches its own directory and lists nothing.
  await mkdir(join(state, "nodes"), { recursive: true, mode: 0o711 });
  await chmod(state, 0o711);
  await chmod(join(state, "nodes"), 0o711);
  const opened: { daemon?: MeshDaemon } = {};
  const graceMs = options.graceMs ?? parseDuration(DEFAULT_GRACE);
  const stops = watchStopSignals({
    say,
    withinMs: graceMs + STOP_MARGIN_MS,
    onDeadline: () => killRecorded(opened.daemon?.recordDirs ?? [join(state, "bus")]),
  });
  const lock = await takeLock(state, who, say).catch((err: unknown) => {
    stops.dispose();
    throw err;
  });
  opened.daemon = new MeshDaemon(options, parts, { who, say, graceMs, stops, lock });
  return opened.daemon;
}

/** What the daemon loads only when it runs: building the program must not pay for them. */
interface DaemonParts {
  readonly controller: typeof ControllerFace;
  readonly agent: typeof AgentFace;
  readonly bus: typeof EmbeddedBusFace;
  readonly format: typeof StateFormatFace;
}

/** The mesh's authority, which signs every bus user. */
type Authority = Awaited<ReturnType<DaemonParts["controller"]["loadOrCreateAuthority"]>>;

/** The controller's HTTP server and the tokens it asks for. */
interface HttpParts {
  readonly server: Awaited<ReturnType<typeof ControllerFace.startControllerHttp>>;
  readonly auth: HttpAuth;
  readonly scrapeToken: string;
}

/**
 * One mesh daemon of a state directory: the bus (embedded or given), the controller with its HTTP
 * server, and (`up`) the agents of its nodes. `start` brings them up in that order; `close` stops
 * them in the reverse order, the agents' modules first, and releases the lock.
 */
export class MeshDaemon {
  readonly #o: MeshRunOptions;
  readonly #parts: DaemonParts;
  readonly #who: string;
  readonly #say: (m: string) => void;
  readonly #graceMs: number;
  readonly #stops: ReturnType<typeof watchStopSignals>;
  readonly #lock: StateLock;
  readonly #steps: number;
  readonly #busDir: string;
  readonly #nodesDir: string;
  readonly #agents: Agent[] = [];
  /** What `close` stops, last started first. */
  readonly #stopping: (() => Promise<void>)[] = [];
  /** Where the pids of what this daemon started are recorded, for a stop past its deadline. */
  recordDirs: string[];

  constructor(
    options: MeshRunOptions,
    parts: DaemonParts,
    held: {
      who: string;
      say: (m: string) => void;
      graceMs: number;
      stops: ReturnType<typeof watchStopSignals>;
      lock: StateLock;
    },
  ) {
    this.#o = options;
    this.#parts = parts;
    this.#who = held.who;
    this.#say = held.say;
    this.#graceMs = held.graceMs;
    this.#stops = held.stops;
    this.#lock = held.lock;
    this.#steps = options.role === "up" ? 4 : 3;
    this.#busDir = join(options.state, "bus");
    this.#nodesDir = join(options.state, "nodes");
    this.recordDirs = [this.#busDir];
  }

  /** Settles once SIGINT or SIGTERM asked the daemon to stop. */
  get stopAsked(): Promise<unknown> {
    return this.#stops.signalled;
  }

  #stopped(): boolean {
    return this.#stops.signal.aborted;
  }

  /**
   * Starts the bus, the controller and the agents, stopping short when a stop is asked meanwhile.
   * @returns whether everything started (false: a stop was asked first).
   */
  async start(): Promise<boolean> {
    await this.#clearLeftovers();
    const controllerState = join(this.#o.state, "controller");
    await mkdir(controllerState, { recursive: true, mode: 0o700 });
    await this.#copyStandby(controllerState);
    const http = await this.#startHttp(controllerState);
    const authority = await this.#parts.controller.loadOrCreateAuthority(controllerState);
    const servers = await this.#startBus(authority);
    if (this.#stopped()) return false;
    await this.#writeOperatorCredentials(authority, servers);
    const controller = await this.#startController(controllerState, authority, servers, http);
    if (controller === undefined || this.#stopped()) return false;
    const fleet = controller.current();
    const nodes = this.#o.role === "controller" ? [] : (this.#o.nodes ?? fleet.nodes);
    for (const node of nodes) {
      if (!fleet.nodes.includes(node))
        throw new CliExit(
          EXIT_USAGE,
          `node ${node} is not in the fleet served (${fleet.fleetFile || "none applied yet"})`,
        );
    }
    this.recordDirs = [
      ...(this.#o.bus === undefined ? [this.#busDir] : []),
      ...nodes.map((n) => join(this.#nodesDir, n)),
    ];
    await this.#writeJoinTokens(controller, nodes, servers);
    if (this.#o.role === "controller") {
      this.#say(
        `3/3 the controller serves; the nodes run \`mesh agent\`. \`mesh status --state ${this.#o.state}\` shows them. ` +
          "Ctrl-C stops it.",
      );
      return true;
    }
    return this.#startAgents(controller, nodes, servers, http.scrapeToken);
  }

  /** Stops the modules (each agent its own, all nodes at once), the controller and the bus, then unlocks. */
  async close(): Promise<void> {
    if (this.#stopped())
      this.#say(
        this.#o.role === "up"
          ? "stopping the modules, the agents, the controller and the bus"
          : `stopping the controller${this.#o.bus === undefined ? " and the bus" : ""}`,
      );
    try {
      await Promise.all(this.#agents.map((a) => a.stop().catch(() => {})));
      for (const stop of this.#stopping.reverse()) await stop().catch(() => {});
    } finally {
      await this.#lock.release();
      this.#stops.dispose();
    }
  }

  /** Says `message` on standard error, as this daemon's own line. */
  say(message: string): void {
    this.#say(message);
  }

  // What a mesh killed with -9 left: its modules first (they use the bus), then its nats-server;
  // then the state's format, settled before the bus starts on it: an older one is backed up and
  // migrated (a killed run's nats-server is stopped first, so the copy is of files at rest), a
  // newer one refused.
  async #clearLeftovers(): Promise<void> {
    const nodeDirs = (await readdir(this.#nodesDir).catch(() => [] as string[])).map((n) =>
      join(this.#nodesDir, n),
    );
    this.recordDirs = [this.#busDir, ...nodeDirs];
    const log = prefixed(this.#o.io, this.#who);
    for (const dir of nodeDirs) await this.#parts.agent.stopLeftoverModules(dir, this.#graceMs, log);
    if (this.#o.bus === undefined) await this.#parts.bus.stopLeftoverBus(this.#busDir, log);
    await this.#parts.format.settleStateFormat(this.#o.state, this.#say);
  }

  // A standby takes the leader's authority, keys and HTTP tokens before it makes anything of its own.
  async #copyStandby(controllerState: string): Promise<void> {
    const leader = this.#o.standbyOf;
    if (leader === undefined) return;
    await this.#parts.controller
      .copyStandbyState(join(resolve(leader), "controller"), controllerState)
      .catch((err: unknown) => {
        throw new CliExit(EXIT_REFUSED, `--standby-of: ${(err as Error).message}`);
      });
    this.#say(`    stands by for the controller of ${leader}: its authority, keys and tokens are copied`);
  }

  // The operator's token and the scrape token, made at the first start: every request to the HTTP
  // server but the page itself carries one of them (or a session begun with the operator's).
  async #startHttp(controllerState: string): Promise<HttpParts & { metrics: ControllerMetrics }> {
    const c = this.#parts.controller;
    const { operatorTokenFile } = this.#o;
    const tokenFile =
      operatorTokenFile === undefined ? c.operatorTokenPath(controllerState) : resolve(operatorTokenFile);
    const scrapeTokenFile = c.scrapeTokenPath(controllerState);
    let auth: HttpAuth;
    let scrapeToken: string;
    try {
      const operatorToken = await c.loadOrCreateToken(tokenFile, "operator token");
      scrapeToken = await c.loadOrCreateToken(scrapeTokenFile, "scrape token");
      auth = new c.HttpAuth({ operatorToken, scrapeToken, logger: prefixed(this.#o.io, "controller") });
    } catch (err) {
      throw new CliExit(
        EXIT_USAGE,
        (operatorTokenFile !== undefined ? "--operator-token-file: " : "") + (err as Error).message,
      );
    }
    const metrics = new c.ControllerMetrics();
    const server = await c
      .startControllerHttp({
        listen: this.#o.http,
        routes: [c.metricsRoute(metrics.registry)],
        auth,
        logger: prefixed(this.#o.io, "controller"),
      })
      .catch((err: unknown) => {
        throw new CliExit(
          err instanceof ListenError ? EXIT_REFUSED : EXIT_USAGE,
          `--http: ${(err as Error).message}`,
        );
      });
    this.#stopping.push(() => server.close());
    // Where `mesh dashboard` finds it, and the token it asks with (the path, never the token).
    await writePrivate(
      controllerHttpPath(this.#o.state),
      JSON.stringify({ url: server.url, operatorTokenFile: tokenFile } satisfies ControllerHttpRecord),
    );
    this.#say(
      `the controller's HTTP server: ${server.url} (Prometheus metrics at ${server.url}/metrics, ` +
        `with the scrape token in ${scrapeTokenFile}; the operator token is in ${tokenFile})`,
    );
    return { server, auth, scrapeToken, metrics };
  }

  // The bus: the servers given with --bus, or the embedded nats-server on this state.
  async #startBus(authority: Authority): Promise<readonly string[]> {
    const steps = this.#steps;
    if (this.#o.bus !== undefined) {
      this.#say(
        `1/${steps} the bus: the NATS servers at ${this.#o.bus.join(", ")} (no nats-server is started here)` +
          (this.#o.ca !== undefined ? "; TLS, trusting the bus CA given" : ""),
      );
      return this.#o.bus;
    }
    this.#say(`1/${steps} the bus: starting nats-server (state in ${this.#busDir})`);
    let bus: EmbeddedBus;
    try {
      bus = await this.#parts.bus.startEmbeddedBus(
        this.#busDir,
        authority,
        this.#o.listen,
        prefixed(this.#o.io, this.#who),
      );
    } catch (err) {
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    this.#stopping.push(() => bus.stop());
    this.#say(
      `    nats-server (pid ${bus.pid}) answers on ${bus.url}; a connection without credentials is refused`,
    );
    return [bus.url];
  }

  // The operator's own credentials, for `mesh status` from another shell, and the bus's URLs with
  // its CA: mesh status and the other commands of this state trust the same servers.
  async #writeOperatorCredentials(authority: Authority, servers: readonly string[]): Promise<void> {
    const c = this.#parts.controller;
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: c.OPERATOR_IDENTITY,
      publicKey: keys.publicKey,
      permissions: c.operatorPermissions(),
    });
    await writePrivate(join(this.#o.state, "operator.creds"), credsFor(jwt, keys.seed));
    const ca = this.#o.ca;
    await writePrivate(
      join(this.#o.state, "bus.json"),
      JSON.stringify({ servers, ...(ca !== undefined ? { ca } : {}) }),
    );
  }

  // The controller, its metrics, the scrape targets it keeps and the dashboard it serves.
  async #startController(
    controllerState: string,
    authority: Authority,
    servers: readonly string[],
    http: HttpParts & { metrics: ControllerMetrics },
  ): Promise<Controller | undefined> {
    const c = this.#parts.controller;
    const { fleetFile, ca } = this.#o;
    this.#say(
      `2/${this.#steps} the controller: ` +
        (fleetFile === undefined || this.#o.standbyOf !== undefined
          ? "serving the fleet stored in the mesh"
          : `applying ${fleetFile} when it differs from the fleet stored in the mesh`),
    );
    let controller: Controller;
    try {
      controller = await c.startController({
        stateDir: controllerState,
        ...(fleetFile !== undefined ? { fleetFile } : {}),
        ...(this.#o.fleetHistory !== undefined ? { fleetHistory: this.#o.fleetHistory } : {}),
        servers,
        ...(ca !== undefined ? { ca } : {}),
        authority,
        logger: prefixed(this.#o.io, "controller"),
        observer: http.metrics.observer,
        ...(this.#o.standbyOf !== undefined ? { standby: true } : {}),
        // Servers of a cluster started at the same time form JetStream's quorum a while later:
        // the controller waits for it (and says why), as the agents wait for the bus.
        waitForBus: { signal: this.#stops.signal },
      });
    } catch (err) {
      if (this.#stopped()) return undefined;
      throw new CliExit(EXIT_REFUSED, (err as Error).message);
    }
    this.#stopping.push(() => controller.stop());
    if (this.#stopped()) return controller;
    http.metrics.follow(() => controller.status(), { health: () => controller.bus(), servers });
    // Where Prometheus finds every /metrics of the fleet (file_sd), whatever ports they took.
    const scrapeTargets = scrapeTargetsPath(this.#o.state);
    const targets = await c.keepScrapeTargets({
      file: scrapeTargets,
      status: () => controller.status(),
      controllerUrl: http.server.url,
      onError: (err) => this.#say(`    cannot write the scrape targets ${scrapeTargets}: ${err.message}`),
    });
    this.#stopping.push(() => Promise.resolve(targets.stop()));
    this.#say(`    Prometheus finds every /metrics of the fleet in ${scrapeTargets} (file_sd)`);
    for (const route of c.dashboardRoutes({ sources: controller, auth: http.auth })) http.server.route(route);
    // This process holds the operator's token: it hands the operator at its terminal a way in.
    const { osUserName } = await import("./who.ts");
    const login = http.auth.mintLoginCode(osUserName());
    this.#say(
      `    the dashboard: ${c.browsableUrl(http.server.url)}/?code=${login.code} (this link logs in once, within ` +
        `${Math.round(c.LOGIN_CODE_TTL_MS / 60_000)} min; \`mesh dashboard --state ${this.#o.state}\` prints a new one)`,
    );
    const fleet = controller.current();
    const consumers = fleet.plan.instances.reduce((n, i) => n + i.consumers.length, 0);
    this.#say(
      `    ${fleet.nodes.length} node(s), ${fleet.modules.length} module(s), ${consumers} consumer(s)`,
    );
    return controller;
  }

  // The other nodes join with `mesh agent`, from the token file written here for each: it names the
  // bus that serves now, at the address other machines reach it by. A standby gives no join tokens
  // (only the leader does): it writes them once it leads, at its next start.
  async #writeJoinTokens(
    controller: Controller,
    nodes: readonly string[],
    servers: readonly string[],
  ): Promise<void> {
    const { advertise, listen } = this.#o;
    const fleet = controller.current();
    const others = controller.leading() ? fleet.nodes.filter((n) => !nodes.includes(n)) : [];
    const { writeJoinTokens } = await import("./join-token-command.ts");
    const tokenFiles = await writeJoinTokens({
      controller,
      state: this.#o.state,
      nodes: others,
      // A token is made once; the bus it names is the one that serves now (its port may have moved).
      servers,
      ...(advertise === undefined ? {} : { advertise }),
    }).catch((err: unknown) => {
      throw new CliExit(EXIT_USAGE, `--advertise: ${(err as Error).message}`);
    });
    tokenFiles.forEach((file, i) => {
      const node = others[i] ?? "";
      this.#say(
        `    node ${node} joins with: mesh agent --node ${node} --join ${file} (copy the file there)`,
      );
    });
    const loopbackOnly = servers.every((url) => /^[a-z]+:\/\/(127\.|localhost|\[::1\])/i.test(url));
    if (
      others.length > 0 &&
      advertise === undefined &&
      loopbackOnly &&
      listen !== undefined &&
      listen !== "127.0.0.1"
    ) {
      this.#say(
        `    warning: the join tokens name the bus at 127.0.0.1, which other machines cannot reach: ` +
          `give --advertise HOST (this machine's address on their network)`,
      );
    }
  }

  // The agents of this machine's nodes, each on the bus that serves now (never the port a stored
  // join token remembers).
  async #startAgents(
    controller: Controller,
    nodes: readonly string[],
    servers: readonly string[],
    scrapeToken: string,
  ): Promise<boolean> {
    const { startAgent, AgentStartAbortedError } = this.#parts.agent;
    const ca = this.#o.ca;
    this.#say(`3/4 the agents: ${nodes.join(", ")}`);
    for (const node of nodes) {
      try {
        const agent = await startAgent({
          node,
          stateDir: join(this.#nodesDir, node),
          joinToken: await localJoinToken(controller, join(this.#nodesDir, node), node, this.#say),
          servers,
          ...(ca !== undefined ? { ca } : {}),
          logger: prefixed(this.#o.io, node),
          signal: this.#stops.signal,
          timings: { ...agentLogOptions(this.#o.io).timings, stopGraceMs: this.#graceMs },
          isolation: this.#o.isolation ?? "strict",
          scrapeTargets: scrapeTargetsPath(this.#o.state),
          scrapeToken,
        });
        this.#agents.push(agent);
      } catch (err) {
        if (err instanceof AgentStartAbortedError) return false;
        throw new CliExit(EXIT_REFUSED, (err as Error).message);
      }
      if (this.#stopped()) return false;
    }
    this.#say(
      `4/4 the modules start on their nodes; \`mesh status --state ${this.#o.state}\` shows them. Ctrl-C stops everything.`,
    );
    return true;
  }
}

/**
 * The join token a node this daemon runs enrolls with: its kept one, or a renewed one when the node
 * has no keys yet while its kept token was claimed by a key before (a state restored without the
 * node's own files, or a machine rebuilt): the old key is gone, and this daemon is the node's own
 * controller, so nothing else could present it.
 */
async function localJoinToken(
  controller: Controller,
  nodeDir: string,
  node: string,
  say: (m: string) => void,
): Promise<string> {
  const { stat } = await import("node:fs/promises");
  const hasKeys = await stat(join(nodeDir, "keys.json")).then(
    () => true,
    () => false,
  );
  if (hasKeys || !(await controller.joinTokenClaimed(node))) return controller.joinToken(node);
  say(`    node ${node} has no keys (its state is new or was lost): it enrolls with a renewed join token`);
  return controller.renewJoinToken(node);
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
