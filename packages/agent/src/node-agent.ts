// The running agent of one node: follows the node's own deliveries bucket, applies each delivery
// (files, then modules) one at a time, and reports. A watch can miss a change while the bus is away,
// so the agent also reads the delivery again after each reconnect and on every report tick: it
// converges on what the controller published, however the bus came and went.
import {
  closeBus,
  nodeDeliveriesBucket,
  openState,
  readFileIfExists,
  reportSubject,
  writeFileAtomic,
  type BusLogger,
  type BusState,
  type StateChange,
  type StateWatch,
} from "@mesh/bus";
import { createServer } from "node:net";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import type { AgentReport } from "./agent-report.ts";
import { applyDelivery } from "./apply-delivery.ts";
import {
  DELIVERY_KEY,
  DeliveryPartsError,
  effectiveLimits,
  formatSize,
  MESH_RELEASE,
  protocolOf,
  PROTOCOL_VERSION,
  readDelivery,
  releaseOf,
  releaseOfProtocol,
  worksWithProtocol,
  type Delivery,
  type DeliveredModule,
  type PartCache,
} from "@mesh/manifest";
import { FileWatcher, maskUrls, metricsUrlPath } from "@mesh/sdk/provider";
import { InvalidDeliveryError, parseDelivery } from "./delivery.ts";
import { decideLaunch, moduleLogPath, type PasswordGate } from "./module-launch.ts";
import { ModuleKeyring } from "./module-keys.ts";
import { ScrapeTargetsCopies } from "./scrape-targets-copies.ts";
import { ModuleIsolations, ownerOf, type ModuleIdentity } from "./module-isolation.ts";
import { usersOfGoneModules, type IsolationMode } from "./module-users.ts";
import type { ModuleCgroups } from "./module-cgroups.ts";
import { HomeSizes, type MeasureHome } from "./home-sizes.ts";
import { withMetricsUrls } from "./module-metrics.ts";
import type { LimitEvent, SupervisionTimings } from "./module-process.ts";
import { ModuleSupervisor, type AssignedModule } from "./module-supervisor.ts";
import { MisbehavingModules } from "./misbehaving-modules.ts";
import { ConfirmedPasswords, providerPasswordGate, rememberingGate } from "./password-gate.ts";
import { ProviderStandings, type ProviderStanding } from "./provider-standings.ts";
import { nodeSecrets, scrubValue } from "./tool-runner.ts";
import type { NodeIdentity } from "./node-identity.ts";
import type { ProcessRecords } from "./process-records.ts";

/** What a module waits for when the controller has not yet issued its bus credential. */
const WAITING_FOR_CREDENTIAL = "its bus credential";
/** The newest controller term this node applied a delivery of, in its state directory. */
const DELIVERY_TERM_FILE = "delivery-term";

/** How often the delivery is read again beside its watch, by default (or each report, when sooner). */
const READ_EVERY_MS = 2_000;
/**
 * How often an app waiting for its provider's apply of a password is rendered again: often for
 * the first minute (a rotation is applied within seconds), then every few seconds (a provider
 * that fails is not asked five times a second for ever).
 */
const REGATE_EVERY_MS = 200;
const REGATE_FAST_FOR_MS = 60_000;
const REGATE_SLOW_MS = 2_000;

/** Every delay the agent keeps; tests shorten them. */
export interface AgentTimings extends SupervisionTimings {
  /** How often the agent reports when nothing changes. */
  readonly reportEveryMs: number;
  /**
   * How often the delivery is read again beside its watch (default 2 s, or `reportEveryMs` when
   * that is shorter). The watch is a JetStream
   * consumer on one server: when that server goes down, the watch sees nothing until JetStream
   * makes it again elsewhere, and this read is what brings a delivery published meanwhile.
   */
  readonly readEveryMs?: number;
  /** How long enrollment keeps asking a controller that does not answer. */
  readonly enrollWithinMs: number;
  /** How often each module's home is measured (HOME_MEASURE_EVERY_MS, a minute, when absent). */
  readonly homeMeasureEveryMs?: number;
  /** The pause before trying again what failed for want of the bus. */
  readonly retryMs: number;
  /**
   * How long a module is held back, before its first start, for its bus credential; after that it
   * starts without one (its events off), and restarts once the credential comes.
   */
  readonly credentialWaitMs: number;
}

