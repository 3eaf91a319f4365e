import type { ProviderAdapter } from "./adapter.ts";
import type { AdminUrlRules } from "./admin-settings.ts";
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
   * every mark it writes. The harness runs it inside the guard (adapter-guard.ts).
   */
  createAdapter(config: { adminUrl: string; instance: string; logger: Logger }): ProviderAdapter;
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
    createAdapter,
  };
}
