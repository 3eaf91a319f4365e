// The adapter conformance kit, one suite looped over every provider against its real server.
import { runConformance } from "@mesh/testkit";
import { target as postgres } from "../providers/postgres/test/conformance-target.ts";
import { target as redis } from "../providers/redis/test/conformance-target.ts";
import { target as mariadb } from "../providers/mariadb/test/conformance-target.ts";
import { target as s3 } from "../providers/s3/test/conformance-target.ts";
import { target as oidc } from "../providers/oidc/test/conformance-target.ts";

for (const target of [postgres, redis, mariadb, s3, oidc]) {
  if (target) runConformance(target);
}
