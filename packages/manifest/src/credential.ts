import type { Endpoint, Plan, PlanEntry } from "./plan-types.ts";
import { secondLogin } from "./login.ts";
import { credentialPath, slotSecretPath } from "./state-paths.ts";
import { fillTemplate } from "./template.ts";

/**
 * A consumer's credential file: everything it needs to connect but the password itself, which
 * it reads from `passwordFile`. The URL carries the login and never the password.
 */
export interface Credential {
  readonly interface: string;
  readonly provider: string;
  readonly login: string;
  readonly passwordFile: string;
  /** Undefined when the provider's manifest declares no endpoint. */
  readonly endpoint?: {
    readonly scheme: string;
    readonly host: string;
    readonly port?: number;
    readonly path: string;
  };
  /** Ready to use with the password added (`postgresql://notes_postgres@127.0.0.1:5432/notes`). */
  readonly url?: string;
  /**
   * The endpoint's named URLs, without the login (`{ "issuer": "http://10.0.0.2:4593/api/oidc" }`);
   * absent when its manifest names none.
   */
  readonly links?: Readonly<Record<string, string>>;
  /** The values the consumer asked for and those derived for it (its database name, its key prefix). */
  readonly values: Readonly<Record<string, unknown>>;
}

/** A credential file to write: where, and what. */
export interface CredentialFile {
  readonly interface: string;
  /** `credentialPath(stateDir, consumer, interface)`. */
  readonly path: string;
  readonly contents: Credential;
}

function urlHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

/**
 * The credential of `entry`'s consumer, with its password file under the consumer node's
 * `stateDir`, given where the provider is reached (the plan instance's `endpoint`, or one the
 * controller learnt at run time).
 * @throws TemplateError when the endpoint names a value the consumer has not got; StateDirError.
 */
export function credentialFor(
  entry: PlanEntry,
  endpoint: Endpoint | undefined,
  stateDir: string,
): Credential {
  const values = { ...entry.values, ...entry.derived };
  // Where logins alternate, the one in use and its own password file change together.
  const slot = entry.alternates === true ? entry.slot : undefined;
  const login = slot === 1 ? secondLogin(entry.login) : entry.login;
  const base = {
    interface: entry.interface,
    provider: entry.provider,
    login,
    passwordFile: slotSecretPath(stateDir, entry.consumer, entry.interface, slot),
  };
  if (!endpoint) return { ...base, values };
  // The database, bucket and other names derived from the login stay those of the first login.
  const vars = { ...values, login };
  const path = fillTemplate(endpoint.path, vars, encodeURIComponent);
  const query = Object.entries(endpoint.query)
    .map(([k, t]) => `${encodeURIComponent(k)}=${fillTemplate(t, vars, encodeURIComponent)}`)
    .join("&");
  const port = endpoint.port === undefined ? "" : `:${endpoint.port}`;
  const url = `${endpoint.scheme}://${encodeURIComponent(login)}@${urlHost(endpoint.host)}${port}${path}${query ? `?${query}` : ""}`;
  const links = Object.entries(endpoint.links ?? {}).map(
    ([name, template]) =>
      [
        name,
        `${endpoint.scheme}://${urlHost(endpoint.host)}${port}${fillTemplate(template, vars, encodeURIComponent)}`,
      ] as const,
  );
  return {
    ...base,
    endpoint: {
      scheme: endpoint.scheme,
      host: endpoint.host,
      ...(endpoint.port === undefined ? {} : { port: endpoint.port }),
      path,
    },
    url,
    ...(links.length === 0 ? {} : { links: Object.fromEntries(links) }),
    values,
  };
}

/**
 * The credential files the agent on `consumer`'s node writes: one per need of `consumer` in
 * `plan`, each with the provider's endpoint from the plan.
 * @throws TemplateError; StateDirError when `stateDir` is not absolute.
 */
export function credentialsFor(plan: Plan, consumer: string, stateDir: string): CredentialFile[] {
  const files: CredentialFile[] = [];
  for (const instance of plan.instances) {
    for (const entry of instance.consumers) {
      if (entry.consumer !== consumer) continue;
      files.push({
        interface: entry.interface,
        path: credentialPath(stateDir, consumer, entry.interface),
        contents: credentialFor(entry, instance.endpoint, stateDir),
      });
    }
  }
  return files.sort((a, b) => (a.interface < b.interface ? -1 : a.interface > b.interface ? 1 : 0));
}