/** What the agent says about itself: its last report, and whether it has the bus now. */
export interface AgentStatus extends AgentReport {
  readonly connected: boolean;
}

/** What a `NodeAgent` is made from: a node already enrolled and connected. */
export interface NodeAgentOptions {
  readonly node: string;
  readonly stateDir: string;
  readonly nc: NatsConnection;
  /** The bus's URLs, as the node reaches them: its modules get them too (MESH_BUS_SERVERS). */
  readonly servers: readonly string[];
  /** The bus CA's file when the bus uses TLS: its modules get it too (MESH_BUS_CA). */
  readonly caFile?: string;
  readonly identity: NodeIdentity;
  readonly logger: BusLogger;
  readonly baseEnv: Readonly<Record<string, string | undefined>>;
  readonly timings: AgentTimings;
  /** Whether a module its own user cannot run is refused (`strict`) or run as the agent (`auto`, the default). */
  readonly isolation?: IsolationMode;
  /** Where each module process is recorded while it runs (the next start stops what a crash left). */
  readonly records?: ProcessRecords;
  /** The scrape targets file the controller on this machine keeps (`{mesh.targets}`). */
  readonly scrapeTargets?: string;
  /** The mesh id this node's module users and cgroups are named with (see mesh-id.ts). */
  readonly meshId: string;
  /** Each module's cgroup; absent: modules run in the agent's. */
  readonly cgroups?: ModuleCgroups;
  /** How a module's home is measured (`du`, by default). */
  readonly measureHome?: MeasureHome;
  /** The controller's scrape token on this machine (`{mesh.scrape-token}`). */
  readonly scrapeToken?: string;
}

/** One node's agent at work. Made by `startAgent`. */
export class NodeAgent {
  readonly #o: NodeAgentOptions;
  readonly #supervisor: ModuleSupervisor;
  readonly #keyring: ModuleKeyring;
  readonly #standings: ProviderStandings;
  readonly #isolations: ModuleIsolations;
  /** The modules whose answers were malformed, huge, slow or cut off, until they answer well again. */
  readonly misbehaving: MisbehavingModules;
  // A provider says where it serves its metrics once it listens: reported then, not at the next tick.
  readonly #metricsFiles = new FileWatcher(() => this.#changed());
  #modules: readonly string[] = [];
  // The port picked for each app that names {module.metrics} without a fixed one: kept while the
  // agent runs, so that deciding its launch again is not a restart.
  readonly #metricsPorts = new Map<string, number>();
  #busUsers: ReadonlyMap<string, string> = new Map();
  #state: BusState<unknown> | undefined;
  #watch: StateWatch<unknown> | undefined;
  #queue: Promise<void> = Promise.resolve();
  #lastApplied: string | undefined;
  #lastRefused: string | undefined;
  #generation = 0;
  // The newest controller term seen in a delivery: one of a lower term is a paused old leader's.
  // Kept in the state directory, so a restarted agent does not apply an old leader's late write
  // that stayed in the bucket; undefined until read from there.
  #term: number | undefined;
  #files = { written: 0, unchanged: 0 };
  #connected = true;
  #stopped = false;
  #ticker: NodeJS.Timeout | undefined;
  #reader: NodeJS.Timeout | undefined;
  #reportSoon: NodeJS.Timeout | undefined;
  #wake: (() => void) | undefined;
  #following: Promise<void> = Promise.resolve();
  #saidWaiting = "";
  readonly #saidStale = new Set<string>();
  /** Module -> when it began waiting for its bus credential (ms since the epoch). */
  readonly #credentialWait = new Map<string, number>();
  readonly #saidStartedWithout = new Set<string>();
  #lastValue: unknown;
  /** The newest value offered and not yet taken by an application, and whether one is queued for it. */
  #pending: { readonly value: unknown; readonly again: boolean } | undefined;
  #pendingQueued = false;
  /** Who each module ran as in the last application, by the delivery's text: kept for the same delivery applied again. */
  #identities:
    { readonly text: string; readonly identities: ReadonlyMap<string, ModuleIdentity> } | undefined;
  // The newest revision of the delivery key seen, by the watch or a read.
  #newestRevision = 0;
  /** The delivery last applied, and the timer that renders its apps again while one waits for an apply. */
  #lastDelivery: Delivery | undefined;
  #regateTimer: NodeJS.Timeout | undefined;
  /** The next application of a delivery whose consumers' new passwords were held back. */
  #reapplyTimer: NodeJS.Timeout | undefined;
  /** Since when each consumer's copy of a new password has been held back, by path. */
  readonly #heldSince = new Map<string, number>();
  /** Since when some app has waited for its provider's apply (ms since the epoch). */
  #gatedSince: number | undefined;
  /** Every secret of this node, read at each delivery: what a crashing module's log lines are scrubbed of. */
  #secrets: string[] = [];
  /** The parts of the deliveries read so far, by key and fingerprint: a new head reads only what changed. */
  readonly #parts: PartCache = new Map();
  #saidPartsWaiting = "";
  // The last reason a delivery's parts could not be read, said once.
  #saidReadFailing = "";
  #partsTimer: NodeJS.Timeout | undefined;
  #waitTimer: NodeJS.Timeout | undefined;

