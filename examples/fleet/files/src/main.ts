// The files app: a consumer of `s3-bucket`. Every few seconds it stores a small file in the bucket
// the mesh gave it, signed with its own key (the login and the minted password), reads it back and
// says whether what came back is what it stored.
import { GetObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { main, type Credential, type Session } from "../../lib/consumer.ts";

// The AWS SDK warns, once per process, that its releases after January 2027 will need Node 22; the
// version pinned here runs on Node 20.
process.env["AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED"] ??= "true";

async function connect(credential: Credential): Promise<Session> {
  // The provider derives the bucket from the login; the endpoint's path names it too.
  const given = credential.values["bucket"];
  const bucket = typeof given === "string" && given !== "" ? given : credential.path.replace(/^\//, "");
  const client = new S3Client({
    endpoint: `http://${credential.host}${credential.port === undefined ? "" : `:${credential.port}`}`,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: credential.login, secretAccessKey: credential.password },
    maxAttempts: 1,
  });
  let stored = 0;
  const close = async (): Promise<void> => {
    client.destroy();
    await Promise.resolve();
  };
  try {
    // A refused key or a bucket not there yet shows here, where a refusal means "not yet".
    await client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt" })).catch((err: unknown) => {
      if ((err as { name?: string }).name !== "NoSuchKey") throw err;
    });
  } catch (err) {
    await close();
    throw err;
  }
  return {
    async step() {
      stored++;
      const text = `hello from files, #${stored}, at ${new Date().toISOString()}`;
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: "hello.txt", Body: text }));
      const back = await client.send(new GetObjectCommand({ Bucket: bucket, Key: "hello.txt" }));
      const read = await back.Body?.transformToString();
      return read === text
        ? `stored hello.txt (#${stored}, ${text.length} bytes) in bucket ${bucket} and read it back`
        : `stored hello.txt in bucket ${bucket} but read back ${JSON.stringify(read)}`;
    },
    close,
  };
}

main({ name: "files", interface: "s3-bucket", connect });
