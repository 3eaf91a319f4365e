// The s3-bucket adapter: one RADOS Gateway user per consumer, whose uid and access key are the
// login the mesh derived and whose secret key is the password it minted, allowed one bucket and
// owning exactly one, named from the login by `bucketFor`.
//
// Where the mark lives: in the user's display name, which only a caller with the admin API's
// `users` cap can write. A bucket's tags or policy would not do (its owner, the consumer, can
// rewrite them), nor the email (RGW wants it unique per user). The mark is JSON behind the prefix
// `mesh-mark `: the instance that made the user, active or retired, the bucket, and when and why
// it was retired, the rotation under way, and when the password applied was minted (an active
// one's, as `toISOString` gives it: at most 27 characters). No secret ever goes into it: the consumer can read
// its own display name.
//
// Rotations alternate access keys: a gateway user may hold several S3 key pairs, so a rotation
// adds a second key pair to the same user (access key `secondLogin(login)`, or back to `login`),
// both valid while the apps move, then removes the old pair. The uid, the bucket and its owner
// never change: only the access key id an app signs with does.

import { SignatureV4 } from "@smithy/signature-v4";
import { Hash } from "@smithy/hash-node";
import { CreateBucketCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { AdminLoginRefusedError, BackendUnreachableError, classifyBackendFailure } from "@mesh/sdk";
import { consoleLogger, findInChain, forEachLimited, isValidLogin, type Logger } from "@mesh/sdk";
import { DerivedChangedError, RefusalError, ValueRefusedError } from "@mesh/sdk";
import { NotMadeHereError, NotRetiredError } from "@mesh/sdk";
import {
  markEntry,
  parseJsonOrUndefined,
  readMark,
  readMinted,
  secondLogin,
  type ConsumerMark,
} from "@mesh/sdk";
import type { BatchedAdapter, Deleted, FailureClass, InventoryEntry, Provision, Retired } from "@mesh/sdk";
import type { RotationMark } from "@mesh/sdk";
import { ADMIN_CAPS, bucketFor, resolveS3Config } from "./config.ts";
import type { ResolvedS3Config, S3AdapterConfig, S3Events } from "./config.ts";

/** What the gateway answered to one admin request. */
export interface AdminAnswer {
  readonly status: number;
  /** The S3-style error code (`NoSuchUser`, `AccessDenied`...), empty on success. */
  readonly code: string;
  readonly body: unknown;
}

/** The slice of the gateway's admin API the adapter uses: one signed request. */
export interface GatewayAdmin {
  request(
    method: "GET" | "PUT" | "POST" | "DELETE",
    path: string,
    query: Readonly<Record<string, string>>,
    signal?: AbortSignal,
  ): Promise<AdminAnswer>;
}

/** What an S3 call made with a consumer's own key came to. */
export type ConsumerAnswer = "ok" | "owned-already" | { readonly refused: string; readonly status: number };

/** The slice of an S3 client the adapter uses, called with the consumer's own key. */
export interface ConsumerS3 {
  /** Lists at most no object of `bucket`, as the key's owner would. */
  readonly listBucket: ConsumerCall;
  /** Creates `bucket` as the key's owner. */
  readonly createBucket: ConsumerCall;
}

/** One S3 call on `bucket`, signed with a consumer's own key. */
export type ConsumerCall = (
  bucket: string,
  accessKey: string,
  secretKey: string,
  signal?: AbortSignal,
) => Promise<ConsumerAnswer>;

/** The gateway refused the admin's own key: wrong access key or secret key in the admin URL. */
export class S3AdminCredentialsError extends AdminLoginRefusedError {
  override name = "S3AdminCredentialsError";
  constructor(
    endpoint: string,
    readonly code: string,
  ) {
    super(
      "the RADOS Gateway",
      endpoint,
      "the admin's key",
      code,
      "check the access key and secret key in the admin URL (adminUrl)",
    );
  }
}

/** The admin user lacks a cap the provider needs. */
export class S3AdminCapsError extends Error {
  override name = "S3AdminCapsError";
  constructor(
    readonly endpoint: string,
    readonly what: string,
    readonly code: string,
  ) {
    super(
      `the RADOS Gateway at ${endpoint} refused the admin user (the key in adminUrl) to ${what} (${code}): ` +
        `it lacks caps; give them with radosgw-admin caps add --uid=<admin uid> --caps="${ADMIN_CAPS}"`,
    );
  }
}

/** The gateway answered an admin request with an error the adapter did not expect. */
export class S3AdminError extends Error {
  override name = "S3AdminError";
  constructor(
    readonly what: string,
    readonly status: number,
    readonly code: string,
  ) {
    super(`the RADOS Gateway refused to ${what}: ${status} ${code || "(no code)"}`);
  }
}

/** The password cannot be an S3 secret key: those are printable ASCII. */
export class S3PasswordRefusedError extends RefusalError {
  override name = "S3PasswordRefusedError";
  constructor(login: string) {
    super(
      login,
      `the password of S3 consumer ${JSON.stringify(login)} holds characters an S3 secret key cannot ` +
        `(only printable ASCII signs requests): nothing changed; mint it again (mesh rotate) ` +
        `rather than writing one by hand`,
    );
  }
}

/** Whether `text` is printable ASCII, as an S3 secret key must be. */
export function isPrintableAscii(text: string): boolean {
  return /^[\x20-\x7e]+$/.test(text);
}

/**
 * What a mark says about one consumer this instance made: the kit's mark, with the instance and the
 * bucket in it (for `derived`, which it does not write).
 */
interface Mark extends Omit<ConsumerMark, "derived"> {
  readonly instance: string;
  readonly bucket: string;
}

/** A gateway user as GET /admin/user describes it. */
interface GatewayUser {
  readonly uid: string;
  readonly displayName: string;
  readonly suspended: boolean;
  readonly maxBuckets: number;
  readonly keys: readonly { readonly accessKey: string; readonly secretKey: string }[];
}

const MARK_PREFIX = "mesh-mark ";
const CONCURRENCY = 16;

/**
 * Makes the `s3-bucket` adapter for one RADOS Gateway: admin requests signed with SigV4 by
 * `@smithy/signature-v4`, consumer checks with `@aws-sdk/client-s3`. Nothing is kept open, so a
 * gateway that is down makes calls fail (class `unreachable`) and one that is back serves again.
 * @throws AdminSettingError when the admin URL or the instance name cannot be used.
 */
export function createS3Adapter(config: S3AdapterConfig): S3BucketAdapter {
  const resolved = resolveS3Config(config);
  return new S3BucketAdapter(
    new SignedGatewayAdmin(resolved),
    new SdkConsumerS3(resolved),
    resolved,
    config.logger ?? consoleLogger,
    config.events,
  );
}

/** The `s3-bucket` adapter over an admin API and an S3 client the caller made. */
export class S3BucketAdapter implements BatchedAdapter {
  constructor(
    private readonly admin: GatewayAdmin,
    private readonly s3: ConsumerS3,
    private readonly config: ResolvedS3Config,
    private readonly logger: Logger,
    private readonly events: S3Events | undefined,
  ) {}

  /**
   * The gateway holds several S3 key pairs per user, each with its own access key id, so a rotation
   * alternates access keys on the one user: `login` and `secondLogin(login)`. The uid, the bucket
   * and its owner stay those of `login`.
   */
  readonly alternates = true;

  /**
   * Creates or repairs the consumer's gateway user and bucket, re-enabling a retired one as it was
   * and clearing its mark; writes nothing when all is already in place. The user keeps exactly one
   * key pair, `p.login` (or `p.as`) with `p.password`: any other (the one a rotation retires, or one
   * added by hand) is removed, and a rotation in the mark is forgotten once it is.
   * @throws NotMadeHereError (the user, its access key or its bucket is someone else's),
   *   ValueRefusedError, DerivedChangedError or S3PasswordRefusedError, having changed nothing.
   */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    await this.apply(p, undefined, undefined, signal);
  }

  /**
   * Adds `p.password` as a second key pair of the consumer's user, under the access key `p.login`,
   * beside `p.retiring` under the other one (both sign requests), and records `rotation` in the
   * mark. The gateway cannot change a key and the display name at once, so the mark says phase
   * `add` before the new key pair is made and `rotation` (phase `drain`) once both are. Idempotent;
   * `create` ends it.
   * @throws as `create` does; NotMadeHereError when the access key the new pair needs is another
   *   user's.
   */
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void> {
    await this.apply(p, p.retiring, rotation, signal);
  }

  /**
   * After `mesh rotate --now`: S3 keeps no sessions (every request is signed on its own, a
   * presigned URL included), so once `create` removed the old key pair nothing signed with it is
   * served. Checks that the user is this instance's and holds one key pair; ends 0 sessions.
   * @throws NotMadeHereError for a user this instance did not make; S3AdminError when the user still
   *   holds another key pair.
   */
  async endSessions(as: string, signal: AbortSignal): Promise<number> {
    const user = await this.readUser(as, signal);
    if (user === undefined) return 0;
    if (this.markOf(user) === undefined) throw this.notOurs(as, user);
    if (user.keys.length > 1) {
      throw new S3AdminError(`end the old key pair of gateway user ${as}`, 409, "MoreThanOneKey");
    }
    return 0;
  }

  private async apply(
    p: Provision,
    retiring: string | undefined,
    rotation: RotationMark | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    const login = p.as;
    const slot = p.login ?? login;
    const bucket = this.bucketAskedFor(login, p.values, p.derived);
    if (!isPrintableAscii(p.password) || (retiring !== undefined && !isPrintableAscii(retiring))) {
      throw new S3PasswordRefusedError(login);
    }
    const keys = keysOf(p, retiring);
    let user = await this.readUser(login, signal);
    const mark = user === undefined ? undefined : this.markOf(user);
    if (user !== undefined && mark === undefined) throw this.notOurs(login, user);
    if (mark !== undefined && mark.bucket !== bucket) {
      throw new DerivedChangedError(login, "bucket", mark.bucket, bucket);
    }
    // An access key the user lacks may be held by another user: never taken over, not even tried.
    for (const accessKey of keys.keys()) {
      if (!user?.keys.some((k) => k.accessKey === accessKey))
        await this.refuseTakenKey(login, accessKey, signal);
    }
    const instance = this.config.instance;
    const minted = mintedOf(p.minted);
    const activeMark = markText({
      instance,
      state: "active",
      bucket,
      rotation: rotationOf(rotation),
      minted,
    });
    const addingMark =
      rotation === undefined
        ? activeMark
        : markText({
            instance,
            state: "active",
            bucket,
            rotation: { phase: "add", since: rotation.since, until: rotation.until },
            minted,
          });
    const bucketExists = await this.refuseTakenBucket(login, bucket, signal);

    if (user === undefined) {
      const made = await this.admin.request(
        "PUT",
        "/admin/user",
        {
          uid: login,
          "display-name": addingMark,
          "access-key": slot,
          "secret-key": p.password,
          "max-buckets": "1",
          "generate-key": "false",
        },
        signal,
      );
      if (made.status === 409) {
        // Another user holds the access key, or a user of this uid was made since the read.
        user = await this.readUser(login, signal);
        if (user === undefined || this.markOf(user) === undefined) {
          throw new NotMadeHereError(login, instance, {
            resource: `the access key ${JSON.stringify(slot)} on the RADOS Gateway`,
            madeBy: `the gateway answered ${made.code || "409"}: another gateway user holds it`,
          });
        }
      } else {
        this.check(made, `create gateway user ${login}`);
        user = await this.readUser(login, signal);
        if (user === undefined)
          throw new S3AdminError(`read gateway user ${login} just made`, 404, "NoSuchUser");
      }
    }
    await this.repairUser(user, login, keys, activeMark, addingMark, signal);

    // Made as the consumer, since the admin API cannot make buckets; a user at its one bucket would
    // be answered TooManyBuckets rather than "owned already", so an existing one is not asked again.
    const made = bucketExists
      ? "owned-already"
      : await this.s3.createBucket(bucket, slot, p.password, signal);
    if (made !== "ok" && made !== "owned-already") {
      throw new S3AdminError(`create bucket ${bucket} as consumer ${login}`, made.status, made.refused);
    }
    if (made === "ok" || mark?.state === "retired") {
      this.announce("bucket.created", { bucket, login, endpoint: this.config.endpoint });
    }
  }

  /**
   * Whether the user carries this instance's active mark, is not suspended, holds exactly the key
   * pairs `p` gives (its access key `p.login` or `p.as` with `p.password`, and while a rotation
   * overlaps the other with `p.retiring`, the mark recording it), and whether that key lists its
   * bucket. Read-only.
   */
  async holds(p: Provision, signal: AbortSignal): Promise<boolean> {
    const user = await this.readUser(p.as, signal);
    const mark = user === undefined ? undefined : this.markOf(user);
    if (user === undefined || mark?.state !== "active" || user.suspended || user.maxBuckets !== 1) {
      return false;
    }
    // Over once the old key pair is gone and the mark forgets it; overlapping once both are made.
    if (p.retiring === undefined ? mark.rotation !== undefined : mark.rotation?.phase !== "drain")
      return false;
    const keys = keysOf(p, p.retiring);
    if (user.keys.length !== keys.size) return false;
    if (!user.keys.every((k) => keys.get(k.accessKey) === k.secretKey)) return false;
    return (await this.s3.listBucket(mark.bucket, p.login ?? p.as, p.password, signal)) === "ok";
  }

  /**
   * `holds` for many consumers: one admin read lists every gateway user, so a login the gateway
   * does not hold is answered without a request of its own. The gateway has no batched read of
   * users' keys and display names, so the others are asked one by one, a few at a time.
   */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    const known = new Set(await this.listUids(signal));
    const answers = new Map<string, boolean | Error>();
    await forEachLimited(ps, CONCURRENCY, async (p) => {
      if (!known.has(p.as)) {
        answers.set(p.as, false);
        return;
      }
      try {
        answers.set(p.as, await this.holds(p, signal));
      } catch (err) {
        answers.set(p.as, err instanceof Error ? err : new Error(String(err)));
      }
    });
    return answers;
  }

  /**
   * Suspends the consumer's gateway user (S3 then answers 403 UserSuspended) and marks it retired.
   * Its bucket and objects stay.
   * @throws NotMadeHereError when there is no such user of this instance.
   */
  async retire(
    as: string,
    _derived: Readonly<Record<string, unknown>>,
    why: string,
    at: Date,
  ): Promise<void> {
    const user = await this.readUser(as);
    const mark = user === undefined ? undefined : this.markOf(user);
    if (user === undefined || mark === undefined) throw this.notOurs(as, user);
    const retired = markText({
      instance: this.config.instance,
      state: "retired",
      bucket: mark.bucket,
      retiredAt: at.toISOString(),
      why,
    });
    this.check(
      await this.admin.request("POST", "/admin/user", {
        uid: as,
        suspended: "true",
        "display-name": retired,
      }),
      `suspend gateway user ${as}`,
    );
    this.announce("bucket.removed", { bucket: mark.bucket, login: as, reason: "retired" });
  }

  /** The consumers this instance made, read from their display names. */
  async inventory(): Promise<InventoryEntry[]> {
    // Only a uid that is a login can be a consumer's: the others (the admin's) are not even read.
    const uids = (await this.listUids()).filter((uid) => isValidLogin(uid));
    const entries: InventoryEntry[] = [];
    await forEachLimited(uids, CONCURRENCY, async (uid) => {
      const user = await this.readUser(uid);
      const mark = user === undefined ? undefined : this.markOf(user);
      if (mark === undefined) return;
      entries.push(markEntry(uid, { ...mark, derived: { bucket: mark.bucket } }));
    });
    return entries.sort((a, b) => a.as.localeCompare(b.as));
  }

  /**
   * Deletes a retired consumer (the guard has checked its mark): its bucket with every object, then
   * its gateway user. Reports the bytes its objects held, from the bucket's stats read just before.
   * @throws NotRetiredError when its user was enabled again by hand; NotMadeHereError when its
   *   bucket now belongs to someone else; having deleted nothing.
   */
  async delete(r: Retired): Promise<Deleted> {
    const login = r.as;
    const bucket = typeof r.derived["bucket"] === "string" ? r.derived["bucket"] : bucketFor(login);
    const user = await this.readUser(login);
    if (user !== undefined && !user.suspended) {
      throw new NotRetiredError(login, "its gateway user was enabled again by hand");
    }
    let freedBytes = 0;
    const stats = await this.admin.request("GET", "/admin/bucket", { bucket, stats: "true" });
    if (stats.status !== 404) {
      this.check(stats, `read the stats of bucket ${bucket}`);
      const owner = String(field(stats.body, "owner"));
      if (owner !== login) throw this.bucketNotOurs(login, bucket, owner);
      freedBytes = bytesOf(stats.body);
      const purged = await this.admin.request("DELETE", "/admin/bucket", { bucket, "purge-objects": "true" });
      if (purged.status !== 404) this.check(purged, `delete bucket ${bucket} and its objects`);
    }
    if (user !== undefined) {
      const removed = await this.admin.request("DELETE", "/admin/user", { uid: login, "purge-data": "true" });
      if (removed.status !== 404) this.check(removed, `delete gateway user ${login}`);
    }
    this.announce("bucket.removed", { bucket, login, reason: "deleted", freedBytes });
    return { freedBytes };
  }

  /**
   * Whether a gateway user of this uid exists at all, made by anyone, or any user holds an access
   * key of this name (a consumer's second login is an access key of its user, not a uid).
   */
  async exists(as: string): Promise<boolean> {
    return (await this.readUser(as)) !== undefined || (await this.ownerOfKey(as)) !== undefined;
  }

  /** Classes the gateway's answers and this adapter's errors. */
  classify(err: unknown): FailureClass | undefined {
    return classifyS3Error(err);
  }

  /**
   * The bucket the consumer may have. A `bucket` in its values, or derived by a manifest other than
   * this provider's, that names any other bucket (another consumer's, perhaps) is refused.
   */
  private bucketAskedFor(
    login: string,
    values: Readonly<Record<string, unknown>>,
    derived: Readonly<Record<string, unknown>>,
  ): string {
    const bucket = bucketFor(login);
    for (const [where, asked] of [
      ["values.bucket", values["bucket"]],
      ["derived.bucket", derived["bucket"]],
    ] as const) {
      if (asked === undefined || asked === bucket) continue;
      const fix =
        where === "values.bucket"
          ? "remove bucket from the consumer's values: the mesh names it"
          : `derive it with "bucket": "{login|s3-bucket}" in the provider's manifest`;
      throw new ValueRefusedError(
        login,
        "bucket",
        asked,
        `(${where}) asks for a bucket other than the consumer's own, ${JSON.stringify(bucket)}, which ` +
          `is the only one it may have: ${fix}`,
      );
    }
    return bucket;
  }

  /**
   * Whether the consumer's bucket exists; refuses when it does under another user, who may be a
   * person or another consumer.
   */
  private async refuseTakenBucket(login: string, bucket: string, signal: AbortSignal): Promise<boolean> {
    const info = await this.admin.request("GET", "/admin/bucket", { bucket }, signal);
    if (info.status === 404) return false;
    this.check(info, `read bucket ${bucket}`);
    const owner = String(field(info.body, "owner"));
    if (owner !== login) throw this.bucketNotOurs(login, bucket, owner);
    return true;
  }

  /**
   * Brings an existing user of ours to what the consumer is given: exactly `keys` (access key to
   * secret key), active, one bucket, `activeMark`. Where a key pair is to be added while a rotation
   * overlaps, `addingMark` (phase `add`) is written first, so a provider restarted before the mark
   * says `drain` knows a rotation was under way; so is the mark of a new mint time, so that the mark
   * never says an older password than the gateway holds. New or changed key pairs are made before
   * any other is removed.
   */
  private async repairUser(
    user: GatewayUser,
    login: string,
    keys: ReadonlyMap<string, string>,
    activeMark: string,
    addingMark: string,
    signal: AbortSignal,
  ): Promise<void> {
    const toSet = [...keys].filter(([accessKey, secret]) => {
      return user.keys.find((k) => k.accessKey === accessKey)?.secretKey !== secret;
    });
    // A key pair not given is the one a rotation retires, or one added behind the mesh's back: one
    // more way into the consumer's bucket.
    const toRemove = user.keys.filter((k) => !keys.has(k.accessKey));
    if (toSet.length > 0 && user.displayName !== addingMark) {
      this.check(
        await this.admin.request("POST", "/admin/user", { uid: login, "display-name": addingMark }, signal),
        `mark the rotation of gateway user ${login}`,
      );
    }
    for (const [accessKey, secret] of toSet) {
      const keyed = await this.admin.request(
        "PUT",
        "/admin/user",
        { key: "", uid: login, "access-key": accessKey, "secret-key": secret, "generate-key": "false" },
        signal,
      );
      if (keyed.status === 409) {
        throw new NotMadeHereError(login, this.config.instance, {
          resource: `the access key ${JSON.stringify(accessKey)} on the RADOS Gateway`,
          madeBy: "another gateway user holds it",
        });
      }
      this.check(keyed, `set a key of gateway user ${login}`);
    }
    for (const key of toRemove) {
      const removed = await this.admin.request(
        "DELETE",
        "/admin/user",
        { key: "", uid: login, "access-key": key.accessKey },
        signal,
      );
      if (removed.status !== 404) this.check(removed, `remove a key of gateway user ${login}`);
    }
    if (user.suspended || user.displayName !== activeMark || user.maxBuckets !== 1 || toSet.length > 0) {
      this.check(
        await this.admin.request(
          "POST",
          "/admin/user",
          { uid: login, suspended: "false", "display-name": activeMark, "max-buckets": "1" },
          signal,
        ),
        `enable gateway user ${login}`,
      );
    }
  }

  /**
   * Refuses an access key another gateway user holds (a person's, or another consumer's).
   * @throws NotMadeHereError naming the user that holds it.
   */
  private async refuseTakenKey(login: string, accessKey: string, signal: AbortSignal): Promise<void> {
    const owner = await this.ownerOfKey(accessKey, signal);
    if (owner === undefined || owner === login) return;
    throw new NotMadeHereError(login, this.config.instance, {
      resource: `the access key ${JSON.stringify(accessKey)} on the RADOS Gateway`,
      madeBy: `gateway user ${JSON.stringify(owner)} holds it`,
      fix: "remove that key or user by hand if nobody needs it, or give the consumer another name",
    });
  }

  /** The uid of the gateway user holding `accessKey`; undefined when none does. */
  private async ownerOfKey(accessKey: string, signal?: AbortSignal): Promise<string | undefined> {
    const answer = await this.admin.request("GET", "/admin/user", { "access-key": accessKey }, signal);
    // Ceph 16 answers a key nobody holds with 403 AccessDenied, not 404: every caller has read a
    // user by uid just before, so an admin lacking the `users` cap was refused there already.
    if (answer.status === 404 || (answer.status === 403 && answer.code === "AccessDenied")) return undefined;
    this.check(answer, `find the gateway user holding an access key`);
    return userOf(answer.body).uid;
  }

  private async readUser(uid: string, signal?: AbortSignal): Promise<GatewayUser | undefined> {
    const answer = await this.admin.request("GET", "/admin/user", { uid }, signal);
    if (answer.status === 404) return undefined;
    this.check(answer, `read gateway user ${uid}`);
    return userOf(answer.body);
  }

  private async listUids(signal?: AbortSignal): Promise<string[]> {
    const answer = await this.admin.request("GET", "/admin/metadata/user", {}, signal);
    this.check(answer, "list the gateway's users");
    return Array.isArray(answer.body) ? answer.body.filter((u): u is string => typeof u === "string") : [];
  }

  private notOurs(login: string, user: GatewayUser | undefined): NotMadeHereError {
    const other = user === undefined ? undefined : parseMark(user.displayName);
    return new NotMadeHereError(login, this.config.instance, {
      resource: `RADOS Gateway user ${JSON.stringify(login)}`,
      madeBy:
        user === undefined
          ? "there is no such user"
          : other === undefined
            ? "its display name carries no mark"
            : `it is marked by instance ${JSON.stringify(other.instance)}`,
    });
  }

  private bucketNotOurs(login: string, bucket: string, owner: string): NotMadeHereError {
    return new NotMadeHereError(login, this.config.instance, {
      resource: `the bucket ${JSON.stringify(bucket)} named from ${JSON.stringify(login)}`,
      madeBy: `it belongs to gateway user ${JSON.stringify(owner)}`,
      fix: "give the consumer another name, or remove or rename that bucket by hand if nobody needs it",
    });
  }

  private markOf(user: GatewayUser): Mark | undefined {
    const mark = parseMark(user.displayName);
    return mark?.instance === this.config.instance ? mark : undefined;
  }

  private check(answer: AdminAnswer, what: string): void {
    if (answer.status >= 200 && answer.status < 300) return;
    throw this.failure(answer, what);
  }

  private failure(answer: AdminAnswer, what: string): Error {
    if (
      answer.status === 403 &&
      (answer.code === "InvalidAccessKeyId" || answer.code === "SignatureDoesNotMatch")
    ) {
      return new S3AdminCredentialsError(this.config.endpoint, answer.code);
    }
    if (answer.status === 403)
      return new S3AdminCapsError(this.config.endpoint, what, answer.code || "AccessDenied");
    return new S3AdminError(what, answer.status, answer.code);
  }

  /** Best effort: a bus that is away never fails what was done. */
  private announce(event: "bucket.created" | "bucket.removed", body: Record<string, unknown>): void {
    if (this.events === undefined) return;
    try {
      this.events.emit(event, body);
    } catch (err) {
      this.logger.warn(`${event} for ${String(body["login"])} was not announced: ${messageOf(err)}`);
    }
  }
}

