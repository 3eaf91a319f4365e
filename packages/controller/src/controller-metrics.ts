// The controller's Prometheus metrics: what it serves (nodes, modules, consumers, failing consumers,
// read from its status at each scrape) and what it did (reloads, deliveries published, passwords
// minted, rotations, counted as they happen), on a registry of its own, never prom-client's global one.
import { Counter, Gauge, Registry, collectDefaultMetrics } from "prom-client";
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

  /** Reads nodes, modules and consumers from `status` at every scrape (the controller's `status`). */
  follow(status: () => ControllerStatus): void {
    this.#status = status;
  }

  /** The Prometheus text exposition of everything on the registry. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
