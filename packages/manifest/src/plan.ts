import { analyzeFleet, FleetCheckError, type Binding } from "./check-fleet.ts";
import type { Fleet } from "./fleet.ts";
import type { Manifest } from "./manifest.ts";

/** Where a consumer reaches a provider: the manifest's endpoint with its host settled. */
export interface Endpoint {
  readonly scheme: string;
  readonly host: string;
  readonly port?: number | undefined;
  /** A template (`"/{name}"`), filled per consumer. */
  readonly path: string;
  /** Query parameters, each value a template. */
  readonly query: Readonly<Record<string, string>>;
  /** Named path templates on the same host and port (see `EndpointTemplate.links`); absent when none. */
  readonly links?: Readonly<Record<string, string>> | undefined;
}

/** One consumer of one provided interface, with everything the mesh derived for it. */
export interface PlanEntry {
  readonly consumer: string;
  readonly consumerNode: string;
  /** The consumer node's address, when the fleet gives one. */
  readonly consumerAt?: string | undefined;
  readonly interface: string;
  readonly login: string;
  /** What the consumer asks for: its manifest's values, overridden by the fleet file's. */
  readonly values: Readonly<Record<string, unknown>>;
  /** What the mesh derived for it: spec defaults it did not override, and the provider's `derives`. */
  readonly derived: Readonly<Record<string, unknown>>;
  readonly provider: string;
  readonly providerNode: string;
}

/** One interface one provider module provides, and every consumer it serves (maybe none). */
export interface PlanInstance {
  readonly provider: string;
  readonly node: string;
  readonly interface: string;
  /** Undefined when the provider's manifest declares no endpoint. */
  readonly endpoint?: Endpoint | undefined;
  readonly consumers: readonly PlanEntry[];
}

/** What the controller delivers: every provided interface instance with its consumers. */
export interface Plan {
  /** Sorted by provider, then interface; consumers by name. */
  readonly instances: readonly PlanInstance[];
}

/** Where a provider's endpoint host falls back to when neither manifest nor node gives one. */
export const DEFAULT_ENDPOINT_HOST = "127.0.0.1";

const byName = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Derives the plan of `fleet`: for each provided interface instance, its consumers with their
 * node, login, values and derived values. Pure and deterministic: the same fleet and manifests
 * give the same plan, in the same order.
 * @throws FleetCheckError with every problem `checkFleet` finds; a plan is never derived from a
 * fleet that does not hold together.
 */
export function derivePlan(fleet: Fleet, manifests: ReadonlyMap<string, Manifest>): Plan {
  const { problems, bindings } = analyzeFleet(fleet, manifests);
  if (problems.length > 0) throw new FleetCheckError(problems);
  const served = new Map<string, Binding[]>();
  for (const b of bindings) {
    const key = `${b.provider.name} ${b.interface}`;
    const list = served.get(key);
    if (list) list.push(b);
    else served.set(key, [b]);
  }
  const instances: PlanInstance[] = [];
  for (const module of fleet.modules.values()) {
    const manifest = manifests.get(module.name);
    if (!manifest) continue;
    for (const provided of manifest.provides.values()) {
      const template = provided.endpoint;
      const endpoint: Endpoint | undefined = template && {
        scheme: template.scheme,
        host:
          module.endpoint?.host ??
          template.host ??
          fleet.nodes.get(module.node)?.address ??
          DEFAULT_ENDPOINT_HOST,
        port: module.endpoint?.port ?? template.port,
        path: template.path,
        query: Object.fromEntries(template.query),
        ...(template.links.size === 0 ? {} : { links: Object.fromEntries(template.links) }),
      };
      const consumers: PlanEntry[] = (served.get(`${module.name} ${provided.interface}`) ?? [])
        .map((b) => ({
          consumer: b.consumer.name,
          consumerNode: b.consumer.node,
          consumerAt: fleet.nodes.get(b.consumer.node)?.address,
          interface: b.interface,
          login: b.login,
          values: b.values,
          derived: b.derived,
          provider: module.name,
          providerNode: module.node,
        }))
        .sort((a, b) => byName(a.consumer, b.consumer));
      instances.push({
        provider: module.name,
        node: module.node,
        interface: provided.interface,
        endpoint,
        consumers,
      });
    }
  }
  instances.sort((a, b) => byName(a.provider, b.provider) || byName(a.interface, b.interface));
  return { instances };
}
