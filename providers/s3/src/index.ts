/**
 * @mesh/provider-s3: the `s3-bucket` provider on a Ceph RADOS Gateway. Each consumer gets a gateway
 * user whose access key is the login the mesh derived and whose secret key is the password it
 * minted, owning one bucket named from the login (`bucketFor`), and no other.
 *
 * ```ts
 * import { runProvisioner } from "@mesh/sdk";
 * import { createS3Adapter } from "@mesh/provider-s3";
 * const adapter = createS3Adapter({ adminUrl: process.env.MESH_S3_URL ?? "", instance: "main" });
 * const handle = runProvisioner("s3-bucket", adapter, { receives: "/run/mesh/s3-bucket.json" });
 * ```
 */
import { defineProvider } from "@mesh/sdk";
import { createS3Adapter } from "./adapter.ts";
import { S3_ADMIN_URL } from "./config.ts";

export {
  createS3Adapter,
  S3BucketAdapter,
  SdkConsumerS3,
  SignedGatewayAdmin,
  type AdminAnswer,
  type ConsumerAnswer,
  type ConsumerS3,
  type GatewayAdmin,
} from "./adapter.ts";
export { bucketFor, resolveS3Config, type ResolvedS3Config, type S3AdapterConfig } from "./config.ts";

/** How `mesh provider s3` finds and starts this provider; `emit` carries its bucket events to the bus. */
export const provider = defineProvider(
  "s3",
  "s3-bucket",
  S3_ADMIN_URL,
  ({ adminUrl, instance, logger, emit }) =>
    createS3Adapter({ adminUrl, instance, logger, ...(emit === undefined ? {} : { events: { emit } }) }),
);
