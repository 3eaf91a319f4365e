// A provider's settings, from its command line's flags and its environment (what the agent sets),
// each one checked, with every problem said at once and how to fix it.

import { isAbsolute } from "node:path";
import { actionJournalPath } from "./action-journal.ts";
import { DEFAULT_EVERY_MS, DEFAULT_VERIFY_EVERY_MS } from "./defaults.ts";
import { InvalidDurationError, parseDuration } from "./duration.ts";
import { parseListenAddress } from "./metrics.ts";
import { metricsUrlPath } from "./metrics-url.ts";
import { MODULE_BUS_VARIABLES } from "./module-bus.ts";
import type { ProviderModule } from "./provider.ts";
import { isServerUrl, redactUrl } from "./redact.ts";

/** What `mesh provider` was given on its command line; each one beats its environment variable. */
export interface ProviderFlags {
  readonly receives?: string | undefined;
  readonly secretsDir?: string | undefined;
  readonly adminUrl?: string | undefined;
  readonly control?: string | undefined;
  readonly instance?: string | undefined;
  readonly every?: string | undefined;
  readonly verifyEvery?: string | undefined;
  readonly metrics?: string | undefined;
}

/** A provider's settings, read and checked. */
export interface ProviderSettings {
  readonly receives: string;
  /** MESH_SECRETS_DIR (the agent sets it) or `--secrets-dir`; absent: the contributions file's directory. */
  readonly secretsDir?: string | undefined;
  readonly adminUrl: string;
  readonly control: string | undefined;
  readonly instance: string;
  readonly every: number;
  readonly verifyEvery: number;
  /** HOST:PORT for /metrics; none when absent. */
  readonly metrics?: string | undefined;
  /** `<MESH_STATE_DIR>/modules/<MESH_MODULE>/home/metrics.url` when run by the agent with metrics; absent otherwise. */
  readonly metricsUrlFile?: string | undefined;
  /** `<MESH_STATE_DIR>/modules/<MESH_MODULE>/home/actions.jsonl` when run by the agent; absent otherwise. */
  readonly journal?: string | undefined;
  /** The node it runs on (MESH_NODE), said in standings; absent when not set. */
  readonly node?: string | undefined;
  /** MESH_FAILING_AFTER; absent for the harness's 5 min. */
  readonly failingAfter?: number | undefined;
  /** MESH_SAY_AGAIN_EVERY; absent for the harness's 15 min. */
  readonly sayAgainEvery?: number | undefined;
  /** MESH_ROTATION_GRACE: how long a rotated-out password stays valid; absent for the harness's 2 min. */
  readonly rotationGrace?: number | undefined;
  /** The module's bus variables when the agent gave it a bus credential (see `busEnvOf`). */
  readonly bus?: Readonly<Record<string, string>> | undefined;
}