/**
 * The failure class of an error from the gateway or from this adapter: a refused admin key is
 * `credentials-rejected`, a gateway that cannot be reached is `unreachable`, and a refusal (a login
 * not ours, missing caps, a bucket asked for that is not the consumer's) is `refused`.
 */
export function classifyS3Error(err: unknown): FailureClass | undefined {
  // The kit's refusals (RefusalError) are classed by the harness before it asks.
  if (findInChain(err, (e) => e instanceof S3AdminCapsError) !== undefined) return "refused";
  return classifyBackendFailure(err);
}

/** Admin requests signed with SigV4 by `@smithy/signature-v4`, sent with fetch. */
export class SignedGatewayAdmin implements GatewayAdmin {
  private readonly signer: SignatureV4;
  private readonly url: URL;

  constructor(private readonly config: ResolvedS3Config) {
    this.url = new URL(config.endpoint);
    this.signer = new SignatureV4({
      service: "s3",
      region: config.region,
      credentials: { accessKeyId: config.admin.user, secretAccessKey: config.admin.password },
      sha256: Hash.bind(null, "sha256"),
      uriEscapePath: false,
    });
  }

  async request(
    method: "GET" | "PUT" | "POST" | "DELETE",
    path: string,
    query: Readonly<Record<string, string>>,
    signal?: AbortSignal,
  ): Promise<AdminAnswer> {
    const withFormat = { ...query, format: "json" };
    const port = this.url.port === "" ? undefined : Number(this.url.port);
    const signed = await this.signer.sign({
      method,
      protocol: this.url.protocol,
      hostname: this.url.hostname,
      ...(port === undefined ? {} : { port }),
      path,
      query: withFormat,
      headers: { host: this.url.host },
    });
    const search = Object.entries(withFormat)
      .map(([k, v]) => (v === "" ? escapeUri(k) : `${escapeUri(k)}=${escapeUri(v)}`))
      .join("&");
    // The caller's signal is looked at before the request, not handed to it: a pass shares one
    // signal among many requests at once, and each would add a listener to it. A request is bounded
    // by its own timeout.
    signal?.throwIfAborted();
    let response: Response;
    let text: string;
    try {
      response = await fetch(`${this.config.endpoint}${path}?${search}`, {
        method,
        headers: signed.headers,
        signal: AbortSignal.timeout(this.config.requestTimeoutMs),
      });
      text = await response.text();
    } catch (err) {
      throw new BackendUnreachableError("the RADOS Gateway", this.config.endpoint, { cause: err });
    }
    let body: unknown;
    try {
      body = text === "" ? undefined : (JSON.parse(text) as unknown);
    } catch {
      body = text;
    }
    const code = response.ok
      ? ""
      : String(field(body, "Code") ?? /<Code>([^<]*)<\/Code>/.exec(text)?.[1] ?? "");
    return { status: response.status, code, body };
  }
}

