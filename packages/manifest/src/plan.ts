import { analyzeFleet, FleetCheckError, type Binding } from "./check-fleet.ts";
import type { Fleet } from "./fleet.ts";
import type { Manifest } from "./manifest.ts";
import type { Endpoint, Plan, PlanEntry, PlanInstance } from "./plan-types.ts";

export type { Endpoint, Plan, PlanEntry, PlanInstance } from "./plan-types.ts";

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
        ...(module.endpoint === undefined ? { defaulted: true as const } : {}),
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
          ...(provided.alternatesLogins === true ? { alternates: true as const } : {}),
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
