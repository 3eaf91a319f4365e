// Running one provider as a process: its settings from flags and environment, the adapter, the
// harness, and the control socket, said plainly at start and never with the admin URL's password.

import type { Logger } from "./collaborators.ts";
import { consoleLogger } from "./collaborators.ts";
import type { ControlServer } from "./control-socket.ts";
import { serveControl } from "./control-socket.ts";
import { InvalidDurationError, formatDuration, parseDuration } from "./duration.ts";
import { ProviderMetrics, parseListenAddress, serveMetrics, type MetricsServer } from "./metrics.ts";
import type { ProvisionerHandle } from "./harness.ts";
import { runProvisioner } from "./harness.ts";
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
}

/** A running provider process. */
export interface ProviderProcess {
  readonly handle: ProvisionerHandle;
  /** The control socket it serves, or null when it was given no path. */
  readonly control: ControlServer | null;
  /** The /metrics server, or null when it was given no address. */
  readonly metrics: MetricsServer | null;
  /** Closes the control socket, then stops the harness (which closes the adapter). Idempotent. */
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
      `each consumer verified every ${formatDuration(verifyEvery)}`,
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

  try {
    const adapter = provider.createAdapter({ adminUrl, instance, logger });
    try {
      handle = runProvisioner(provider.interface, adapter, {
        receives,
        instance,
        every,
        verifyEvery,
        logger,
        ...(options.node === undefined ? {} : { node: options.node }),
        ...(metrics === undefined ? {} : { metrics: metrics.observer(provider.interface, instance) }),
      });
    } catch (err) {
      await adapter.close?.().catch(() => {});
      throw err;
    }
  } catch (err) {
    await server?.close();
    await metricsServer?.close();
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
        await running.stop();
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
  readonly adminUrl: string;
  readonly control: string | undefined;
  readonly instance: string;
  readonly every: number;
  readonly verifyEvery: number;
  /** HOST:PORT for /metrics; none when absent. */
  readonly metrics?: string | undefined;
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
 * the provider's admin URL variable, MESH_CONTROL, MESH_INSTANCE, MESH_EVERY, MESH_VERIFY_EVERY,
 * MESH_METRICS.
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
  const adminUrl = pick(flags?.adminUrl, provider.adminUrlEnv);
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

  const metrics = pick(flags?.metrics, "MESH_METRICS");
  if (metrics !== undefined) {
    try {
      parseListenAddress(metrics);
    } catch (err) {
      problems.push(`${flags?.metrics ? "--metrics" : "MESH_METRICS"}: ${(err as Error).message}`);
    }
  }

  if (problems.length > 0 || receives === undefined || adminUrl === undefined) {
    throw new ProviderSettingsError(provider.name, problems);
  }
  return {
    receives,
    adminUrl,
    control: pick(flags?.control, "MESH_CONTROL"),
    instance: pick(flags?.instance, "MESH_INSTANCE") ?? provider.name,
    every,
    verifyEvery,
    ...(metrics === undefined ? {} : { metrics }),
  };
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