/** Consumer checks with `@aws-sdk/client-s3`, one short-lived client per key. */
export class SdkConsumerS3 implements ConsumerS3 {
  constructor(private readonly config: ResolvedS3Config) {}

  readonly listBucket: ConsumerCall = (bucket, accessKey, secretKey, signal) =>
    this.as(accessKey, secretKey, signal, (c) =>
      c.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 0 })),
    );

  readonly createBucket: ConsumerCall = (bucket, accessKey, secretKey, signal) =>
    this.as(accessKey, secretKey, signal, (c) => c.send(new CreateBucketCommand({ Bucket: bucket })));

  private async as(
    accessKey: string,
    secretKey: string,
    signal: AbortSignal | undefined,
    call: (client: S3Client) => Promise<unknown>,
  ): Promise<ConsumerAnswer> {
    signal?.throwIfAborted();
    const client = new S3Client({
      endpoint: this.config.endpoint,
      region: this.config.region,
      forcePathStyle: true,
      credentials: { accessKeyId: accessKey, secretAccessKey: secretKey },
      maxAttempts: 1,
      requestHandler: {
        requestTimeout: this.config.requestTimeoutMs,
        connectionTimeout: this.config.requestTimeoutMs,
      },
    });
    try {
      await call(client);
      return "ok";
    } catch (err) {
      const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
      const status = e.$metadata?.httpStatusCode;
      if (e.name === "BucketAlreadyOwnedByYou") return "owned-already";
      if (status === undefined || status >= 500)
        throw new BackendUnreachableError("the RADOS Gateway", this.config.endpoint, { cause: err });
      return { refused: e.name ?? "Error", status };
    } finally {
      client.destroy();
    }
  }
}

