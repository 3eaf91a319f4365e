// What a user must be allowed to publish to use one KV bucket, and nothing beyond that bucket.
// Under JWT auth every JetStream call is a publish to an API subject, so a reader's permissions name
// the bucket's stream in each of them. Verified against nats-server 2.9 with nats.js v3:
// `get` uses STREAM.MSG.GET; `keys` and `watch` create an ordered consumer on the stream.
import { kvStreamName } from "./subjects.ts";

/**
 * The subjects a user must be allowed to publish to read `bucket` (`get`, `keys`, `watch`, status).
 * The user also needs to subscribe to its own inbox (`inboxSubjects`).
 * @throws InvalidBucketNameError for an invalid bucket name.
 */
export function kvReadSubjects(bucket: string): string[] {
  const stream = kvStreamName(bucket);
  return [
    `$JS.API.STREAM.INFO.${stream}`,
    `$JS.API.STREAM.MSG.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}`,
    `$JS.API.DIRECT.GET.${stream}.>`,
    `$JS.API.CONSUMER.CREATE.${stream}`,
    `$JS.API.CONSUMER.CREATE.${stream}.>`,
    `$JS.API.CONSUMER.INFO.${stream}.>`,
    `$JS.API.CONSUMER.DELETE.${stream}.>`,
    // Flow-control replies of the ordered consumer behind `watch`.
    `$JS.FC.${stream}.>`,
  ];
}

/**
 * The subjects a user must be allowed to publish to read and write (put, delete) the keys of `bucket`.
 * @throws InvalidBucketNameError for an invalid bucket name.
 */
export function kvWriteSubjects(bucket: string): string[] {
  return [...kvReadSubjects(bucket), `$KV.${bucket}.>`];
}
