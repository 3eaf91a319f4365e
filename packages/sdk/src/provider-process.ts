// Running one provider as a process: its settings from flags and environment, the adapter, the
// harness, and the control socket, said plainly at start and never with the admin URL's password.
// Run by the agent with a bus credential, it announces its standings on the bus, best effort.

import { dirname, isAbsolute } from "node:path";
import type { Announcer, Logger, StandingEvent } from "./collaborators.ts";
import { consoleLogger } from "./collaborators.ts";
import type { ControlServer } from "./control-socket.ts";
import { serveControl } from "./control-socket.ts";
import { InvalidDurationError, formatDuration, parseDuration } from "./duration.ts";
import { ProviderMetrics, parseListenAddress, serveMetrics, type MetricsServer } from "./metrics.ts";
import { metricsUrlPath, removeMetricsUrl, writeMetricsUrl } from "./metrics-url.ts";
import type { ProvisionerHandle } from "./harness.ts";
import { runProvisioner } from "./harness.ts";
import { ActionJournal, actionJournalPath } from "./action-journal.ts";
import { connectModuleBus, MODULE_BUS_VARIABLES } from "./module-bus.ts";
import type { ProviderModule } from "./provider.ts";
import type { ProvisionerTools } from "./tools.ts";
import { ToolError } from "./tools.ts";
import { isServerUrl, redactSecrets, redactUrl, redactingLogger, secretsOfUrl } from "./redact.ts";

/** How often a provider process passes when not told (5 s). */
export const DEFAULT_EVERY_MS = 5_000;
/** How often it verifies each consumer when not told (60 s). */
export const DEFAULT_VERIFY_EVERY_MS = 60_000;

/** What `startProviderProcess` runs. Durations in milliseconds. */
export interface ProviderProcessOptions {
  readonly provider: ProviderModule;
  /** The contributions file the mesh writes for the provider's interface. */
  readonly receives: string;
  /** Where consumers' secrets are read from (see `SecretsDirectory`); default: the contributions file's directory. */
  readonly secretsDir?: string | undefined;
  /** Where the adapter reaches its backend as an admin. Its password is never said. */
  readonly adminUrl: string;
  /** Names this provider in the marks it writes. Default: the provider's name. */
  readonly instance?: string | undefined;
  /** Where to serve the control socket; none when not given. */
  readonly control?: string | undefined;
  readonly every?: number | undefined;
  readonly verifyEvery?: number | undefined;
  /** The node it runs on, said in standings. */
  readonly node?: string | undefined;
  /** Where it says what it does (default: standard error). Every line is scrubbed of the admin password. */
  readonly logger?: Logger | undefined;
  /** HOST:PORT to serve Prometheus metrics on (`/metrics`); none when not given. */
  readonly metrics?: string | undefined;
  /**
   * Where to write the URL the /metrics server really bound, for the agent to report (see
   * `metricsUrlPath`); removed on a clean stop. None: the URL is only said in the log.
   */
  readonly metricsUrlFile?: string | undefined;
  /** The action journal the agent follows into the module's ledger (see `actionJournalPath`); none: actions are kept nowhere. */
  readonly journal?: string | undefined;
  /** How long a consumer fails without a success before it is announced failing (the harness's 5 min). */
  readonly failingAfter?: number | undefined;
  /** How often a lasting failure is announced again (the harness's 15 min). */
  readonly sayAgainEvery?: number | undefined;
  /**
   * The module's bus, as the agent hands it (see `busEnvOf`): standings are announced on it, best
   * effort. None: standings are not announced (unless `announcer` is given).
   */
  readonly bus?: Readonly<Record<string, string>> | undefined;
  /** Where standings go, over `bus`; for tests and embedders. */
  readonly announcer?: Announcer | undefined;
}

/** A running provider process. */
export interface ProviderProcess {
  readonly handle: ProvisionerHandle;
  /** The control socket it serves, or null when it was given no path. */
  readonly control: ControlServer | null;
  /** The /metrics server, or null when it was given no address. */
  readonly metrics: MetricsServer | null;
  /** Closes the control socket, then stops the harness (which closes the adapter), then the bus. Idempotent. */
  stop(): Promise<void>;
}

