// Where each provider says it serves its consumers (its admin URL's host and port), as its node
// reports it: a consumer of a provider whose fleet entry names no `endpoint:` is given that address
// instead of its manifest's default (which may be another server). Kept in the desired-state bucket
// as well, so a controller that starts or takes over delivers the same address before the first
// report comes, and no app is moved to the default and back.
import type { BusLogger, BusState } from "@mesh/bus";
import {
  formatHostPort,
  servedEndpointOf,
  withServedEndpoints,
  type HostPort,
  type Plan,
} from "@mesh/manifest";
import type { FleetPlan } from "./fleet-plan.ts";
import type { NodeReport } from "./node-reports.ts";

/** The desired-state key under which where `module` serves is kept. */
export const servedKey = (module: string): string => `served.${module}`;

/** What each provider serves, learnt from the nodes' reports and kept in the bus. */
export class ServedEndpoints {
  readonly #desired: BusState<unknown>;
  readonly #log: BusLogger;
  readonly #served = new Map<string, HostPort>();
  // Providers whose kept address was read (or found missing) from the bus: read once each.
  readonly #read = new Set<string>();

  constructor(desired: BusState<unknown>, log: BusLogger) {
    this.#desired = desired;
    this.#log = log;
  }

  /** Where `module` serves, as last learnt; undefined when unknown. */
  get(module: string): HostPort | undefined {
    return this.#served.get(module);
  }

  /**
   * The providers of `fleet` whose address this report changes: only a provider the fleet places
   * on the reporting node is believed (a node speaks for its own modules), and only with an
   * endpoint the fleet left to the manifest (`defaulted`) does it change anything delivered.
   */
  learn(report: NodeReport, fleet: FleetPlan): string[] {
    const changed: string[] = [];
    for (const said of report.providers ?? []) {
      const serves = servedEndpointOf(said.serves);
      if (serves === undefined) continue;
      if (!fleet.modules.some((m) => m.name === said.module && m.node === report.node)) continue;
      const before = this.#served.get(said.module);
      this.#read.add(said.module);
      if (before?.host === serves.host && before.port === serves.port) continue;
      this.#served.set(said.module, serves);
      if (!fleet.plan.instances.some((i) => i.provider === said.module && i.endpoint?.defaulted === true))
        continue;
      changed.push(said.module);
      this.#log.info(
        `${said.module} serves at ${formatHostPort(serves)} (its admin URL)` +
          (before === undefined ? "" : `, no longer ${formatHostPort(before)}`) +
          `: its consumers are given that address, as the fleet names no endpoint: for it`,
      );
    }
    return changed;
  }

  /**
   * Keeps where `modules` serve in the bus (best effort: the next report says it again), so a
   * controller that starts next delivers the same address at once. Only a leader writes.
   */
  async keep(modules: readonly string[]): Promise<void> {
    for (const module of modules) {
      const serves = this.#served.get(module);
      if (serves === undefined) continue;
      await this.#desired
        .put(servedKey(module), { host: serves.host, port: serves.port })
        .catch((err: unknown) => {
          this.#log.warn(
            `where ${module} serves could not be kept in the bus (${(err as Error).message}); ` +
              "it is kept when its node reports it again",
          );
        });
    }
  }

  /**
   * `fleet`'s plan with each defaulted endpoint at where its provider serves: what deliveries
   * carry. A provider not heard of since this controller started is looked up once in the bus.
   */
  async plan(fleet: FleetPlan): Promise<Plan> {
    for (const i of fleet.plan.instances) {
      if (i.endpoint?.defaulted !== true || this.#read.has(i.provider)) continue;
      this.#read.add(i.provider);
      const kept = servedEndpointOf(await this.#desired.get(servedKey(i.provider)).catch(() => undefined));
      if (kept !== undefined && !this.#served.has(i.provider)) this.#served.set(i.provider, kept);
    }
    return withServedEndpoints(fleet.plan, this.#served);
  }

  /** The nodes of `fleet` with a consumer of one of `providers`: whose deliveries change. */
  static consumerNodes(fleet: FleetPlan, providers: readonly string[]): string[] {
    const nodes = new Set<string>();
    for (const i of fleet.plan.instances) {
      if (!providers.includes(i.provider)) continue;
      for (const c of i.consumers) nodes.add(c.consumerNode);
    }
    return [...nodes].sort();
  }
}
