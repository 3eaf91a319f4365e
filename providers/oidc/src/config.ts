// What is the oidc provider's own to check: the Glewlwyd admin URL's form, the OIDC plugin's name,
// where the admin API key is kept, and what a consumer may ask for (grant types, scopes, redirect
// URIs). The instance name, the URL parsing and the numbers are the kit's (admin-settings.ts).

import {
  AdminSettingError,
  checkHttpAdminSettings,
  positiveSetting,
  type AdminUrlRules,
  type CheckedHttpAdminSettings,
  type HttpAdminSettings,
} from "@mesh/sdk";

/** Where the admin URL is read from when no flag gives it. */
export const ADMIN_URL_ENV = "MESH_OIDC_URL";
/** Where the admin API key file's path is read from (default: beside the provider's state). */
export const KEY_FILE_ENV = "MESH_OIDC_KEY_FILE";
/** Where the OIDC plugin instance's name is read from ("oidc"). */
export const PLUGIN_ENV = "MESH_OIDC_PLUGIN";

/** How a Glewlwyd admin URL looks. */
export const ADMIN_URL_RULES: AdminUrlRules = {
  backend: "Glewlwyd",
  ports: { "http:": 4593, "https:": 443 },
  env: ADMIN_URL_ENV,
  example: "http://<admin>:<password>@<host>:<port>/api",
  needsUser: true,
  needsPassword: true,
};

/**
 * The grant types a consumer may ask for, as OAuth 2.0 names them, and the Glewlwyd
 * `authorization_type` each becomes. Implicit and password grants are left out on purpose: both are
 * deprecated by OAuth 2.0 Security BCP, and neither suits a service.
 */
export const GRANT_TYPES: ReadonlyMap<string, string> = new Map([
  ["client_credentials", "client_credentials"],
  ["authorization_code", "code"],
  ["refresh_token", "refresh_token"],
]);

/**
 * The scopes a consumer may ask for. The module's manifest lists the same (a test holds them
 * together); each must also exist on the server, which the operator makes (`openid` is Glewlwyd's
 * own). Glewlwyd's administration scopes (`g_admin`, `g_profile`) are never among them.
 */
export const ALLOWED_SCOPES: readonly string[] = ["openid", "profile", "email", "api.read", "api.write"];

/** What a consumer gets when it asks for nothing (as the manifest's defaults). */
export const DEFAULT_VALUES = {
  grant_types: ["client_credentials"],
  scopes: ["api.read"],
  redirect_uris: [] as string[],
} as const;

/** The longest redirect URI taken, and the most of them. */
export const REDIRECT_URI_MAX_LENGTH = 2_000;
export const REDIRECT_URIS_MAX = 20;

/**
 * What `createOidcAdapter` is given. The admin URL is `http://<admin>:<password>@<host>:<port>/api`:
 * a Glewlwyd user with the admin scope, and the API prefix. The password is used only to make the
 * provider's API key (at first start, and again when the key stops working). The logger hears the
 * one-time notes (a new API key made, no key file).
 */
export interface OidcAdapterConfig extends HttpAdminSettings {
  /** The OIDC plugin instance whose endpoints the consumers use ("oidc": `/api/oidc/`). */
  readonly plugin?: string | undefined;
  /**
   * Where the admin API key is kept (written 0600, atomically). Undefined: kept in memory only, so
   * each start makes a new key (said once at start).
   */
  readonly keyFile?: string | undefined;
  /** How many secret checks one `holdsMany` runs at once (8). */
  readonly checkConcurrency?: number | undefined;
  /** How many clients one admin read asks for (200, the most Glewlwyd answers). */
  readonly listPage?: number | undefined;
}

/** The checked configuration. */
export interface ResolvedOidcConfig extends CheckedHttpAdminSettings {
  /** `http://<host>:<port>/api` without the admin's user and password. */
  readonly apiUrl: string;
  /** `<apiUrl>/<plugin>`: the issuer, as the plugin's `iss` should say it. */
  readonly issuer: string;
  /** `host:port`, for messages. */
  readonly endpoint: string;
  readonly adminUser: string;
  /** Never put into a message. */
  readonly adminPassword: string;
  readonly plugin: string;
  readonly keyFile: string | undefined;
  readonly checkConcurrency: number;
  readonly listPage: number;
}

const PLUGIN_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

/**
 * Checks the configuration.
 * @throws AdminSettingError naming the setting and the fix, never echoing the password.
 */
export function resolveOidcConfig(config: OidcAdapterConfig): ResolvedOidcConfig {
  const checked = checkHttpAdminSettings(config, ADMIN_URL_RULES);
  const plugin = config.plugin ?? "oidc";
  if (!PLUGIN_PATTERN.test(plugin)) {
    throw new AdminSettingError(
      "plugin",
      `the OIDC plugin name ${JSON.stringify(plugin)} is not usable: give the name of the Glewlwyd ` +
        `OIDC plugin instance (letters, digits, "_" and "-"; "oidc" by default) in ${PLUGIN_ENV}`,
    );
  }
  const { admin, baseUrl } = checked;
  return {
    ...checked,
    apiUrl: baseUrl,
    issuer: `${baseUrl}/${plugin}`,
    endpoint: admin.endpoint,
    adminUser: admin.user,
    adminPassword: admin.password,
    plugin,
    keyFile: config.keyFile,
    checkConcurrency: positiveSetting("checkConcurrency", config.checkConcurrency, 8),
    listPage: Math.min(positiveSetting("listPage", config.listPage, 200), 200),
  };
}
