// The controller's Prometheus metrics: what it serves (nodes, modules, consumers, failing consumers,
// read from its status at each scrape) and what it did (reloads, deliveries published, passwords
// minted, rotations, counted as they happen), on a registry of its own, never prom-client's global one.
// Beside the totals, one series per node, module, consumer, provider and bus server or stream: what
// the alerts in deploy/prometheus/mesh.rules.yml fire on, each naming what to look at.
import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
import { hostPortOf, probeBusServer, type BusHealth } from "./bus-health.ts";
import type { ControllerStatus } from "./controller-status.ts";
import type { NodeDeliveries } from "./node-deliveries.ts";

/**
 * What the controller tells whoever counts its work (`ControllerOptions.observer`). Called inside
 * the controller's one-at-a-time changes: an implementation must be quick and must not throw.
 */
export interface ControllerObserver {
  /** The fleet file was read again: `applied` when it was taken, `refused` when the last good one stays. */
  reloaded(result: "applied" | "refused"): void;
  /** A node's delivery changed and was published. */
  published(): void;
  /** `count` passwords were minted for consumers new to the fleet (0: none). */
  minted(count: number): void;
  /** One consumer's password was rotated (a new one minted). */
  rotated(): void;
}

/**
 * `deliveries`, telling `observer` of each delivery it publishes that changed, whoever asks it to
 * publish (a reload, a rotation, an enrollment, a node's report). Returns the same object.
 */
export function observeDeliveries(
  deliveries: NodeDeliveries,
  observer: ControllerObserver | undefined,
): NodeDeliveries {
  if (observer === undefined) return deliveries;
  const publish = deliveries.publish.bind(deliveries);
  deliveries.publish = async (...args) => {
    const result = await publish(...args);
    if (result.changed) observer.published();
    return result;
  };
  return deliveries;
}

/** How long after its last report a node counts as silent, when not told: three missed 10 s reports. */
export const DEFAULT_SILENT_AFTER_MS = 30_000;

const NODE_STATES = ["enrolled", "not-enrolled", "reporting", "silent"] as const;
const MODULE_STATES = ["starting", "running", "crashing", "stopped", "unknown"] as const;

/** What the controller's metrics are made with. */
export interface ControllerMetricsOptions {
  /** Also the process's own metrics (CPU, memory, event loop, file descriptors). Default true. */
  readonly processMetrics?: boolean;
  /** A node that has not reported for this long is silent (DEFAULT_SILENT_AFTER_MS). */
  readonly silentAfterMs?: number;
  /** The clock, in ms since the epoch (Date.now). */
  readonly now?: () => number;
}

/** Where the controller's metrics read the bus from (`ControllerMetrics.follow`). */
export interface BusSource {
  /** The bus as the controller's connection sees it (`Controller.bus`). */
  readonly health: () => Promise<BusHealth>;
  /** The bus servers the mesh was given (URLs or `host:port`): each is probed even when the cluster no longer names it. */
  readonly servers?: readonly string[];
  /** How long a probe of one server may take (2 s). */
  readonly probeTimeoutMs?: number;
}

/** What one scrape knows of the bus: read once, whatever number of its metrics ask. */
interface BusSnapshot {
  readonly health: BusHealth | undefined;
  readonly up: ReadonlyMap<string, boolean>;
}

// A scrape asks every metric in turn: the bus is read once for all of them.
const BUS_SNAPSHOT_MS = 1_000;

/**
 * The controller's metrics:
 *
 * ```ts
 * const metrics = new ControllerMetrics();
 * const controller = await startController({ ...options, observer: metrics.observer });
 * metrics.follow(() => controller.status());
 * const http = await startControllerHttp({ routes: [metricsRoute(metrics.registry)] });
 * ```
 */
export class ControllerMetrics {
  readonly registry = new Registry();
  readonly observer: ControllerObserver;
  #status: (() => ControllerStatus) | undefined;
  #bus: BusSource | undefined;
  // Every bus server named or seen: one that leaves the cluster's list is still probed (and down).
  readonly #busServers = new Set<string>();
  #busSnapshot: { at: number; value: Promise<BusSnapshot> } | undefined;

