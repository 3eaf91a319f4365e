// The providers `mesh provider <name>` can run. Each is loaded only when asked for, so `mesh tool`
// does not pay for every backend's client library, and one provider's trouble cannot break another.

import type { ProviderModule } from "@mesh/sdk";

/** The names `mesh provider` takes. */
export const PROVIDER_NAMES = ["postgres", "redis", "mariadb", "s3", "oidc"] as const;

/** One of `PROVIDER_NAMES`. */
export type ProviderName = (typeof PROVIDER_NAMES)[number];

const LOADERS: Readonly<Record<ProviderName, () => Promise<ProviderModule>>> = {
  postgres: async () => (await import("@mesh/provider-postgres")).provider,
  redis: async () => (await import("@mesh/provider-redis")).provider,
  mariadb: async () => (await import("@mesh/provider-mariadb")).provider,
  s3: async () => (await import("@mesh/provider-s3")).provider,
  oidc: async () => (await import("@mesh/provider-oidc")).provider,
};

/** Loads the named provider's description (its `provider` export). */
export function loadProvider(name: ProviderName): Promise<ProviderModule> {
  return LOADERS[name]();
}