/** RFC 3986 escaping, as SigV4 signs a query. */
function escapeUri(text: string): string {
  return encodeURIComponent(text).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

function markText(mark: Mark): string {
  const { instance, state, bucket, retiredAt, why, rotation, minted } = mark;
  // One order of fields, so that the same mark is always the same display name.
  const body = { v: 1, instance, state, bucket, retiredAt, why, rotation, minted };
  return `${MARK_PREFIX}${JSON.stringify(body)}`;
}

/**
 * A mint time as the mark records it: `toISOString`'s one form (so the display name stays short
 * and the same instant is always the same mark); undefined when unknown or not a date.
 */
function mintedOf(minted: string | undefined): string | undefined {
  const at = readMinted(minted);
  return at === undefined ? undefined : new Date(at).toISOString();
}

/** A rotation's fields in the mark's one order; undefined for none. */
function rotationOf(rotation: RotationMark | undefined): RotationMark | undefined {
  if (rotation === undefined) return undefined;
  return { phase: rotation.phase, since: rotation.since, until: rotation.until };
}

/**
 * The key pairs a consumer signs with, access key to secret key: its login in use (`p.login`, or
 * `p.as`) with `p.password`, and while a rotation overlaps the other login with `retiring`.
 */
function keysOf(p: Provision, retiring: string | undefined): Map<string, string> {
  const slot = p.login ?? p.as;
  const keys = new Map([[slot, p.password]]);
  if (retiring !== undefined) keys.set(slot === p.as ? secondLogin(p.as) : p.as, retiring);
  return keys;
}

function parseMark(displayName: string): Mark | undefined {
  if (!displayName.startsWith(MARK_PREFIX)) return undefined;
  const body = parseJsonOrUndefined(displayName.slice(MARK_PREFIX.length));
  const mark = readMark(body);
  const { instance, bucket } = (body ?? {}) as Record<string, unknown>;
  if (mark === undefined || typeof instance !== "string" || typeof bucket !== "string") return undefined;
  return {
    instance,
    state: mark.state,
    bucket,
    retiredAt: mark.retiredAt,
    why: mark.why,
    ...(mark.rotation === undefined ? {} : { rotation: mark.rotation }),
    ...(mark.minted === undefined ? {} : { minted: mark.minted }),
  };
}

function userOf(body: unknown): GatewayUser {
  const keys = field(body, "keys");
  return {
    uid: String(field(body, "user_id") ?? ""),
    displayName: String(field(body, "display_name") ?? ""),
    suspended: Number(field(body, "suspended") ?? 0) !== 0,
    maxBuckets: Number(field(body, "max_buckets") ?? -1),
    keys: Array.isArray(keys)
      ? keys.map((k) => ({
          accessKey: String(field(k, "access_key") ?? ""),
          secretKey: String(field(k, "secret_key") ?? ""),
        }))
      : [],
  };
}

/** The bytes a bucket's objects hold, from its stats (`usage["rgw.main"].size`). */
function bytesOf(stats: unknown): number {
  const usage = field(stats, "usage");
  let bytes = 0;
  if (typeof usage === "object" && usage !== null) {
    for (const category of Object.values(usage as Record<string, unknown>)) {
      const size = Number(field(category, "size") ?? 0);
      if (Number.isFinite(size)) bytes += size;
    }
  }
  return bytes;
}

function field(value: unknown, name: string): unknown {
  return typeof value === "object" && value !== null ? (value as Record<string, unknown>)[name] : undefined;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