  constructor(options: ControllerMetricsOptions = {}) {
    const registers = [this.registry];
    if (options.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    const silentAfter = options.silentAfterMs ?? DEFAULT_SILENT_AFTER_MS;
    const now = options.now ?? Date.now;
    const status = (): ControllerStatus | undefined => this.#status?.();
    const isReporting = (lastReportAt: string | null): boolean =>
      lastReportAt !== null && now() - Date.parse(lastReportAt) <= silentAfter;

    new Gauge({
      name: "mesh_controller_nodes",
      help:
        "Nodes of the fleet or enrolled: enrolled and not-enrolled add up to all of them; reporting and " +
        `silent (no report for ${silentAfter / 1000}s) add up to the enrolled ones.`,
      labelNames: ["state"],
      registers,
      collect() {
        const s = status();
        const counts = new Map<string, number>(NODE_STATES.map((k) => [k, 0]));
        for (const n of s?.nodes ?? []) {
          const bump = (k: string): void => void counts.set(k, (counts.get(k) ?? 0) + 1);
          bump(n.enrolled ? "enrolled" : "not-enrolled");
          if (isReporting(n.lastReportAt)) bump("reporting");
          else if (n.enrolled) bump("silent");
        }
        for (const [state, n] of counts) this.set({ state }, n);
      },
    });
    new Gauge({
      name: "mesh_controller_modules",
      help: "Modules as their nodes last reported them; a silent node's modules are unknown.",
      labelNames: ["state"],
      registers,
      collect() {
        const counts = new Map<string, number>(MODULE_STATES.map((k) => [k, 0]));
        for (const n of status()?.nodes ?? []) {
          const reporting = isReporting(n.lastReportAt);
          for (const m of n.modules) {
            const state = reporting ? m.state : "unknown";
            counts.set(state, (counts.get(state) ?? 0) + 1);
          }
        }
        for (const [state, n] of counts) this.set({ state }, n);
      },
    });
    new Gauge({
      name: "mesh_controller_consumers",
      help: "Consumers (a module's use of an interface) in the fleet being served.",
      registers,
      collect() {
        this.set(status()?.consumers.length ?? 0);
      },
    });
    new Gauge({
      name: "mesh_controller_failing_consumers",
      help: "Consumers their provider says are failing (its status as its node reports it, or provisioner.failing), as the controller last heard.",
      registers,
      collect() {
        this.set(status()?.failing.length ?? 0);
      },
    });
    new Gauge({
      name: "mesh_consumer_never_seen_connected",
      help: "1 while a consumer's provider has not seen its login connected since its password was applied, past the bound (MESH_NEVER_SEEN_AFTER, 10m), else 0.",
      labelNames: ["provider", "consumer", "interface", "login", "node"],
      registers,
      collect() {
        this.reset();
        for (const c of status()?.consumers ?? []) {
          this.set(
            {
              provider: c.provider,
              consumer: c.consumer,
              interface: c.interface,
              login: c.login,
              node: c.node,
            },
            c.neverSeenConnected === true ? 1 : 0,
          );
        }
      },
    });
    new Gauge({
      name: "mesh_controller_fleet_refused",
      help: "1 while the fleet file's latest version is refused (the last good fleet is served), else 0.",
      registers,
      collect() {
        this.set(status()?.fleet.refused ? 1 : 0);
      },
    });
    const reloads = new Counter({
      name: "mesh_controller_reloads_total",
      help: "Fleet file reloads: applied, or refused (the last good fleet kept being served).",
      labelNames: ["result"],
      registers,
    });
    const published = new Counter({
      name: "mesh_controller_deliveries_published_total",
      help: "Node deliveries published because what the node takes part in changed.",
      registers,
    });
    const minted = new Counter({
      name: "mesh_controller_passwords_minted_total",
      help: "Passwords minted: for consumers new to the fleet, and at each rotation.",
      registers,
    });
    const rotations = new Counter({
      name: "mesh_controller_rotations_total",
      help: "Password rotations asked for and applied.",
      registers,
    });
    for (const result of ["applied", "refused"]) reloads.inc({ result }, 0);
    this.#perEntity(registers, status, isReporting);
    this.#busMetrics(registers);
    this.observer = {
      reloaded: (result) => reloads.inc({ result }),
      published: () => published.inc(),
      minted: (count) => minted.inc(count),
      rotated: () => {
        rotations.inc();
        minted.inc();
      },
    };
  }

  /**
   * Reads nodes, modules and consumers from `status` at every scrape (the controller's `status`),
   * and the bus from `bus` when given.
   */
  follow(status: () => ControllerStatus, bus?: BusSource): void {
    this.#status = status;
    this.#bus = bus;
    for (const s of bus?.servers ?? []) {
      const hp = hostPortOf(s);
      if (hp !== undefined) this.#busServers.add(hp);
    }
  }

  // One series per node, module, consumer and provider, read from the status at each scrape: a
  // thing gone from the status is gone from the scrape (each gauge is reset before it is set).
  #perEntity(
    registers: Registry[],
    status: () => ControllerStatus | undefined,
    isReporting: (lastReportAt: string | null) => boolean,
  ): void {
    new Gauge({
      name: "mesh_node_enrolled",
      help: "1 when the node has enrolled (its agent joined with its token), else 0; one series per node of the fleet or enrolled.",
      labelNames: ["node"],
      registers,
      collect() {
        this.reset();
        for (const n of status()?.nodes ?? []) this.set({ node: n.name }, n.enrolled ? 1 : 0);
      },
    });
    new Gauge({
      name: "mesh_node_reporting",
      help: "1 when the node's agent reported within the silent bound, else 0 (silent, or never reported since the controller started).",
      labelNames: ["node"],
      registers,
      collect() {
        this.reset();
        for (const n of status()?.nodes ?? [])
          this.set({ node: n.name }, isReporting(n.lastReportAt) ? 1 : 0);
      },
    });
    new Gauge({
      name: "mesh_node_last_report_timestamp_seconds",
      help: "When the node's agent last reported (seconds since the epoch); absent until it has reported.",
      labelNames: ["node"],
      registers,
      collect() {
        this.reset();
        for (const n of status()?.nodes ?? []) {
          if (n.lastReportAt !== null) this.set({ node: n.name }, Date.parse(n.lastReportAt) / 1000);
        }
      },
    });
    new Gauge({
      name: "mesh_module_state",
      help: "1 for the state each module is in as its node last reported it (starting, running, crashing, stopped; unknown while its node is silent), 0 for the others.",
      labelNames: ["node", "module", "state"],
      registers,
      collect() {
        this.reset();
        for (const n of status()?.nodes ?? []) {
          const reporting = isReporting(n.lastReportAt);
          for (const m of n.modules) {
            const current = reporting ? m.state : "unknown";
            for (const state of MODULE_STATES)
              this.set({ node: n.name, module: m.name, state }, state === current ? 1 : 0);
          }
        }
      },
    });
    new Counter({
      name: "mesh_module_restarts_total",
      help: "Times the module was restarted by its agent after it exited, as its node last reported (starts again from 0 when the agent restarts).",
      labelNames: ["node", "module"],
      registers,
      collect() {
        this.reset();
        for (const n of status()?.nodes ?? []) {
          for (const m of n.modules) this.inc({ node: n.name, module: m.name }, Math.max(0, m.restarts));
        }
      },
    });
    new Gauge({
      name: "mesh_consumer_failing",
      help: "1 while the consumer's provider says it is failing (from the first failure), else 0; one series per consumer of the fleet, and one per failing login the fleet no longer has.",
      labelNames: ["consumer", "interface", "provider", "login", "node"],
      registers,
      collect() {
        this.reset();
        const s = status();
        if (s === undefined) return;
        const failing = new Set(s.failing.map((f) => `${f.provider} ${f.login}`));
        const known = new Set<string>();
        for (const c of s.consumers) {
          const key = `${c.provider} ${c.login}`;
          known.add(key);
          const labels = {
            consumer: c.consumer,
            interface: c.interface,
            provider: c.provider,
            login: c.login,
            node: c.node,
          };
          this.set(labels, failing.has(key) ? 1 : 0);
        }
        for (const f of s.failing) {
          if (known.has(`${f.provider} ${f.login}`)) continue;
          const labels = {
            consumer: f.consumer,
            interface: f.interface,
            provider: f.provider,
            login: f.login,
            node: f.node ?? "",
          };
          this.set(labels, 1);
        }
      },
    });
    new Gauge({
      name: "mesh_provider_heard",
      help: "1 when the provider answered its node's last ask and that node reports, else 0 (not answering, its node silent, or not heard yet).",
      labelNames: ["provider", "node"],
      registers,
      collect() {
        this.reset();
        const s = status();
        const reporting = new Map((s?.nodes ?? []).map((n) => [n.name, isReporting(n.lastReportAt)]));
        for (const p of s?.providers ?? []) {
          this.set(
            { provider: p.provider, node: p.node },
            p.answered && reporting.get(p.node) === true ? 1 : 0,
          );
        }
      },
    });
    new Gauge({
      name: "mesh_provider_last_heard_timestamp_seconds",
      help: "When the provider last answered its node (seconds since the epoch); absent until it has.",
      labelNames: ["provider", "node"],
      registers,
      collect() {
        this.reset();
        for (const p of status()?.providers ?? []) {
          if (p.answered && p.askedAt !== null)
            this.set({ provider: p.provider, node: p.node }, Date.parse(p.askedAt) / 1000);
        }
      },
    });
    new Gauge({
      name: "mesh_retirement_waiting",
      help: "Consumers of the provider whose retirement waits for a person (`mesh tool <provider> retire list`, then `retire approve`); 0 when none waits.",
      labelNames: ["provider", "node"],
      registers,
      collect() {
        this.reset();
        for (const p of status()?.providers ?? [])
          this.set({ provider: p.provider, node: p.node }, p.waiting?.count ?? 0);
      },
    });
  }

