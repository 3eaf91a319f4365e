// What is the gateway's own in the settings: its admin URL's keys and region, the caps its admin
// needs, and the rule that names a consumer's bucket. The instance name, the URL's form and the
// numbers are checked by the sdk's admin settings, in the words every provider uses.

import {
  adminUrlError,
  checkHttpAdminSettings,
  type AdminUrlRules,
  type CheckedHttpAdminSettings,
  type HttpAdminSettings,
} from "@mesh/sdk";
import { s3BucketName } from "@mesh/manifest";

/** How the gateway's admin URL looks; checked by the sdk's `parseAdminUrl`. */
export const S3_ADMIN_URL: AdminUrlRules = {
  backend: "RADOS Gateway",
  // The user and password are the admin's access key and secret key: every admin call is signed with them.
  needsPassword: true,
  ports: { "http:": 80, "https:": 443 },
  env: "MESH_S3_URL",
  example: "http://<admin access key>:<admin secret key>@127.0.0.1:7480",
};

/** The caps the admin user needs on the gateway (`radosgw-admin caps add --caps=...`). */
export const ADMIN_CAPS = "users=*;buckets=*;usage=read;metadata=*";

/** Where the provider's events go: the module's bus, best effort. Must never throw. */
export interface S3Events {
  emit(localName: "bucket.created" | "bucket.removed", body: Readonly<Record<string, unknown>>): void;
}

/**
 * What `createS3Adapter` is given. The admin URL is `http://<access key>:<secret key>@<host>:<port>`
 * (or `https://`), optionally with `?region=<name>` (default `us-east-1`) for the signatures; its
 * gateway user needs `ADMIN_CAPS`.
 */
export interface S3AdapterConfig extends HttpAdminSettings {
  /** Where `bucket.created` and `bucket.removed` are announced; nowhere when absent. */
  readonly events?: S3Events | undefined;
}

/** The checked configuration. */
export interface ResolvedS3Config extends CheckedHttpAdminSettings {
  /** `http://host:port`, without the keys: where the admin API and S3 are reached. */
  readonly endpoint: string;
  readonly region: string;
}

const REGION_PATTERN = /^[a-z0-9-]{1,32}$/;

/**
 * Checks the configuration: the sdk checks the instance and the URL, this the region and the timeout.
 * @throws AdminSettingError naming the setting and the fix, never echoing the secret key.
 */
export function resolveS3Config(config: S3AdapterConfig): ResolvedS3Config {
  const checked = checkHttpAdminSettings(config, S3_ADMIN_URL);
  const { admin } = checked;
  const region = admin.url.searchParams.get("region") ?? "us-east-1";
  if (!REGION_PATTERN.test(region)) {
    throw adminUrlError(
      S3_ADMIN_URL,
      admin.text,
      `has region ${JSON.stringify(region)}; give ?region=us-east-1 or leave it out`,
    );
  }
  return {
    ...checked,
    // The scheme's own port when the URL names none: an https gateway behind a proxy is on 443.
    endpoint: `${admin.url.protocol}//${admin.url.host}`,
    region,
  };
}

/**
 * The bucket a consumer owns, from its login alone: every `_` becomes `-`, and a name S3 would
 * refuse (shorter than 3, ending in `-`, starting with `xn--`) is wrapped as `0<name>0`. The same
 * rule the manifest's `{login|s3-bucket}` applies, so the consumer's credential names it too.
 */
export const bucketFor: (login: string) => string = s3BucketName;
