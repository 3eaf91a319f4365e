/**
 * @mesh/provider-oidc: the `oidc-client` provider. Each consumer gets a confidential client on a
 * Glewlwyd OpenID Connect server, whose client_id is the login the mesh derived and whose secret is
 * the password it minted.
 *
 * ```ts
 * import { runProvisioner } from "@mesh/sdk";
 * import { createOidcAdapter } from "@mesh/provider-oidc";
 * const adapter = createOidcAdapter({
 *   adminUrl: process.env.MESH_OIDC_URL ?? "",
 *   instance: "main",
 *   keyFile: "/var/lib/mesh/oidc-admin.key",
 * });
 * const handle = runProvisioner("oidc-client", adapter, { receives: "/run/mesh/oidc-client.json" });
 * ```
 */
import { isAbsolute, join } from "node:path";
import { isModuleName, moduleHomePath } from "@mesh/manifest";
import { defineProvider } from "@mesh/sdk";
import { createOidcAdapter } from "./adapter.ts";
import { ADMIN_URL_RULES, KEY_FILE_ENV, PLUGIN_ENV } from "./config.ts";

export {
  createOidcAdapter,
  fetchHttpClient,
  OidcClientAdapter,
  ReadWriteLock,
  type HttpClient,
} from "./adapter.ts";
export { DEFAULT_VALUES, resolveOidcConfig, type OidcAdapterConfig } from "./config.ts";

/**
 * Where the admin API key is kept: MESH_OIDC_KEY_FILE when set, else in the module's home when the
 * agent runs it (`<MESH_STATE_DIR>/modules/<MESH_MODULE>/home/glewlwyd-api.key`: the one directory
 * of the mesh's that the provider's own user may write), else nowhere.
 */
export function keyFileOf(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const explicit = env[KEY_FILE_ENV];
  if (explicit !== undefined && explicit !== "") return explicit;
  const [stateDir, module] = [env["MESH_STATE_DIR"], env["MESH_MODULE"]];
  if (stateDir === undefined || !isAbsolute(stateDir) || !isModuleName(module)) return undefined;
  return join(moduleHomePath(stateDir, module), "glewlwyd-api.key");
}

/** How `mesh provider oidc` finds and starts this provider. */
export const provider = defineProvider(
  "oidc",
  "oidc-client",
  ADMIN_URL_RULES,
  ({ adminUrl, instance, logger }) =>
    createOidcAdapter({
      adminUrl,
      instance,
      logger,
      keyFile: keyFileOf(process.env),
      plugin: process.env[PLUGIN_ENV] || undefined,
    }),
);
