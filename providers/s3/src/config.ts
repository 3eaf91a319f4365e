// The gateway's admin URL, the instance name and the one rule that names a consumer's bucket,
// checked once so a mistake is said in words before any request is signed.

import type { Logger } from "@mesh/sdk";
import { s3BucketName } from "@mesh/manifest";

/** Where the admin URL is read from when no flag gives it. */
export const ADMIN_URL_ENV = "MESH_S3_URL";

/** The caps the admin user needs on the gateway (`radosgw-admin caps add --caps=...`). */
export const ADMIN_CAPS = "users=*;buckets=*;usage=read;metadata=*";

/** Where the provider's events go: the module's bus, best effort. Must never throw. */
export interface S3Events {
  emit(localName: "bucket.created" | "bucket.removed", body: Readonly<Record<string, unknown>>): void;
}

/** What `createS3Adapter` is given. */
export interface S3AdapterConfig {
  /**
   * `http://<admin access key>:<admin secret key>@<host>:<port>` (or `https://`), optionally with
   * `?region=<name>` (default `us-east-1`) for the signatures. The gateway user needs `ADMIN_CAPS`.
   */
  readonly adminUrl: string;
  /** Names this provider instance in every mark it writes; two instances never touch each other's. */
  readonly instance: string;
  readonly logger?: Logger | undefined;
  /** Where `bucket.created` and `bucket.removed` are announced; nowhere when absent. */
  readonly events?: S3Events | undefined;
  /** How long one request to the gateway may take (15 000 ms). */
  readonly requestTimeoutMs?: number | undefined;
}

/** The checked configuration. */
export interface ResolvedS3Config {
  /** `http://host:port`, without the keys: where the admin API and S3 are reached. */
  readonly endpoint: string;
  readonly accessKey: string;
  readonly secretKey: string;
  readonly region: string;
  readonly instance: string;
  readonly requestTimeoutMs: number;
}

/** A setting cannot be used. The message never contains the admin's secret key. */
export class S3ConfigError extends Error {
  override name = "S3ConfigError";
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(message);
  }
}

/** What an instance name may be: it is written into every mark this provider leaves. */
export const INSTANCE_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

const REGION_PATTERN = /^[a-z0-9-]{1,32}$/;

/**
 * Checks the configuration.
 * @throws S3ConfigError naming the setting and the fix, never echoing the secret key.
 */
export function resolveS3Config(config: S3AdapterConfig): ResolvedS3Config {
  const instance = config.instance;
  if (!INSTANCE_PATTERN.test(instance)) {
    throw new S3ConfigError(
      "instance",
      `provider instance name ${JSON.stringify(instance)} is not usable: it is written into every ` +
        `mark, so give 1–64 characters of letters, digits, "_", "." and "-"`,
    );
  }
  let url: URL;
  try {
    url = new URL(config.adminUrl.trim());
  } catch {
    throw badUrl("is not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw badUrl(`has scheme ${JSON.stringify(url.protocol)}, not http: or https:`);
  }
  if (url.hostname === "") throw badUrl("names no host");
  if (url.username === "" || url.password === "")
    throw badUrl("has no access key and secret key: the admin API is signed with them");
  const region = url.searchParams.get("region") ?? "us-east-1";
  if (!REGION_PATTERN.test(region))
    throw badUrl(`has region ${JSON.stringify(region)}; give ?region=us-east-1 or leave it out`);
  const timeout = config.requestTimeoutMs ?? 15_000;
  if (!Number.isFinite(timeout) || timeout <= 0) {
    throw new S3ConfigError(
      "requestTimeoutMs",
      `requestTimeoutMs is ${timeout}; give a positive number of milliseconds`,
    );
  }
  return {
    endpoint: `${url.protocol}//${url.host}`,
    accessKey: decodeURIComponent(url.username),
    secretKey: decodeURIComponent(url.password),
    region,
    instance,
    requestTimeoutMs: timeout,
  };
}

function badUrl(why: string): S3ConfigError {
  return new S3ConfigError(
    "adminUrl",
    `the RADOS Gateway admin URL ${why}; give http://<access key>:<secret key>@<host>:<port> with --admin-url or ${ADMIN_URL_ENV}`,
  );
}

/**
 * The bucket a consumer owns, from its login alone: every `_` becomes `-`, and a name S3 would
 * refuse (shorter than 3, ending in `-`, starting with `xn--`) is wrapped as `0<name>0`. The same
 * rule the manifest's `{login|s3-bucket}` applies, so the consumer's credential names it too.
 */
export const bucketFor: (login: string) => string = s3BucketName;