/** What a provider process is given is missing or wrong; `problems` lists each, with its fix. */
export class ProviderSettingsError extends Error {
  override name = "ProviderSettingsError";
  constructor(
    readonly provider: string,
    readonly problems: readonly string[],
  ) {
    super(`the ${provider} provider cannot start:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}

/**
 * Reads a provider's settings from `flags` (when run as `mesh provider`) and `env`: MESH_RECEIVES,
 * MESH_SECRETS_DIR, the provider's admin URL variable, MESH_CONTROL, MESH_INSTANCE, MESH_EVERY, MESH_VERIFY_EVERY,
 * MESH_METRICS; and from `env` only: MESH_NODE, MESH_FAILING_AFTER, MESH_SAY_AGAIN_EVERY, and the
 * bus variables the agent sets (see `busEnvOf`).
 * A flag beats its variable; an empty variable counts as unset. Messages name the flag only when
 * `flags` is given.
 * @throws ProviderSettingsError naming every missing or bad setting and how to give it.
 */
export function resolveProviderSettings(
  provider: ProviderModule,
  env: Readonly<Record<string, string | undefined>>,
  flags?: ProviderFlags,
): ProviderSettings {
  const problems: string[] = [];
  const pick = (flag: string | undefined, variable: string): string | undefined => {
    if (flag !== undefined && flag !== "") return flag;
    const value = env[variable];
    return value === undefined || value === "" ? undefined : value;
  };
  const howToGive = (flag: string, variable: string): string =>
    flags === undefined ? `set ${variable}` : `pass ${flag} or set ${variable}`;

  const receives = pick(flags?.receives, "MESH_RECEIVES");
  if (receives === undefined) {
    problems.push(
      `the contributions file is missing: ${howToGive("--receives FILE", "MESH_RECEIVES")} ` +
        `(the file the mesh writes for ${provider.interface})`,
    );
  }
  const secretsDir = pick(flags?.secretsDir, "MESH_SECRETS_DIR");
  if (secretsDir !== undefined && !isAbsolute(secretsDir)) {
    problems.push(
      `the secrets directory ${JSON.stringify(secretsDir)} is not an absolute path: ` +
        `${howToGive("--secrets-dir DIR", "MESH_SECRETS_DIR")} as one`,
    );
  }
  // MESH_ADMIN_URL: what the agent sets when the provider's fleet entry names a file for it.
  const adminUrl = pick(flags?.adminUrl, provider.adminUrlEnv) ?? pick(undefined, "MESH_ADMIN_URL");
  if (adminUrl === undefined) {
    problems.push(
      `the admin URL is missing: ${howToGive("--admin-url URL", provider.adminUrlEnv)} ` +
        `(for example ${provider.adminUrlExample})`,
    );
  } else if (!isServerUrl(adminUrl)) {
    problems.push(
      `the admin URL ${redactUrl(adminUrl)} is not a URL; write it like ${provider.adminUrlExample}`,
    );
  }
  const duration = (
    flag: string,
    flagValue: string | undefined,
    variable: string,
    fallback: number,
  ): number => {
    const text = pick(flagValue, variable);
    if (text === undefined) return fallback;
    try {
      return parseDuration(text);
    } catch (err) {
      if (!(err instanceof InvalidDurationError)) throw err;
      const source = flagValue !== undefined && flagValue !== "" ? flag : variable;
      problems.push(`${source}: ${err.message}`);
      return fallback;
    }
  };
  const every = duration("--every", flags?.every, "MESH_EVERY", DEFAULT_EVERY_MS);
  const verifyEvery = duration(
    "--verify-every",
    flags?.verifyEvery,
    "MESH_VERIFY_EVERY",
    DEFAULT_VERIFY_EVERY_MS,
  );

  // Variables only: the harness's standings timing, shortened where a test or a demo needs it.
  const durationIfSet = (variable: string): number | undefined =>
    pick(undefined, variable) === undefined ? undefined : duration(variable, undefined, variable, 0);
  const failingAfter = durationIfSet("MESH_FAILING_AFTER");
  const sayAgainEvery = durationIfSet("MESH_SAY_AGAIN_EVERY");
  const rotationGrace = durationIfSet("MESH_ROTATION_GRACE");
  const node = pick(undefined, "MESH_NODE");
  const bus = busEnvOf(env);

  const metrics = pick(flags?.metrics, "MESH_METRICS");
  if (metrics !== undefined) {
    try {
      parseListenAddress(metrics);
    } catch (err) {
      problems.push(`${flags?.metrics ? "--metrics" : "MESH_METRICS"}: ${(err as Error).message}`);
    }
  }

  let journal: string | undefined;
  let metricsUrlFile: string | undefined;
  const [stateDir, module] = [env["MESH_STATE_DIR"], env["MESH_MODULE"]];
  if (stateDir !== undefined && stateDir !== "" && module !== undefined && module !== "") {
    try {
      journal = actionJournalPath(stateDir, module);
      if (metrics !== undefined) metricsUrlFile = metricsUrlPath(stateDir, module);
    } catch (err) {
      problems.push(`MESH_STATE_DIR and MESH_MODULE (set by the agent): ${(err as Error).message}`);
    }
  }

  if (problems.length > 0 || receives === undefined || adminUrl === undefined) {
    throw new ProviderSettingsError(provider.name, problems);
  }
  return {
    receives,
    ...(secretsDir === undefined ? {} : { secretsDir }),
    adminUrl,
    control: pick(flags?.control, "MESH_CONTROL"),
    instance: pick(flags?.instance, "MESH_INSTANCE") ?? provider.name,
    every,
    verifyEvery,
    ...(metrics === undefined ? {} : { metrics }),
    ...(node === undefined ? {} : { node }),
    ...(failingAfter === undefined ? {} : { failingAfter }),
    ...(sayAgainEvery === undefined ? {} : { sayAgainEvery }),
    ...(rotationGrace === undefined ? {} : { rotationGrace }),
    ...(bus === undefined ? {} : { bus }),
    ...(journal === undefined ? {} : { journal }),
    ...(metricsUrlFile === undefined ? {} : { metricsUrlFile }),
  };
}

/**
 * The bus variables of `env` (MESH_BUS_SERVERS, MESH_BUS_CREDS, MESH_MANIFEST, MESH_SEATS,
 * MESH_MODULE, MESH_BUS_CA, those that are set) when it holds a bus credential: MESH_BUS_CREDS and
 * MESH_BUS_SERVERS both set and not empty. Undefined otherwise: the provider announces nothing.
 */
export function busEnvOf(
  env: Readonly<Record<string, string | undefined>>,
): Readonly<Record<string, string>> | undefined {
  const set = (name: string): boolean => (env[name] ?? "").trim() !== "";
  if (!set("MESH_BUS_CREDS") || !set("MESH_BUS_SERVERS")) return undefined;
  const bus: Record<string, string> = {};
  for (const name of MODULE_BUS_VARIABLES) {
    const value = env[name];
    if (value !== undefined) bus[name] = value;
  }
  // Optional: set only when the bus uses TLS.
  if (set("MESH_BUS_CA")) bus["MESH_BUS_CA"] = env["MESH_BUS_CA"] ?? "";
  return bus;
}
