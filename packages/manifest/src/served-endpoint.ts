// Where a provider really serves against where the fleet tells its consumers to connect. A running
// provider reports where it serves (its admin URL's host and port); a consumer of a provider whose
// fleet entry names no `endpoint:` is given that address, not the manifest's default (another
// server's 5432, maybe). Where the fleet does name one (a public address, maybe) it is kept, and a
// disagreement with the admin URL is said: by `mesh check` and `mesh plan` when they can read the
// admin URL, and by `mesh status` from what each provider reports.
import type { Fleet } from "./fleet.ts";
import type { Manifest } from "./manifest.ts";
import { DEFAULT_ENDPOINT_HOST } from "./plan.ts";
import type { Endpoint, Plan } from "./plan-types.ts";
import { servedEndpointSchema } from "./served-address.ts";

export { servedEndpointSchema };

/** A host and port, as a consumer's URL carries them. */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** A provider whose consumers are told one address while its admin URL points at another. */
export interface EndpointDisagreement {
  readonly provider: string;
  readonly interface: string;
  /** Where consumers are told to connect (the fleet's `endpoint:`, else the manifest's default). */
  readonly fleetSays: string;
  /** Where its admin URL points: where the provider makes their logins. */
  readonly providerServes: string;
  /** Whether the fleet names an `endpoint:` (a public address maybe) or leaves the manifest's default. */
  readonly endpointWritten: boolean;
  readonly line?: number | undefined;
}

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$/i;

/** What a report says a provider serves, when it is well formed; undefined otherwise. Never throws. */
export function servedEndpointOf(value: unknown): HostPort | undefined {
  const parsed = servedEndpointSchema.safeParse(value);
  return parsed.success ? { host: parsed.data.host, port: parsed.data.port } : undefined;
}

/**
 * `endpoint` (a plan's) as a provider that serves at `serves` is reached: its port, and its host
 * unless that is the loopback (the provider's own machine, which consumers elsewhere reach by the
 * address the plan already names).
 */
export function endpointAtServed(endpoint: Endpoint, serves: HostPort): Endpoint {
  const { defaulted: _defaulted, ...rest } = endpoint;
  return { ...rest, host: LOOPBACK.test(serves.host) ? endpoint.host : serves.host, port: serves.port };
}

/**
 * `plan` with each endpoint the fleet left to the manifest's default (`defaulted`) replaced by where
 * its provider reports it serves (`served`, by provider module): consumers are given the address
 * their logins are really made at. Instances without a report keep the default. Pure.
 */
export function withServedEndpoints(plan: Plan, served: ReadonlyMap<string, HostPort>): Plan {
  if (served.size === 0) return plan;
  let changed = false;
  const instances = plan.instances.map((instance) => {
    const serves = served.get(instance.provider);
    if (instance.endpoint?.defaulted !== true || serves === undefined) return instance;
    changed = true;
    return { ...instance, endpoint: endpointAtServed(instance.endpoint, serves) };
  });
  return changed ? { ...plan, instances } : plan;
}

/** `host:port`, with an IPv6 address in brackets. */
export function formatHostPort(at: HostPort): string {
  return `${at.host.includes(":") && !at.host.startsWith("[") ? `[${at.host}]` : at.host}:${at.port}`;
}

/**
 * The host and port an admin URL points at, `defaultPort` when it names none; undefined when it is
 * not a URL or names no host (a Unix socket). Never throws, never says the URL.
 */
export function adminUrlServes(adminUrl: string, defaultPort: number | undefined): HostPort | undefined {
  let url: URL;
  try {
    url = new URL(adminUrl.trim());
  } catch {
    return undefined;
  }
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || url.searchParams.get("host") || "";
  if (host === "" || host.startsWith("/")) return undefined;
  const port = Number(url.port || url.searchParams.get("port") || defaultPort);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) return undefined;
  return { host, port };
}

/**
 * Whether `told` (where consumers connect) and `serves` (the admin URL's) are different servers:
 * the ports differ, or both hosts are named and neither is the loopback (a loopback admin URL is
 * the provider's own machine, which consumers elsewhere reach by its address).
 */
export function disagrees(told: HostPort, serves: HostPort): boolean {
  if (told.port !== serves.port) return true;
  if (LOOPBACK.test(told.host) || LOOPBACK.test(serves.host)) return false;
  return told.host.toLowerCase() !== serves.host.toLowerCase();
}

/**
 * Every provider of `fleet` whose consumers are told another address than its admin URL points
 * at, for the providers whose admin URL `adminUrlOf` can give (undefined: cannot know).
 */
export function endpointDisagreements(
  fleet: Fleet,
  manifests: ReadonlyMap<string, Manifest>,
  adminUrlOf: (module: string) => string | undefined,
): EndpointDisagreement[] {
  const out: EndpointDisagreement[] = [];
  for (const m of fleet.modules.values()) {
    const manifest = manifests.get(m.name);
    if (manifest === undefined || m.admin === undefined) continue;
    const url = adminUrlOf(m.name);
    if (url === undefined) continue;
    for (const provided of manifest.provides.values()) {
      const template = provided.endpoint;
      if (template === undefined) continue;
      const port = m.endpoint?.port ?? template.port;
      const serves = adminUrlServes(url, template.port);
      if (port === undefined || serves === undefined) continue;
      const told = {
        host: m.endpoint?.host ?? template.host ?? fleet.nodes.get(m.node)?.address ?? DEFAULT_ENDPOINT_HOST,
        port,
      };
      if (!disagrees(told, serves)) continue;
      out.push({
        provider: m.name,
        interface: provided.interface,
        fleetSays: formatHostPort(told),
        providerServes: formatHostPort(serves),
        endpointWritten: m.endpoint !== undefined,
        line: fleet.lines.get(`modules.${m.name}`) ?? m.line,
      });
    }
  }
  return out;
}