/** The provider could not be started: the adapter or the harness refused. Carries no secret. */
export class ProviderStartError extends Error {
  override name = "ProviderStartError";
  constructor(
    readonly provider: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Starts a provider: serves the control socket when a path is given, then makes its adapter and runs
 * the harness on its interface. Says what it runs, on which file and with which admin URL (password
 * masked), and where its control socket is.
 * @throws ProviderStartError when the adapter or the harness cannot be started (message scrubbed).
 * @throws ControlSocketInUseError / ControlSocketPathError when the control socket cannot be served;
 *   nothing has touched the backend then.
 */
export async function startProviderProcess(options: ProviderProcessOptions): Promise<ProviderProcess> {
  const { provider, receives, adminUrl, control } = options;
  const secretsDir = options.secretsDir ?? dirname(receives);
  const secrets = secretsOfUrl(adminUrl);
  const logger = redactingLogger(options.logger ?? consoleLogger, secrets);
  const instance = options.instance ?? provider.name;
  const every = options.every ?? DEFAULT_EVERY_MS;
  const verifyEvery = options.verifyEvery ?? DEFAULT_VERIFY_EVERY_MS;
  const scrubbed = (err: unknown): string =>
    redactSecrets(err instanceof Error ? err.message : String(err), secrets);

  logger.info(
    `mesh provider ${provider.name} (instance ${instance}) provides ${provider.interface} to the consumers ` +
      `listed in ${receives}, through ${redactUrl(adminUrl)}; a pass every ${formatDuration(every)}, ` +
      `each consumer verified every ${formatDuration(verifyEvery)}; secrets are read only from ${secretsDir}`,
  );

  // The control socket comes first: a second copy of a running provider must be refused before it
  // touches the backend, not after a pass of its own.
  let handle: ProvisionerHandle | undefined;
  let server: ControlServer | null = null;
  if (control !== undefined) {
    server = await serveControl(
      toolsOnceStarted(() => handle),
      control,
      logger,
    );
    logger.info(`control socket: ${control} (ask it: mesh tool --control ${control} status)`);
  } else {
    logger.info("no control socket: pass --control PATH or set MESH_CONTROL to ask this provider's tools");
  }
  // Before the backend is touched, like the control socket: a taken port refuses the start.
  const metrics = options.metrics === undefined ? undefined : new ProviderMetrics();
  let metricsServer: MetricsServer | null = null;
  if (metrics !== undefined) {
    metricsServer = await serveMetrics(metrics.registry, options.metrics).catch(async (err: unknown) => {
      await server?.close();
      throw err;
    });
    logger.info(`metrics: ${metricsServer.url} (Prometheus text format)`);
  }
  // Best effort: the metrics are served whether or not the agent can be told where.
  const metricsUrlFile = metricsServer === null ? undefined : options.metricsUrlFile;
  if (metricsServer !== null && metricsUrlFile !== undefined) {
    await writeMetricsUrl(metricsUrlFile, metricsServer.url).catch((err: unknown) => {
      logger.warn(
        `metrics: the URL could not be written to ${metricsUrlFile} (${err instanceof Error ? err.message : String(err)}); ` +
          "the metrics are served, but the agent cannot report where",
      );
    });
  }

  // Announcing is best effort: a bus that cannot be reached never stops the provisioning.
  let busAnnouncer: BusAnnouncer | undefined;
  if (options.announcer === undefined && options.bus !== undefined) {
    const env = options.bus;
    busAnnouncer = new BusAnnouncer({ connect: () => connectModuleBus({ env, logger }), logger });
    logger.info(
      `standings: announced on the bus as mesh.events.${env["MESH_MODULE"] ?? "<module>"}.provisioner.failing|recovered`,
    );
  }
  const announcer = options.announcer ?? busAnnouncer;

  const journal = options.journal === undefined ? undefined : new ActionJournal(options.journal, logger);
  if (journal !== undefined) logger.info(`actions: journalled to ${journal.path} for the module's ledger`);

  try {
    const adapter = provider.createAdapter({
      adminUrl,
      instance,
      logger,
      emit: (localName, body) => busAnnouncer?.emit(localName, body),
    });
    try {
      handle = runProvisioner(provider.interface, adapter, {
        receives,
        secretsDir,
        instance,
        every,
        verifyEvery,
        logger,
        // What it announces, journals and answers is scrubbed of the admin password, like its log.
        secrets,
        ...(options.node === undefined ? {} : { node: options.node }),
        ...(journal === undefined ? {} : { actions: journal }),
        ...(options.failingAfter === undefined ? {} : { failingAfter: options.failingAfter }),
        ...(options.sayAgainEvery === undefined ? {} : { sayAgainEvery: options.sayAgainEvery }),
        ...(announcer === undefined ? {} : { announcer }),
        ...(metrics === undefined ? {} : { metrics: metrics.observer(provider.interface, instance) }),
      });
    } catch (err) {
      await adapter.close?.().catch(() => {});
      throw err;
    }
  } catch (err) {
    await server?.close();
    await metricsServer?.close();
    if (metricsUrlFile !== undefined) await removeMetricsUrl(metricsUrlFile);
    await busAnnouncer?.close();
    throw new ProviderStartError(
      provider.name,
      `the ${provider.name} provider did not start: ${scrubbed(err)}`,
    );
  }
  const running = handle;
  metrics?.follow(running);
  running.ready.then(
    () => logger.info(`${provider.name}: first pass done`),
    (err: unknown) => logger.error(`${provider.name}: the first pass did not finish: ${scrubbed(err)}`),
  );

  let stopping: Promise<void> | undefined;
  return {
    handle: running,
    control: server,
    metrics: metricsServer,
    stop() {
      stopping ??= (async () => {
        await server?.close();
        await metricsServer?.close();
        if (metricsUrlFile !== undefined) await removeMetricsUrl(metricsUrlFile);
        await running.stop();
        await journal?.flush();
        // After the harness: what it announced while stopping still goes out.
        await busAnnouncer?.close();
      })();
      return stopping;
    },
  };
}

/** Tools that answer through the harness once it runs, and say "still starting" before. */
function toolsOnceStarted(current: () => ProvisionerTools | undefined): ProvisionerTools {
  const started = (): ProvisionerTools => {
    const tools = current();
    if (tools === undefined)
      throw new ToolError("stopped", "the provider is still starting; ask again in a moment");
    return tools;
  };
  return {
    status: () => started().status(),
    retireList: () => started().retireList(),
    retireApprove: (id, who) => started().retireApprove(id, who),
    cleanupList: () => started().cleanupList(),
    cleanupDelete: (login, who) => started().cleanupDelete(login, who),
  };
}

/** What `mesh provider` was given on its command line; each one beats its environment variable. */
export interface ProviderFlags {
  readonly receives?: string | undefined;
  readonly secretsDir?: string | undefined;
  readonly adminUrl?: string | undefined;
  readonly control?: string | undefined;
  readonly instance?: string | undefined;
  readonly every?: string | undefined;
  readonly verifyEvery?: string | undefined;
  readonly metrics?: string | undefined;
}

/** A provider's settings, read and checked. */
export interface ProviderSettings {
  readonly receives: string;
  /** MESH_SECRETS_DIR (the agent sets it) or `--secrets-dir`; absent: the contributions file's directory. */
  readonly secretsDir?: string | undefined;
  readonly adminUrl: string;
  readonly control: string | undefined;
  readonly instance: string;
  readonly every: number;
  readonly verifyEvery: number;
  /** HOST:PORT for /metrics; none when absent. */
  readonly metrics?: string | undefined;
  /** `<MESH_STATE_DIR>/modules/<MESH_MODULE>/metrics.url` when run by the agent with metrics; absent otherwise. */
  readonly metricsUrlFile?: string | undefined;
  /** `<MESH_STATE_DIR>/modules/<MESH_MODULE>/actions.jsonl` when run by the agent; absent otherwise. */
  readonly journal?: string | undefined;
  /** The node it runs on (MESH_NODE), said in standings; absent when not set. */
  readonly node?: string | undefined;
  /** MESH_FAILING_AFTER; absent for the harness's 5 min. */
  readonly failingAfter?: number | undefined;
  /** MESH_SAY_AGAIN_EVERY; absent for the harness's 15 min. */
  readonly sayAgainEvery?: number | undefined;
  /** The module's bus variables when the agent gave it a bus credential (see `busEnvOf`). */
  readonly bus?: Readonly<Record<string, string>> | undefined;
}

/** What a provider process is given is missing or wrong; `problems` lists each, with its fix. */
export class ProviderSettingsError extends Error {
  override name = "ProviderSettingsError";
  constructor(
    readonly provider: string,
    readonly problems: readonly string[],
  ) {
    super(`the ${provider} provider cannot start:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/**
 * Reads a provider's settings from `flags` (when run as `mesh provider`) and `env`: MESH_RECEIVES,
 * MESH_SECRETS_DIR, the provider's admin URL variable, MESH_CONTROL, MESH_INSTANCE, MESH_EVERY, MESH_VERIFY_EVERY,
 * MESH_METRICS; and from `env` only: MESH_NODE, MESH_FAILING_AFTER, MESH_SAY_AGAIN_EVERY, and the
 * bus variables the agent sets (see `busEnvOf`).
 * A flag beats its variable; an empty variable counts as unset. Messages name the flag only when
 * `flags` is given.
 * @throws ProviderSettingsError naming every missing or bad setting and how to give it.
 */
export function resolveProviderSettings(
  provider: ProviderModule,
  env: Readonly<Record<string, string | undefined>>,
  flags?: ProviderFlags,
): ProviderSettings {
  const problems: string[] = [];
  const pick = (flag: string | undefined, variable: string): string | undefined => {
    if (flag !== undefined && flag !== "") return flag;
    const value = env[variable];
    return value === undefined || value === "" ? undefined : value;
  };
  const howToGive = (flag: string, variable: string): string =>
    flags === undefined ? `set ${variable}` : `pass ${flag} or set ${variable}`;

  const receives = pick(flags?.receives, "MESH_RECEIVES");
  if (receives === undefined) {
    problems.push(
      `the contributions file is missing: ${howToGive("--receives FILE", "MESH_RECEIVES")} ` +
        `(the file the mesh writes for ${provider.interface})`,
    );
  }
  const secretsDir = pick(flags?.secretsDir, "MESH_SECRETS_DIR");
  if (secretsDir !== undefined && !isAbsolute(secretsDir)) {
    problems.push(
      `the secrets directory ${JSON.stringify(secretsDir)} is not an absolute path: ` +
        `${howToGive("--secrets-dir DIR", "MESH_SECRETS_DIR")} as one`,
    );
  }
  // MESH_ADMIN_URL: what the agent sets when the provider's fleet entry names a file for it.
  const adminUrl = pick(flags?.adminUrl, provider.adminUrlEnv) ?? pick(undefined, "MESH_ADMIN_URL");
  if (adminUrl === undefined) {
    problems.push(
      `the admin URL is missing: ${howToGive("--admin-url URL", provider.adminUrlEnv)} ` +
        `(for example ${provider.adminUrlExample})`,
    );
  } else if (!isServerUrl(adminUrl)) {
    problems.push(
      `the admin URL ${redactUrl(adminUrl)} is not a URL; write it like ${provider.adminUrlExample}`,
    );
  }
  const duration = (
    flag: string,
    flagValue: string | undefined,
    variable: string,
    fallback: number,
  ): number => {
    const text = pick(flagValue, variable);
    if (text === undefined) return fallback;
    try {
      return parseDuration(text);
    } catch (err) {
      if (!(err instanceof InvalidDurationError)) throw err;
      const source = flagValue !== undefined && flagValue !== "" ? flag : variable;
      problems.push(`${source}: ${err.message}`);
      return fallback;
    }
  };
  const every = duration("--every", flags?.every, "MESH_EVERY", DEFAULT_EVERY_MS);
  const verifyEvery = duration(
    "--verify-every",
    flags?.verifyEvery,
    "MESH_VERIFY_EVERY",
    DEFAULT_VERIFY_EVERY_MS,
  );

  // Variables only: the harness's standings timing, shortened where a test or a demo needs it.
  const durationIfSet = (variable: string): number | undefined =>
    pick(undefined, variable) === undefined ? undefined : duration(variable, undefined, variable, 0);
  const failingAfter = durationIfSet("MESH_FAILING_AFTER");
  const sayAgainEvery = durationIfSet("MESH_SAY_AGAIN_EVERY");
  const node = pick(undefined, "MESH_NODE");
  const bus = busEnvOf(env);

  const metrics = pick(flags?.metrics, "MESH_METRICS");
  if (metrics !== undefined) {
    try {
      parseListenAddress(metrics);
    } catch (err) {
      problems.push(`${flags?.metrics ? "--metrics" : "MESH_METRICS"}: ${(err as Error).message}`);
    }
  }

  let journal: string | undefined;
  let metricsUrlFile: string | undefined;
  const [stateDir, module] = [env["MESH_STATE_DIR"], env["MESH_MODULE"]];
  if (stateDir !== undefined && stateDir !== "" && module !== undefined && module !== "") {
    try {
      journal = actionJournalPath(stateDir, module);
      if (metrics !== undefined) metricsUrlFile = metricsUrlPath(stateDir, module);
    } catch (err) {
      problems.push(`MESH_STATE_DIR and MESH_MODULE (set by the agent): ${(err as Error).message}`);
    }
  }

  if (problems.length > 0 || receives === undefined || adminUrl === undefined) {
    throw new ProviderSettingsError(provider.name, problems);
  }
  return {
    receives,
    ...(secretsDir === undefined ? {} : { secretsDir }),
    adminUrl,
    control: pick(flags?.control, "MESH_CONTROL"),
    instance: pick(flags?.instance, "MESH_INSTANCE") ?? provider.name,
    every,
    verifyEvery,
    ...(metrics === undefined ? {} : { metrics }),
    ...(node === undefined ? {} : { node }),
    ...(failingAfter === undefined ? {} : { failingAfter }),
    ...(sayAgainEvery === undefined ? {} : { sayAgainEvery }),
    ...(bus === undefined ? {} : { bus }),
    ...(journal === undefined ? {} : { journal }),
    ...(metricsUrlFile === undefined ? {} : { metricsUrlFile }),
  };
}

/**
 * The bus variables of `env` (MESH_BUS_SERVERS, MESH_BUS_CREDS, MESH_MANIFEST, MESH_SEATS,
 * MESH_MODULE, MESH_BUS_CA, those that are set) when it holds a bus credential: MESH_BUS_CREDS and
 * MESH_BUS_SERVERS both set and not empty. Undefined otherwise: the provider announces nothing.
 */
export function busEnvOf(
  env: Readonly<Record<string, string | undefined>>,
): Readonly<Record<string, string>> | undefined {
  const set = (name: string): boolean => (env[name] ?? "").trim() !== "";
  if (!set("MESH_BUS_CREDS") || !set("MESH_BUS_SERVERS")) return undefined;
  const bus: Record<string, string> = {};
  for (const name of MODULE_BUS_VARIABLES) {
    const value = env[name];
    if (value !== undefined) bus[name] = value;
  }
  // Optional: set only when the bus uses TLS.
  if (set("MESH_BUS_CA")) bus["MESH_BUS_CA"] = env["MESH_BUS_CA"] ?? "";
  return bus;
}

/** The slice of a module bus (`ModuleBus`) the announcer uses. */
export interface StandingsBus {
  emit(localName: string, body: unknown): void;
  close(): Promise<void>;
}

/** How a `BusAnnouncer` reaches its bus. */
export interface BusAnnouncerOptions {
  /** Opens the bus (`connectModuleBus`); called again after a failure, until it succeeds. */
  readonly connect: () => Promise<StandingsBus>;
  /** Where it says that the bus cannot be reached (once) and that it can again. */
  readonly logger: Logger;
  /** The first wait before trying again (30 s); it doubles up to `maxRetryEvery` (5 min). */
  readonly retryEvery?: number;
  readonly maxRetryEvery?: number;
  /** How many consumers' standings it keeps while the bus is not there (10,000). */
  readonly maxPending?: number;
  /** The clock, ms since the epoch, for the `at` it stamps (Date.now). */
  readonly now?: () => number;
}

/**
 * Announces the harness's standings on the module's bus (`emit`), best effort: each one is
 * stamped with when it was said (`at`), so the controller keeps the newest whatever order they
 * arrive in. While the bus is not there, it keeps the newest standing of each consumer and sends
 * them once it is; a failure to connect is said once (and the recovery once), and never reaches
 * the harness.
 */
export class BusAnnouncer implements Announcer {
  readonly #o: Required<Omit<BusAnnouncerOptions, "connect" | "logger">> & BusAnnouncerOptions;
  readonly #pending = new Map<string, { event: string; body: Record<string, unknown> }>();
  #bus: StandingsBus | undefined;
  #attempt: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #wait: number;
  #closed = false;
  #down: string | undefined;
  #said = new Set<string>();
  #unnamed = 0;
  #dropped = 0;
  #sent = 0;

  constructor(options: BusAnnouncerOptions) {
    this.#o = {
      retryEvery: 30_000,
      maxRetryEvery: 5 * 60_000,
      maxPending: 10_000,
      now: Date.now,
      ...options,
    };
    this.#wait = this.#o.retryEvery;
    this.#connect();
  }

  announce(event: StandingEvent, body: Readonly<Record<string, unknown>>): void {
    this.#send(event, typeof body["consumer"] === "string" ? `c:${body["consumer"]}` : undefined, body);
  }

  /**
   * Announces one of the module's own events (declared in its manifest's `emits`), stamped like a
   * standing and kept, each one, while the bus is not there. Never throws.
   */
  emit(localName: string, body: Readonly<Record<string, unknown>>): void {
    this.#send(localName, undefined, body);
  }

  #send(event: string, consumerKey: string | undefined, body: Readonly<Record<string, unknown>>): void {
    if (this.#closed) return;
    const stamped = {
      ...body,
      at: typeof body["at"] === "string" ? body["at"] : new Date(this.#o.now()).toISOString(),
    };
    if (this.#bus !== undefined) {
      this.#emit(this.#bus, event, stamped);
      return;
    }
    // Only the newest word on each consumer matters to the controller.
    const key = consumerKey ?? `n:${this.#unnamed++}`;
    this.#pending.delete(key);
    this.#pending.set(key, { event, body: stamped });
    while (this.#pending.size > this.#o.maxPending) {
      const [oldest] = this.#pending.keys();
      if (oldest === undefined) break;
      this.#pending.delete(oldest);
      if (this.#dropped++ === 0) {
        this.#o.logger.warn(
          `standings: more than ${this.#o.maxPending} consumers' standings wait for the bus; the oldest are dropped (counted, not said again)`,
        );
      }
    }
  }

  /** What it has done: standings sent, waiting for the bus, dropped while waiting. */
  stats(): { readonly sent: number; readonly pending: number; readonly dropped: number } {
    return { sent: this.#sent, pending: this.#pending.size, dropped: this.#dropped };
  }

  /** Stops trying, sends what the open bus holds, and closes it. Safe to call twice. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    await this.#attempt;
    const bus = this.#bus;
    this.#bus = undefined;
    await bus?.close().catch(() => undefined);
  }

  #connect(): void {
    this.#attempt = this.#o.connect().then(
      (bus) => {
        if (this.#closed) {
          this.#bus = bus;
          return;
        }
        this.#bus = bus;
        this.#wait = this.#o.retryEvery;
        if (this.#down !== undefined)
          this.#o.logger.info("standings: the bus is reachable again; announcing");
        this.#down = undefined;
        const waiting = [...this.#pending.values()];
        this.#pending.clear();
        for (const { event, body } of waiting) this.#emit(bus, event, body);
      },
      (err: unknown) => {
        const why = err instanceof Error ? err.message : String(err);
        if (this.#down === undefined) {
          this.#o.logger.warn(
            `standings: cannot announce on the bus (${why}); the provider goes on provisioning, keeps each ` +
              `consumer's newest standing and tries the bus again, first in ${formatDuration(this.#wait)}`,
          );
        }
        this.#down = why;
        if (this.#closed) return;
        this.#timer = setTimeout(() => this.#connect(), this.#wait);
        this.#timer.unref();
        this.#wait = Math.min(this.#wait * 2, this.#o.maxRetryEvery);
      },
    );
  }

  #emit(bus: StandingsBus, event: string, body: Record<string, unknown>): void {
    try {
      bus.emit(event, body);
      this.#sent += 1;
    } catch (err) {
      const e = err instanceof Error ? err : new Error(String(err));
      // Once per kind of failure: the same cause would fill the log at every announcement.
      if (!this.#said.has(e.name)) {
        this.#said.add(e.name);
        this.#o.logger.warn(`standings: ${event} was not announced: ${e.message}`);
      }
    }
  }
}

/**
 * Resolves with the first SIGINT or SIGTERM. A second one exits at once (130), for a stop that hangs.
 */
export function untilStopSignal(logger: Logger = consoleLogger): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    let received: NodeJS.Signals | undefined;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (received !== undefined) {
        logger.warn(`${signal} again: exiting without waiting for a clean stop`);
        process.exit(130);
      }
      received = signal;
      logger.info(`${signal}: stopping (again to exit at once)`);
      resolve(signal);
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
  });
}

/**
 * The entry point of a provider run on its own (`node providers/postgres/src/main.ts`): reads its
 * settings from the environment, runs until SIGINT or SIGTERM, stops cleanly and exits 0. Exits 2
 * when a setting is missing or bad, 1 when the provider cannot start.
 */
export async function runProviderMain(provider: ProviderModule): Promise<never> {
  let settings: ProviderSettings;
  try {
    settings = resolveProviderSettings(provider, process.env);
  } catch (err) {
    if (!(err instanceof ProviderSettingsError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }
  // Listening before starting, so a signal while it starts still stops it cleanly.
  const signalled = untilStopSignal();
  let running: ProviderProcess;
  try {
    running = await startProviderProcess({ provider, ...settings });
  } catch (err) {
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  await signalled;
  await running.stop();
  process.exit(0);
}
