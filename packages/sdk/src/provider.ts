import type { ProviderAdapter } from "./adapter.ts";
import { servedEndpointOf } from "@mesh/manifest";
import { parseAdminUrl, type AdminUrlRules } from "./admin-settings.ts";
import type { Logger } from "./collaborators.ts";

/** How a provider package describes itself to `mesh provider <name>` and to its own entry point. */
export interface ProviderModule {
  /** As in `mesh provider <name>`. */
  readonly name: string;
  /** The interface it provides, as in its manifest's `provides`. */
  readonly interface: string;
  /** The environment variable that holds the admin URL when no flag gives it. */
  readonly adminUrlEnv: string;
  /** An example admin URL for help texts (no real password). */
  readonly adminUrlExample: string;
  /**
   * Makes the adapter (and the vendor client it speaks through). `instance` names this provider in
   * every mark it writes. The harness runs it inside the guard (adapter-guard.ts). `emit` announces
   * one of the module's own events (its manifest's `emits`) on its bus, best effort: it never
   * throws, and does nothing when the provider runs without a bus.
   */
  /**
   * Where a provider with this admin URL serves its consumers: the URL's host and port (the
   * scheme's default port when it names none); undefined when it names no host one can connect to
   * (a Unix socket) or is not a valid admin URL. Never throws, never says the URL.
   */
  serves?(adminUrl: string): { readonly host: string; readonly port: number } | undefined;
  createAdapter(config: {
    adminUrl: string;
    instance: string;
    logger: Logger;
    emit?: ((localName: string, body: Readonly<Record<string, unknown>>) => void) | undefined;
  }): ProviderAdapter;
}

/**
 * A provider's description from its admin URL's rules: the variable and the example a help text
 * shows are the ones its refusals name.
 */
export function defineProvider(
  name: string,
  iface: string,
  adminUrl: AdminUrlRules,
  createAdapter: ProviderModule["createAdapter"],
): ProviderModule {
  return {
    name,
    interface: iface,
    adminUrlEnv: adminUrl.env,
    adminUrlExample: adminUrl.example,
    serves: (url) => {
      try {
        const parsed = parseAdminUrl(url, adminUrl);
        return servedEndpointOf({ host: parsed.host, port: parsed.port });
      } catch {
        return undefined;
      }
    },
    createAdapter,
  };
}
