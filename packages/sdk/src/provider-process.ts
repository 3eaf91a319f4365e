// Running one provider as a process: its settings (see provider-settings.ts), the adapter, the
// harness, and the control socket, said plainly at start and never with the admin URL's password.
// Run by the agent with a bus credential, it announces its standings on the bus (bus-announcer.ts).

import { dirname } from "node:path";
import { ActionJournal } from "./action-journal.ts";
import { BusAnnouncer } from "./bus-announcer.ts";
import type { Announcer, Logger } from "./collaborators.ts";
import { consoleLogger } from "./collaborators.ts";
import type { ControlServer } from "./control-socket.ts";
import { serveControl } from "./control-socket.ts";
import { DEFAULT_EVERY_MS, DEFAULT_VERIFY_EVERY_MS } from "./defaults.ts";
import { formatDuration } from "./duration.ts";
import type { ProvisionerHandle } from "./harness.ts";
import { runProvisioner } from "./harness.ts";
import { ProviderMetrics, serveMetrics, type MetricsServer } from "./metrics.ts";
import { removeMetricsUrl, writeMetricsUrl } from "./metrics-url.ts";
import { connectModuleBus } from "./module-bus.ts";
import type { ProviderModule } from "./provider.ts";
import {
  ProviderSettingsError,
  resolveProviderSettings,
  type ProviderSettings,
} from "./provider-settings.ts";
import { redactSecrets, redactUrl, redactingLogger, secretsOfUrl } from "./redact.ts";
import type { ProvisionerTools } from "./tools.ts";
import { ToolError } from "./tools.ts";

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
  /** How long a rotated-out password stays valid beside the new one (the harness's 2 min when absent). */
  readonly rotationGrace?: number | undefined;
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

  // Where its consumers reach it: its admin URL's host and port, reported through `status`.
  const served = provider.serves?.(adminUrl);
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
        ...(served === undefined ? {} : { serves: served }),
        ...(journal === undefined ? {} : { actions: journal }),
        ...(options.failingAfter === undefined ? {} : { failingAfter: options.failingAfter }),
        ...(options.sayAgainEvery === undefined ? {} : { sayAgainEvery: options.sayAgainEvery }),
        ...(options.rotationGrace === undefined ? {} : { rotationGrace: options.rotationGrace }),
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
