// The s3 provider as the conformance kit sees it: a private Ceph cluster with a RADOS Gateway, and
// the ways to look at it from outside the adapter (as the consumer with its own key, as the cluster's
// operator with radosgw-admin and rados, as someone changing things by hand).
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { providerTarget, startCeph, type CephServer, type ConformanceTarget } from "@mesh/testkit";
import { AWKWARD_PASSWORDS } from "@mesh/testkit";
import { bucketFor, provider } from "../src/index.ts";
import { isPrintableAscii } from "../src/adapter.ts";

/** The object `writeData` stores its marker in, inside the consumer's own bucket. */
export const DATA_KEY = "conformance.txt";

/** An S3 client of `server` signing with the given key; no retries, so a refusal is seen at once. */
export function s3As(server: CephServer, accessKey: string, secretKey: string): S3Client {
  return new S3Client({
    endpoint: server.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
    maxAttempts: 1,
  });
}

/** Runs `fn` with a client signing as the consumer, and closes it after. */
export async function asConsumer<T>(
  server: CephServer,
  p: { as: string; password: string },
  fn: (c: S3Client) => Promise<T>,
): Promise<T> {
  const client = s3As(server, p.as, p.password);
  try {
    return await fn(client);
  } finally {
    client.destroy();
  }
}

/** The S3 error's name when the gateway refused (4xx), or undefined when the call succeeded. */
export async function refusal(attempt: Promise<unknown>): Promise<string | undefined> {
  try {
    await attempt;
    return undefined;
  } catch (err) {
    const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
    const status = e.$metadata?.httpStatusCode ?? 0;
    if (status >= 400 && status < 500) return e.name ?? `HTTP ${status}`;
    throw err;
  }
}

/**
 * As the cluster's operator, the bytes of an object: found by the bucket's marker in the data pool
 * with `rados`, so it works while the consumer is suspended. Undefined when the bucket or object is gone.
 */
export async function readAsOperator(
  server: CephServer,
  bucket: string,
  key: string,
): Promise<string | undefined> {
  let stats: unknown;
  try {
    stats = await server.radosgwAdmin(["bucket", "stats", `--bucket=${bucket}`]);
  } catch {
    return undefined;
  }
  const marker = (stats as { marker?: string }).marker;
  if (marker === undefined) return undefined;
  try {
    return await server.rados(["-p", "default.rgw.buckets.data", "get", `${marker}_${key}`, "-"]);
  } catch {
    return undefined;
  }
}

/** This provider's conformance target. */
export const target: ConformanceTarget = providerTarget(provider, async () => {
  const server = await startCeph();
  return {
    adminUrl: server.adminUrl,
    // The consumer signs with the access key its credential names: where a rotation moved it to the
    // second key pair, `p.login`.
    async canLogin(p, password = p.password) {
      const refused = await asConsumer(server, { as: p.login ?? p.as, password }, (c) =>
        refusal(c.send(new ListBucketsCommand({}))),
      );
      return refused === undefined;
    },
    async writeData(p, marker) {
      await asConsumer(server, { as: p.login ?? p.as, password: p.password }, (c) =>
        c.send(new PutObjectCommand({ Bucket: bucketFor(p.as), Key: DATA_KEY, Body: marker })),
      );
    },
    readData: (p) => readAsOperator(server, bucketFor(p.as), DATA_KEY),
    async canReachOther(p, other) {
      const theirs = bucketFor(other.as);
      return asConsumer(server, { as: p.login ?? p.as, password: p.password }, async (c) => {
        const refused = [
          await refusal(c.send(new GetObjectCommand({ Bucket: theirs, Key: DATA_KEY }))),
          await refusal(c.send(new PutObjectCommand({ Bucket: theirs, Key: "intruder", Body: "1" }))),
          await refusal(c.send(new ListObjectsV2Command({ Bucket: theirs }))),
          await refusal(c.send(new DeleteObjectCommand({ Bucket: theirs, Key: DATA_KEY }))),
        ];
        return refused.some((r) => r === undefined);
      });
    },
    async changePassword(as, password) {
      await server.radosgwAdmin([
        "key",
        "create",
        `--uid=${as}`,
        `--access-key=${as}`,
        `--secret-key=${password}`,
      ]);
    },
    // The access key is the login: without it nobody signs as the consumer. Its bucket stays.
    async dropLogin(as) {
      await server.radosgwAdmin(["key", "rm", `--uid=${as}`, `--access-key=${as}`]);
    },
    async createForeign(as, password) {
      await server.radosgwAdmin([
        "user",
        "create",
        `--uid=${as}`,
        "--display-name=made by hand",
        `--access-key=${as}`,
        `--secret-key=${password}`,
      ]);
    },
    // The provider takes no values of its own: a bucket asked for is refused unless it is the consumer's.
    hostileValues: [
      { bucket: "person_made_this" },
      { bucket: "../admin" },
      { bucket: "x&uid=admin&suspended=true" },
      { uid: "admin", "display-name": "mesh-mark {}" },
    ],
    plainValues: {},
    // A secret key is printable ASCII; the adapter refuses the others (see adapter.test.ts).
    awkwardPasswords: AWKWARD_PASSWORDS.filter((p) => isPrintableAscii(p)),
    halt: () => server.stopGateway(),
    resume: () => server.startGateway(),
    stop: () => server.stop(),
  };
});