  /** The modules' own copies of the scrape targets file, when this machine keeps one. */
  readonly #targets: ScrapeTargetsCopies | undefined;
  readonly #homes: HomeSizes;
  // The modules whose home is over its limit as last decided ("a,b"): a measure that changes it decides again.
  #overHome = "";
  /** Users of this mesh in /etc/passwd whose module no longer runs on this node. */
  #goneUsers: readonly string[] = [];
  /** The passwords this node's providers confirmed applied: after a restart they are handed over at once. */
  readonly #confirmed: ConfirmedPasswords;

  constructor(options: NodeAgentOptions) {
    this.#o = options;
    this.#confirmed = new ConfirmedPasswords(options.stateDir);
    this.#supervisor = new ModuleSupervisor(
      options.logger,
      options.timings,
      () => this.#changed(),
      options.records,
      options.cgroups,
    );
    this.#keyring = new ModuleKeyring(options.stateDir, options.logger);
    const { stateDir, logger, baseEnv: env } = options;
    this.misbehaving = new MisbehavingModules({ logger, onChange: () => this.#changed() });
    this.#standings = new ProviderStandings({
      stateDir,
      logger,
      env,
      onChange: () => this.#changed(),
      misbehaving: this.misbehaving,
      consumers: (module) => this.consumersOf(module),
    });
    this.#isolations = new ModuleIsolations({
      stateDir: options.stateDir,
      meshId: options.meshId,
      mode: options.isolation ?? "auto",
      logger: options.logger,
      env: options.baseEnv,
    });
    if (options.scrapeTargets !== undefined) this.#targets = new ScrapeTargetsCopies(options.scrapeTargets);
    this.#homes = new HomeSizes({
      stateDir,
      logger,
      onMeasured: () => this.#homesMeasured(),
      ...(options.timings.homeMeasureEveryMs === undefined
        ? {}
        : { everyMs: options.timings.homeMeasureEveryMs }),
      ...(options.measureHome === undefined ? {} : { measure: options.measureHome }),
    });
  }

  /** Starts following deliveries, watching the connection and reporting. */
  run(): void {
    this.#following = this.#follow();
    void this.#followConnection();
    this.#ticker = setInterval(() => this.#tick(), this.#o.timings.reportEveryMs);
    const { readEveryMs, reportEveryMs } = this.#o.timings;
    this.#reader = setInterval(() => this.#resync(), readEveryMs ?? Math.min(READ_EVERY_MS, reportEveryMs));
    this.#homes.start();
    this.#changed();
  }

  /** The agent's report as of now, and whether it has the bus. */
  status(): AgentStatus {
    return { ...this.#report(), connected: this.#connected };
  }

  /**
   * How many consumers the last delivery gives provider `module` on this node: what its answers may
   * grow with (0 for a module that provides nothing here).
   */
  consumersOf(module: string): number {
    const plan = this.#lastDelivery?.plan;
    if (plan === undefined) return 0;
    let n = 0;
    for (const i of plan.instances)
      if (i.provider === module && i.node === this.#o.node) n += i.consumers.length;
    return n;
  }

  /** The modules this node supervises now, by name (what `status()` lists, without reading a file). */
  modules(): string[] {
    return this.#supervisor.statuses().map((s) => s.name);
  }

  /** Stops following, stops every module, sends a last report and closes the bus connection. */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    clearInterval(this.#ticker);
    clearInterval(this.#reader);
    clearTimeout(this.#reportSoon);
    clearTimeout(this.#waitTimer);
    clearTimeout(this.#partsTimer);
    clearTimeout(this.#regateTimer);
    clearTimeout(this.#reapplyTimer);
    this.#metricsFiles.close();
    this.#targets?.stop();
    this.#standings.stop();
    this.#watch?.stop();
    this.#wake?.();
    await this.#homes.stop();
    await this.#following;
    await this.#queue;
    await this.#supervisor.stopAll();
    this.#publish();
    await closeBus(this.#o.nc);
    this.#o.logger.info(`the agent of node ${this.#o.node} stopped`);
  }

  async #follow(): Promise<void> {
    const bucket = nodeDeliveriesBucket(this.#o.node);
    while (!this.#stopped) {
      try {
        this.#state ??= await openState<unknown>(this.#o.nc, bucket, { create: false });
        const watch = await this.#state.watch({ key: DELIVERY_KEY });
        this.#watch = watch;
        if (this.#stopped) watch.stop();
        this.#saidWaiting = "";
        for await (const change of watch) this.#take(change);
      } catch (err) {
        const why = err instanceof Error ? err.message : String(err);
        if (why !== this.#saidWaiting) {
          this.#o.logger.warn(`node ${this.#o.node} waits for its deliveries (${why}); trying again`);
        }
        this.#saidWaiting = why;
      }
      await this.#sleep(this.#o.timings.retryMs);
    }
  }

  async #followConnection(): Promise<void> {
    for await (const status of this.#o.nc.status()) {
      if (status.type === "disconnect") this.#connected = false;
      if (status.type === "reconnect") {
        this.#connected = true;
        this.#resync();
      }
    }
  }

  #take(change: StateChange<unknown>): void {
    const node = this.#o.node;
    if (change.operation === "put") this.#offer(change.value, change.revision);
    else if (change.operation === "delete") {
      this.#o.logger.warn(
        `the delivery for node ${node} was deleted: the node keeps its files and modules as they are`,
      );
    } else this.#o.logger.error(`the delivery for node ${node} cannot be read: ${change.error.message}`);
  }

  // A value of the delivery key, from the watch or a read: applied unless a newer revision was
  // seen already. A read answered late (issued before the watch brought the next delivery) would
  // otherwise put an older delivery back: its modules stopped, their keys removed and made again.
  #offer(value: unknown, revision: number): void {
    if (revision < this.#newestRevision) return;
    this.#newestRevision = revision;
    this.#enqueue(value);
  }

  // At most one application waits behind the one running, and it takes the newest value offered by
  // the time it starts: deliveries that came while one was applied are passed over, not applied one
  // after another. Applying a delivery takes seconds on a loaded node; applied in turn, a burst of
  // rotations queued the node a delivery per rotation behind, and an app that reads its password
  // once was restarted only after its provider had dropped the old password it still used.
  // `again`: applied even when it is the delivery applied last (a held-back copy asked again). Said
  // here, not by forgetting `#lastApplied` when a timer fires: an apply still running then would
  // set it back once it ends, and the one queued behind it would be skipped as already applied.
  #enqueue(value: unknown, again = false): void {
    this.#pending = { value, again: again || this.#pending?.again === true };
    if (this.#pendingQueued) return;
    this.#pendingQueued = true;
    this.#queue = this.#queue
      .then(() => {
        this.#pendingQueued = false;
        const next = this.#pending;
        this.#pending = undefined;
        return next === undefined ? undefined : this.#apply(next.value, next.again);
      })
      .catch((err: unknown) => {
        this.#o.logger.error(err instanceof Error ? err.message : String(err));
      });
  }

  // The same delivery applied again (a held password, a credential waited for): the newest value
  // offered, never an older one put back in front of a newer one waiting.
  #applyAgain(): void {
    const value = this.#pending?.value ?? this.#lastValue;
    if (value === undefined || this.#stopped) return;
    this.#enqueue(value, true);
  }

  async #apply(value: unknown, again = false): Promise<void> {
    const text = JSON.stringify(value);
    if (this.#stopped || (!again && text === this.#lastApplied) || text === this.#lastRefused) return;
    this.#lastValue = value;
    // A controller too far apart may mean something else by what it writes: nothing of it is applied.
    const protocol = protocolOf((value as { protocol?: unknown } | null)?.protocol);
    if (!worksWithProtocol(protocol)) {
      this.#lastRefused = text;
      const release =
        releaseOf((value as { release?: unknown } | null)?.release) ?? releaseOfProtocol(protocol);
      throw new Error(
        `node ${this.#o.node} does not apply the controller's delivery: the controller speaks protocol ` +
          `${protocol}${release === undefined ? "" : ` (mesh ${release})`} and this agent, mesh ${MESH_RELEASE}, ` +
          `protocol ${PROTOCOL_VERSION}, works only one protocol apart; it keeps its files and modules as they ` +
          `are. Upgrade ${protocol > PROTOCOL_VERSION ? "this node's mesh" : "the controller"} (docs/operating.md, "Upgrading")`,
      );
    }
    let delivery: Delivery;
    try {
      const state = this.#state;
      if (state === undefined) return;
      const read = await readDelivery(value, (key) => state.get(key), this.#parts);
      if (read.waiting !== undefined) {
        this.#partsWait(value, read.waiting);
        return;
      }
      this.#saidPartsWaiting = "";
      delivery = parseDelivery(read.delivery, this.#o.node);
    } catch (err) {
      if (err instanceof DeliveryPartsError) {
        this.#lastRefused = text;
        throw new InvalidDeliveryError(this.#o.node, err.field, err.why);
      }
      if (err instanceof InvalidDeliveryError) {
        // Said once: the same bad delivery is read again every few seconds until the controller replaces it.
        this.#lastRefused = text;
        throw err;
      }
      // The bus did not answer a read of its parts (JetStream electing leaders after a partition,
      // say): nothing is refused, it is read again shortly. Taken as refused, this delivery would
      // never be applied until the controller published another.
      this.#readFailed(value, err);
      return;
    }
    this.#saidReadFailing = "";
    const term = delivery.term ?? 0;
    const termFile = join(this.#o.stateDir, DELIVERY_TERM_FILE);
    if (this.#term === undefined) {
      const kept = Number((await readFileIfExists(termFile))?.trim() ?? "0");
      this.#term = Number.isSafeInteger(kept) && kept > 0 ? kept : 0;
    }
    if (term < this.#term) {
      this.#lastRefused = text;
      this.#o.logger.warn(
        `node ${this.#o.node} ignored delivery ${delivery.generation}: it is of controller term ${term}, ` +
          `older than term ${this.#term} (a controller that no longer leads wrote it)`,
      );
      return;
    }
    if (term > this.#term) await writeFileAtomic(termFile, `${term}\n`);
    this.#term = term;
    const { node, stateDir, logger } = this.#o;
    const sealKeys = this.#o.identity.seal;
    // Who each module runs as comes first: every file written for it is handed to that user.
    // The same delivery applied again moments later (a password held back until its provider takes
    // it) keeps who its modules run as: checking every module's user and reach again costs seconds
    // on a loaded node, and the app waiting for that password is restarted only after it.
    const identities =
      this.#identities?.text === text
        ? this.#identities.identities
        : await this.#applyProvidersFirst(delivery).then(() => this.#isolations.resolve(delivery));
    this.#identities = { text, identities };
    const owner = (module: string) => ownerOf(identities.get(module));
    const said = this.#saidStale;
    const result = await applyDelivery(delivery, {
      node,
      stateDir,
      sealKeys,
      logger,
      said,
      ownerOf: owner,
      passwordApplied: this.#passwordGate(),
      heldSince: this.#heldSince,
    });
    this.#reapplySoon(result.held.length > 0);
    // Each module's own keys, then the credentials the controller issued for them.
    await this.#keyring.reconcile(delivery);
    const credentials = await this.#keyring.writeCredentials(delivery, owner);
    this.#busUsers = credentials.busUsers;
    this.#files = {
      written: result.written + credentials.written,
      unchanged: result.unchanged + credentials.unchanged,
    };
    this.#generation = delivery.generation;
    this.#lastApplied = text;
    logger.info(
      `node ${node} applied delivery ${delivery.generation}: ${result.written} files written, ` +
        `${result.unchanged} unchanged` +
        (result.rejected.length > 0 ? `, ${result.rejected.length} secrets refused` : ""),
    );
    this.#lastDelivery = delivery;
    this.#secrets = await nodeSecrets(stateDir, this.#o.baseEnv).catch(() => this.#secrets);
    this.#homes.watch(delivery.modules.map((m) => m.name));
    this.#goneUsers = await usersOfGoneModules(
      this.#o.meshId,
      delivery.modules.map((m) => m.name),
    );
    if (!this.#stopped) await this.#supervisor.reconcile(await this.#assigned(delivery));
    this.#modules = delivery.modules.map((m) => m.name);
    this.misbehaving.keepOnly(this.#modules);
    this.#standings.follow(delivery.plan.instances.filter((i) => i.node === node).map((i) => i.provider));
    this.#watchMetricsFiles();
    this.#changed();
  }

  // Deciding who each module runs as makes a system user for each new module, tens of
  // milliseconds each: seconds when a fleet change adds a hundred consumers. The providers already
  // running here need none of it, so their part of `delivery` (each new consumer's password, then
  // the contributions file naming it) is written first, owned by the users they run as now, and
  // their backends start on the change while the consumers' users are made. The whole delivery is
  // applied after, as ever: it finds the providers' files written, and says what failed here.
  async #applyProvidersFirst(delivery: Delivery): Promise<void> {
    const { node, stateDir, logger } = this.#o;
    const running = new Set<string>();
    for (const instance of delivery.plan.instances) {
      const identity = this.#isolations.identity(instance.provider);
      if (instance.node === node && identity !== undefined && identity.kind !== "refused") {
        running.add(instance.provider);
      }
    }
    const modules = delivery.modules.filter((m) => running.has(m.name));
    // Only a delivery that brings modules with no user yet waits on useradd; any other is applied
    // whole at once, and writing the providers' part first would only do that part twice.
    const newcomers = delivery.modules.some((m) => this.#isolations.identity(m.name) === undefined);
    if (modules.length === 0 || !newcomers) return;
    await applyDelivery(
      { ...delivery, modules },
      {
        node,
        stateDir,
        sealKeys: this.#o.identity.seal,
        // A secret refused or a file not derived is said once, by the whole delivery's application.
        logger: { info: (m) => logger.info(m), warn: (m) => logger.warn(m), error: () => undefined },
        said: this.#saidStale,
        ownerOf: (module) => ownerOf(this.#isolations.identity(module)),
        passwordApplied: this.#passwordGate(),
        heldSince: this.#heldSince,
        removeUnused: false,
      },
    ).catch(() => undefined);
  }

  async #metricsPort(module: string, host: string): Promise<number> {
    const kept = this.#metricsPorts.get(`${module}@${host}`);
    if (kept !== undefined) return kept;
    const port = await freePort(host);
    this.#metricsPorts.set(`${module}@${host}`, port);
    return port;
  }

  async #assigned(delivery: Delivery): Promise<AssignedModule[]> {
    const ctx = {
      node: this.#o.node,
      stateDir: this.#o.stateDir,
      baseEnv: this.#o.baseEnv,
      bus: {
        servers: this.#o.servers,
        users: this.#busUsers,
        ...(this.#o.caFile !== undefined ? { caFile: this.#o.caFile } : {}),
      },
      identity: (module: string) => this.#isolations.identity(module),
      passwordApplied: this.#passwordGate(),
      // Its last standing when it answered (where a provider serves does not change while it runs), else asked now.
      providerSaid: async (provider: string): Promise<ProviderStanding> => {
        const said = this.#standings.standings().find((p) => p.module === provider);
        return said?.answered === true ? said : await this.#standings.askNow(provider);
      },
      ...(this.#targets === undefined ? {} : { scrapeTargets: this.#targets }),
      ...(this.#o.scrapeToken === undefined ? {} : { scrapeToken: this.#o.scrapeToken }),
      metricsPort: (module: string, host: string) => this.#metricsPort(module, host),
    };
    const over: string[] = [];
    const assigned = await Promise.all(
      delivery.modules.map(async (m) => {
        const held = this.#homeOverLimit(m);
        if (held !== undefined) over.push(m.name);
        return {
          name: m.name,
          logFile: moduleLogPath(this.#o.stateDir, m.name),
          decision: await decideLaunch(m, delivery, ctx),
          ...(held === undefined ? {} : { held }),
        };
      }),
    );
    this.#overHome = over.sort().join(",");
    // A delivery without `credentials` comes from a controller that issues none: nothing to wait for.
    const issues = delivery.credentials !== undefined;
    let gated = false;
    const decided = assigned.map((m) => {
      const waiting = this.#waitsForCredential(m.name, issues && m.decision.kind === "run");
      if (waiting) return { ...m, waiting: WAITING_FOR_CREDENTIAL };
      if (m.decision.kind !== "run" || m.decision.waiting === undefined) return m;
      gated = true;
      return { ...m, waiting: m.decision.waiting };
    });
    if (!gated) this.#gatedSince = undefined;
    else {
      this.#gatedSince ??= Date.now();
      this.#regateSoon();
    }
    return decided;
  }

  // A module whose home is over its limit is stopped, and stays so until it is under it again or
  // the limit is raised: a home is measured only now and then, so this is a bound on what a
  // module keeps, not a quota on what it writes.
  #homeOverLimit(module: DeliveredModule): LimitEvent | undefined {
    const limit = effectiveLimits(module.limits).home;
    const size = this.#homes.size(module.name);
    if (limit === null || size === undefined || size.bytes <= limit) return undefined;
    return {
      kind: "home",
      text:
        `home ${formatSize(size.bytes)} passed its limit ${formatSize(limit)}: stopped until the home ` +
        `is under it again or the fleet file raises limits.home`,
      at: size.at,
    };
  }

  // Sizes measured: when a home passed its limit or came back under it, the modules are decided again.
  #homesMeasured(): void {
    this.#changed();
    const delivery = this.#lastDelivery;
    if (delivery === undefined || this.#stopped) return;
    const over = delivery.modules
      .filter((m) => this.#homeOverLimit(m) !== undefined)
      .map((m) => m.name)
      .sort()
      .join(",");
    if (over === this.#overHome) return;
    this.#queue = this.#queue
      .then(async () => {
        if (this.#stopped || delivery !== this.#lastDelivery) return;
        await this.#supervisor.reconcile(await this.#assigned(delivery));
      })
      .catch((err: unknown) => this.#o.logger.error(err instanceof Error ? err.message : String(err)));
  }

  // Asks a provider of this node, at its control socket, whether its backend took a password.
  #passwordGate(): PasswordGate {
    return rememberingGate(
      providerPasswordGate(this.#o.stateDir, {
        misbehaving: this.misbehaving,
        consumers: (provider) => this.consumersOf(provider),
      }),
      this.#confirmed,
    );
  }

  // A consumer's new password held back until its provider takes it beside the old one: the same
  // delivery is applied again shortly (each time asking the provider), bounded by the agent's stop
  // and by HOLD_NEW_PASSWORD_MOST_MS in applyDelivery.
  #reapplySoon(held: boolean): void {
    if (!held || this.#reapplyTimer !== undefined || this.#stopped) return;
    this.#reapplyTimer = setTimeout(() => {
      this.#reapplyTimer = undefined;
      this.#applyAgain();
    }, REGATE_EVERY_MS);
  }

  // An app waits for its provider to apply a password: asked again shortly, so its restart (or
  // signal) follows the apply closely; bounded by the agent's stop.
  #regateSoon(): void {
    if (this.#regateTimer !== undefined || this.#stopped) return;
    this.#regateTimer = setTimeout(
      () => {
        this.#regateTimer = undefined;
        const delivery = this.#lastDelivery;
        if (delivery === undefined) return;
        this.#queue = this.#queue
          .then(async () => {
            if (this.#stopped || delivery !== this.#lastDelivery) return;
            await this.#supervisor.reconcile(await this.#assigned(delivery));
          })
          .catch((err: unknown) => this.#o.logger.error(err instanceof Error ? err.message : String(err)));
      },
      Date.now() - (this.#gatedSince ?? Date.now()) > REGATE_FAST_FOR_MS ? REGATE_SLOW_MS : REGATE_EVERY_MS,
    );
  }

  // A module starts once, with its credential: the controller issues it after this agent reports
  // the module's keys, a moment after the first delivery. Bounded: a controller that never issues
  // must not keep the module down for ever.
  #waitsForCredential(module: string, runs: boolean): boolean {
    if (!runs || this.#busUsers.has(module)) {
      this.#credentialWait.delete(module);
      return false;
    }
    const now = Date.now();
    const since = this.#credentialWait.get(module) ?? now;
    this.#credentialWait.set(module, since);
    const left = since + this.#o.timings.credentialWaitMs - now;
    if (left <= 0) {
      if (!this.#saidStartedWithout.has(module)) {
        this.#saidStartedWithout.add(module);
        this.#o.logger.warn(
          `module ${module} has waited ${this.#o.timings.credentialWaitMs / 1000} s for its bus credential: ` +
            `it starts without one (its events off), and restarts once the controller issues it`,
        );
      }
      return false;
    }
    if (this.#waitTimer === undefined) {
      this.#waitTimer = setTimeout(() => {
        this.#waitTimer = undefined;
        this.#applyAgain();
      }, left + 10);
    }
    return true;
  }

  // The head names parts not written yet (the controller writes them first, so this is a moment's
  // race, or a controller stopped between the two): nothing is applied; read again shortly.
  #partsWait(value: unknown, waiting: readonly string[]): void {
    const said = `${waiting.length} ${JSON.stringify(waiting[0])}`;
    if (said !== this.#saidPartsWaiting) {
      const generation = (value as { generation?: unknown }).generation;
      this.#o.logger.info(
        `node ${this.#o.node} waits for ${waiting.length} part(s) of delivery ${String(generation)} ` +
          `(${waiting.slice(0, 3).join(", ")}${waiting.length > 3 ? ", …" : ""}): nothing of it is applied until all are there`,
      );
    }
    this.#saidPartsWaiting = said;
    if (this.#partsTimer !== undefined || this.#stopped) return;
    this.#partsTimer = setTimeout(() => {
      this.#partsTimer = undefined;
      this.#resync();
    }, this.#o.timings.retryMs);
  }

  // A part of the delivery could not be read now: said once per reason, read again shortly.
  #readFailed(value: unknown, err: unknown): void {
    const why = err instanceof Error ? err.message : String(err);
    if (why !== this.#saidReadFailing) {
      const generation = (value as { generation?: unknown } | null)?.generation;
      this.#o.logger.warn(
        `node ${this.#o.node} could not read delivery ${String(generation)} from the bus (${why}); ` +
          `it reads it again every ${this.#o.timings.retryMs / 1000} s`,
      );
    }
    this.#saidReadFailing = why;
    if (this.#partsTimer !== undefined || this.#stopped) return;
    this.#partsTimer = setTimeout(() => {
      this.#partsTimer = undefined;
      this.#resync();
    }, this.#o.timings.retryMs);
  }

  // Reads the delivery as it is now, for what a watch may have missed while the bus was away.
  #resync(): void {
    const state = this.#state;
    if (state === undefined || this.#stopped) return;
    state.entry(DELIVERY_KEY).then(
      (entry) => {
        if (entry !== undefined) this.#offer(entry.value, entry.revision);
      },
      () => undefined, // the bus is not back yet; the next read tries again
    );
  }

  // Again on every tick: a module's directory that was not there yet is watched once it is.
  #watchMetricsFiles(): void {
    this.#metricsFiles.watchFiles(this.#modules.map((m) => metricsUrlPath(this.#o.stateDir, m)));
  }

  #tick(): void {
    this.#watchMetricsFiles();
    this.#supervisor.refresh();
    this.#publish();
  }

  #changed(): void {
    if (this.#stopped || this.#reportSoon !== undefined) return;
    // Changes come in bursts (a delivery starts several modules): one report says them all.
    this.#reportSoon = setTimeout(() => {
      this.#reportSoon = undefined;
      this.#publish();
    }, 50);
  }

  #report(): AgentReport {
    return {
      node: this.#o.node,
      release: MESH_RELEASE,
      protocol: PROTOCOL_VERSION,
      generation: this.#generation,
      at: new Date().toISOString(),
      modules: withMetricsUrls(this.#o.stateDir, this.#supervisor.statuses(), this.misbehaving).map((m) => {
        // A module refused for want of isolation is not running: its status still says why.
        const isolation = m.isolation ?? this.#isolations.identity(m.name)?.isolation;
        const tail = m.logTail?.map((line) => maskUrls(String(scrubValue(line, this.#secrets))));
        const home = this.#homes.size(m.name);
        return {
          ...m,
          ...(isolation === undefined ? {} : { isolation }),
          ...(tail ? { logTail: tail } : {}),
          ...(home === undefined ? {} : { home }),
        };
      }),
      files: { ...this.#files },
      moduleKeys: this.#keyring.publicKeys(),
      providers: this.#standings.standings(),
      misbehaving: this.misbehaving.list(),
      ...(this.#goneUsers.length === 0 ? {} : { goneModuleUsers: this.#goneUsers.slice(0, 100) }),
    };
  }

  #publish(): void {
    try {
      this.#o.nc.publish(reportSubject(this.#o.node), JSON.stringify(this.#report()));
    } catch {
      // A closed connection: there is no one to report to.
    }
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.#wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
}

/** A port of `host` nobody listens on now: bound and let go at once, for a module to bind. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
