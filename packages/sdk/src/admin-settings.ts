// The settings every provider checks before it touches its backend: the instance name, the admin
// URL and its numeric knobs. Checked once, here, so each mistake is said in the same words (naming
// the setting, the flag and the variable) and never with the admin's password in it.

import type { Logger } from "./collaborators.ts";
import { redactUrl } from "./redact.ts";

/**
 * What a provider instance may be named: 1–63 letters, digits, `_`, `.` and `-`, starting with a
 * letter or digit. It is written into every mark, where `:` separates it from the login, and into
 * names of the backend's own (an ACL user, an application name), which take no space or quote.
 */
export const INSTANCE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

/** A provider setting cannot be used. The message names the setting and the fix, never the password. */
export class AdminSettingError extends Error {
  override name = "AdminSettingError";
  constructor(
    /** The setting at fault, as the provider's config names it ("adminUrl", "instance", "poolSize"). */
    readonly setting: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * Returns `instance` when it matches `INSTANCE_PATTERN`.
 * @throws AdminSettingError (setting "instance") when it does not.
 */
export function assertInstance(instance: unknown): string {
  if (typeof instance === "string" && INSTANCE_PATTERN.test(instance)) return instance;
  throw new AdminSettingError(
    "instance",
    `provider instance name ${JSON.stringify(instance)} is not usable: it names this provider in every ` +
      `mark it writes, so give 1–63 characters of letters, digits, "_", "." and "-", starting with a ` +
      "letter or digit (--instance or MESH_INSTANCE)",
  );
}

/** How one provider's admin URL looks, for `parseAdminUrl` and its messages. */
export interface AdminUrlRules {
  /** The backend as a person names it ("Postgres"). */
  readonly backend: string;
  /** The schemes accepted, each with its default port (`{ "https:": 443, "http:": 80 }`). */
  readonly ports?: Readonly<Record<string, number>>;
  /** Or: the schemes accepted, with their colon ("postgresql:"), all with `defaultPort`. */
  readonly schemes?: readonly string[];
  readonly defaultPort?: number;
  /** The environment variable the URL is read from when no flag gives it. */
  readonly env: string;
  /** The URL's form, shown in every refusal ("postgresql://<admin>:<password>@<host>:<port>/<database>"). */
  readonly example: string;
  /** Whether the URL must name the admin user (true). */
  readonly needsUser?: boolean;
  /** Whether the URL must carry a password (false). */
  readonly needsPassword?: boolean;
}

/** An admin URL, checked and taken apart. */
export interface AdminUrl {
  /** The URL as given, trimmed: what a vendor client is handed when it takes a URL. */
  readonly text: string;
  readonly url: URL;
  /** The host, without the brackets of an IPv6 address. */
  readonly host: string;
  readonly port: number;
  /** The admin user, %-decoded; "" when the URL names none. */
  readonly user: string;
  /** The admin's password, %-decoded; "" when the URL carries none. Never put into a message. */
  readonly password: string;
  /** The path without its leading `/`, %-decoded ("" when none). */
  readonly path: string;
  /** `host:port`, for messages: never the URL, which holds the password. */
  readonly endpoint: string;
}

/**
 * An `AdminSettingError` on the admin URL, in the words every refusal of it uses. The URL is shown
 * (password masked) only when it parses as a URL: a string that does not may be a password pasted
 * in the wrong place.
 */
export function adminUrlError(
  rules: AdminUrlRules,
  raw: string,
  why: string,
  cause?: unknown,
): AdminSettingError {
  const text = raw.trim();
  const shown = URL.canParse(text) ? ` ${JSON.stringify(redactUrl(text))}` : "";
  return new AdminSettingError(
    "adminUrl",
    `the ${rules.backend} admin URL${shown} ${why}; give ${rules.example} with --admin-url or ${rules.env}`,
    cause === undefined ? undefined : { cause },
  );
}

/**
 * Checks an admin URL and takes it apart: scheme, host, port (`rules.defaultPort` when none), user
 * and password, %-decoded.
 * @throws AdminSettingError (setting "adminUrl") naming the flag and the variable, never the password.
 */
export function parseAdminUrl(raw: unknown, rules: AdminUrlRules): AdminUrl {
  const text = typeof raw === "string" ? raw.trim() : "";
  if (text === "") {
    throw new AdminSettingError(
      "adminUrl",
      `no ${rules.backend} admin URL: give ${rules.example} with --admin-url or ${rules.env}`,
    );
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch (err) {
    throw adminUrlError(rules, text, "is not a URL", err);
  }
  const schemes = [...Object.keys(rules.ports ?? {}), ...(rules.schemes ?? [])];
  if (!schemes.includes(url.protocol)) {
    throw adminUrlError(
      rules,
      text,
      `has the scheme ${JSON.stringify(url.protocol)}, not ${schemes.join(" or ")}`,
    );
  }
  const decode = (part: string, what: string): string => {
    try {
      return decodeURIComponent(part);
    } catch (err) {
      throw adminUrlError(rules, text, `has a ${what} that is not properly %-encoded`, err);
    }
  };
  // libpq's `?host=` and `?port=` stand in for the authority's, which a Unix socket path cannot fill.
  const host = url.hostname.replace(/^\[(.*)\]$/, "$1") || url.searchParams.get("host") || "";
  if (host === "") throw adminUrlError(rules, text, "names no host");
  const portText =
    url.port || url.searchParams.get("port") || String(rules.ports?.[url.protocol] ?? rules.defaultPort);
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw adminUrlError(rules, text, "has no valid port");
  const user = decode(url.username, "user name");
  if (user === "" && rules.needsUser !== false) throw adminUrlError(rules, text, "names no admin user");
  const password = decode(url.password, "password");
  if (password === "" && rules.needsPassword === true) {
    throw adminUrlError(rules, text, "has no password: the admin must authenticate");
  }
  return {
    text,
    url,
    host,
    port,
    user,
    password,
    path: decode(url.pathname.replace(/^\//, ""), "path"),
    endpoint: `${host.includes(":") ? `[${host}]` : host}:${port}`,
  };
}

/** What every provider's `create…Adapter` is given; a provider's own config adds its knobs. */
export interface AdminSettings {
  /** Where the adapter reaches its backend as an admin. Its password is never said. */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
  /** Where the adapter says what it notices on its own (a server gone and back). */
  readonly logger?: Logger | undefined;
}

/** `AdminSettings` checked: the instance name, and the admin URL taken apart. */
export interface CheckedAdminSettings {
  readonly instance: string;
  readonly admin: AdminUrl;
}

/**
 * Checks the settings every provider has: the instance name (`assertInstance`) and the admin URL
 * (`parseAdminUrl` with `rules`).
 * @throws AdminSettingError naming the setting and the fix, never the password.
 */
export function checkAdminSettings(settings: AdminSettings, rules: AdminUrlRules): CheckedAdminSettings {
  return { instance: assertInstance(settings.instance), admin: parseAdminUrl(settings.adminUrl, rules) };
}

/**
 * `value` when it is a positive whole number, `fallback` when it is undefined.
 * @throws AdminSettingError naming `setting` otherwise.
 */
export function positiveSetting(setting: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value <= 0) {
    throw new AdminSettingError(setting, `${setting} must be a positive whole number, not ${String(value)}`);
  }
  return value;
}

/** What a provider whose backend has an HTTP admin API is given, beside the settings every provider has. */
export interface HttpAdminSettings extends AdminSettings {
  /** How long one HTTP request to the backend may take (15 000 ms). */
  readonly requestTimeoutMs?: number | undefined;
}

/** `HttpAdminSettings` checked. */
export interface CheckedHttpAdminSettings extends CheckedAdminSettings {
  /** The admin URL without its user, password, query and fragment, and with no `/` at its end. */
  readonly baseUrl: string;
  readonly requestTimeoutMs: number;
}

/**
 * `checkAdminSettings` for a backend reached over HTTP: also the URL its requests go to, which never
 * carries the password, and the request timeout.
 * @throws AdminSettingError naming the setting and the fix, never the password.
 */
export function checkHttpAdminSettings(
  settings: HttpAdminSettings,
  rules: AdminUrlRules,
): CheckedHttpAdminSettings {
  const checked = checkAdminSettings(settings, rules);
  const { url } = checked.admin;
  return {
    ...checked,
    baseUrl: `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`,
    requestTimeoutMs: positiveSetting("requestTimeoutMs", settings.requestTimeoutMs, 15_000),
  };
}