  // The bus: each server answering or not, each stream's copies, read once per scrape.
  #busMetrics(registers: Registry[]): void {
    const snapshot = (): Promise<BusSnapshot> => this.#readBus();
    const active = (): boolean => this.#bus !== undefined;
    new Gauge({
      name: "mesh_bus_server_up",
      help: "1 when the bus server answers (it greets a connection), else 0; one series per server the mesh was given or its cluster named since the controller started.",
      labelNames: ["server"],
      registers,
      async collect() {
        this.reset();
        if (!active()) return;
        for (const [server, up] of (await snapshot()).up) this.set({ server }, up ? 1 : 0);
      },
    });
    new Gauge({
      name: "mesh_bus_jetstream_up",
      help: "1 when JetStream answered the controller's listing of streams within 3 s, else 0.",
      registers,
      async collect() {
        this.reset();
        if (!active()) return;
        this.set((await snapshot()).health?.jetstream === true ? 1 : 0);
      },
    });
    new Gauge({
      name: "mesh_bus_replicas_target",
      help: "The copies the mesh keeps of each stream and KV bucket (3 on a cluster of three or more servers, else 1, unless --replicas says).",
      registers,
      async collect() {
        this.reset();
        if (!active()) return;
        const h = (await snapshot()).health;
        if (h !== undefined) this.set(h.replicasTarget);
      },
    });
    new Gauge({
      name: "mesh_bus_stream_replicas",
      help: "The copies each stream (a KV bucket is one) is configured to keep.",
      labelNames: ["stream"],
      registers,
      async collect() {
        this.reset();
        if (!active()) return;
        for (const st of (await snapshot()).health?.streams ?? [])
          this.set({ stream: st.stream }, st.replicas);
      },
    });
    new Gauge({
      name: "mesh_bus_stream_replicas_current",
      help: "The copies of each stream up to date now: its leader and each replica current and online.",
      labelNames: ["stream"],
      registers,
      async collect() {
        this.reset();
        if (!active()) return;
        for (const st of (await snapshot()).health?.streams ?? [])
          this.set({ stream: st.stream }, st.current);
      },
    });
  }

  #readBus(): Promise<BusSnapshot> {
    const bus = this.#bus;
    const at = Date.now();
    if (this.#busSnapshot !== undefined && at - this.#busSnapshot.at < BUS_SNAPSHOT_MS)
      return this.#busSnapshot.value;
    const value = (async (): Promise<BusSnapshot> => {
      const health = await bus?.health().catch(() => undefined);
      for (const s of health?.servers ?? []) this.#busServers.add(s);
      const servers = [...this.#busServers].sort();
      const answers = await Promise.all(servers.map((s) => probeBusServer(s, bus?.probeTimeoutMs)));
      return { health, up: new Map(servers.map((s, i) => [s, answers[i] === true])) };
    })();
    this.#busSnapshot = { at, value };
    return value;
  }

  /** The Prometheus text exposition of everything on the registry. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
