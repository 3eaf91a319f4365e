// Durable state on the bus: a JetStream KV bucket holding JSON values, kept on disk by the server
// (file storage), so a restarted controller or nats-server finds it as it was left.
import { jetstream, StorageType } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { isTooFewPeers } from "./bus-replicas.ts";
import { placeableReplicas } from "./replica-count.ts";
import { assertBucketName } from "./subjects.ts";

/** How to open a state bucket. */
export interface OpenStateOptions<T> {
  /**
   * Create the bucket when it is not there (the default, for its owner). A reader whose
   * permissions cannot create streams opens it with `create: false`.
   */
  readonly create?: boolean;
  /** Checks and types a value read from the bucket (a schema's `parse`, say); it throws on a bad value. */
  readonly parse?: (value: unknown) => T;
  /**
   * How long one read or write waits for the bus (default: the client's, 5 s). Shorter for a value
   * renewed often, so that a write the bus cannot take now is given up and tried again sooner.
   */
  readonly timeoutMs?: number;
}

/**
 * One change seen by `watch`: a value put, a key deleted, or a value that could not be read (which
 * does not end the watch: one bad value must not stop the others from being seen).
 */
export type StateChange<T> =
  | { readonly operation: "put"; readonly key: string; readonly revision: number; readonly value: T }
  | { readonly operation: "delete"; readonly key: string; readonly revision: number }
  | {
      readonly operation: "invalid";
      readonly key: string;
      readonly revision: number;
      readonly error: StateValueError;
    };

/** A running watch: iterate it for changes; `stop()` ends the iteration. */
export interface StateWatch<T> extends AsyncIterable<StateChange<T>> {
  stop(): void;
}

/** A KV bucket of JSON values of type `T`. */
export interface BusState<T> {
  readonly bucket: string;
  /**
   * The value at `key`, or undefined when there is none (or it was deleted).
   * @throws StateValueError when the stored value is not JSON or `parse` refuses it.
   */
  get(key: string): Promise<T | undefined>;
  /**
   * Stores `value` as JSON at `key` and returns the bucket's new revision.
   * @throws InvalidStateKeyError for a key KV cannot store.
   */
  put(key: string, value: T): Promise<number>;
  /** Deletes `key`; deleting a key that is not there is not an error. */
  delete(key: string): Promise<void>;
  /**
   * The value at `key` and its revision, or undefined when there is none.
   * @throws StateValueError as `get` does.
   */
  entry(key: string): Promise<{ readonly revision: number; readonly value: T } | undefined>;
  /**
   * Stores `value` at `key` only if the key's revision is still `revision` (0: only if there is
   * no value), and returns the new revision.
   * @throws StaleRevisionError when the key changed meanwhile (nothing is stored).
   */
  update(key: string, value: T, revision: number): Promise<number>;
  /** Every key that holds a value now. */
  keys(): Promise<string[]>;
  /**
   * Every key that holds a value now, with its value (or the StateValueError reading it gives), read
   * in one pass over the bucket: for a large bucket, far fewer round trips than a `get` per key.
   * @throws the bus's error when the bucket cannot be read.
   */
  values(): Promise<Map<string, T | StateValueError>>;
  /**
   * Every value now (as `put` changes), then each change as it happens. `key` narrows it to one
   * key or a wildcard of keys (`nodes.*`).
   * @throws InvalidStateKeyError for a key pattern KV cannot watch.
   */
  watch(options?: { key?: string }): Promise<StateWatch<T>>;
}

/** A key that NATS KV cannot store. */
export class InvalidStateKeyError extends Error {
  override name = "InvalidStateKeyError";
  constructor(
    readonly bucket: string,
    readonly key: string,
  ) {
    super(
      `key ${JSON.stringify(key)} cannot be stored in bucket ${bucket}: a key is made of a-z, A-Z, 0-9, ` +
        `-, _, =, / and ., and neither starts nor ends with a dot`,
    );
  }
}

/** A stored value that is not JSON, or not what `parse` accepts. */
export class StateValueError extends Error {
  override name = "StateValueError";
  constructor(
    readonly bucket: string,
    readonly key: string,
    options?: { cause?: unknown },
  ) {
    // The cause's message is left out: a JSON parser quotes the text it choked on.
    super(
      `the value at ${JSON.stringify(key)} in bucket ${bucket} is not what the mesh wrote there ` +
        `(not JSON, or not of the expected shape): put a good value or delete the key`,
      options,
    );
  }
}

/** The bucket could not be opened: not there (and not to be created), or not allowed. */
export class StateOpenError extends Error {
  override name = "StateOpenError";
  constructor(
    readonly bucket: string,
    options?: { cause?: unknown },
  ) {
    super(
      `the state bucket ${bucket} could not be opened` +
        `${options?.cause instanceof Error ? ` (${options.cause.message})` : ""}: ` +
        `check that it exists and that this connection's credentials allow it`,
      options,
    );
  }
}

/** A compare-and-set write found the key at another revision than the one it was given. */
export class StaleRevisionError extends Error {
  override name = "StaleRevisionError";
  constructor(
    readonly bucket: string,
    readonly key: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${JSON.stringify(key)} in bucket ${bucket} changed since it was read: nothing was stored; read it again`,
      options,
    );
  }
}

// JetStream's "wrong last sequence" (the key's revision was not the one expected).
const isWrongLastSequence = (err: unknown): boolean =>
  [10071, 10164].includes((err as { code?: unknown }).code as number) ||
  /wrong last sequence/i.test((err as Error).message ?? "");

/** How long creating a bucket may take (JetStream places its copies first). */
const CREATE_TIMEOUT_MS = 20_000;

/**
 * How long the consumer that lists a bucket's keys may take to be made before it is asked for
 * again, and how many times: JetStream places each such consumer on one server of the stream's,
 * and for some seconds after a server has gone down it may still choose that one, where the
 * consumer is never made (the request waits out its whole timeout). Asked again, it is placed anew.
 * The last try waits the usual timeout.
 */
const KEYS_TRY_MS = 2_000;
const KEYS_TRIES = 5;

/** A listing of the bucket's keys, asked for again as `KEYS_TRY_MS` says. */
export async function listKeys(kv: Pick<KV, "keys">): Promise<AsyncIterable<string> & { stop(): void }> {
  for (let tried = 1; tried < KEYS_TRIES; tried++) {
    const listing = kv.keys();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), KEYS_TRY_MS);
    });
    const keys = await Promise.race([listing, late]).finally(() => clearTimeout(timer));
    if (keys !== undefined) return keys;
    // Left to end on its own: a listing made late is stopped unread.
    listing.then(
      (madeLate) => madeLate.stop(),
      () => undefined,
    );
  }
  return kv.keys();
}

const KEY = /^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)*$/;
const WATCH_KEY = /^([-/_=a-zA-Z0-9]+|\*)(\.([-/_=a-zA-Z0-9]+|\*))*(\.>)?$|^>$/;

/**
 * Opens the KV bucket `bucket` on `nc`, creating it (file storage, latest value only, with
 * `replicasFor(nc)` copies) unless `options.create` is false.
 * @throws InvalidBucketNameError for a bad bucket name; StateOpenError when it cannot be opened.
 */
export async function openState<T>(
  nc: NatsConnection,
  bucket: string,
  options: OpenStateOptions<T> = {},
): Promise<BusState<T>> {
  assertBucketName(bucket);
  const parse = options.parse ?? ((value: unknown) => value as T);
  let kv: KV;
  try {
    const kvm = new Kvm(options.timeoutMs !== undefined ? jetstream(nc, { timeout: options.timeoutMs }) : nc);
    if (options.create === false) {
      kv = await kvm.open(bucket);
    } else {
      // While a server of the cluster is down, placing a replicated bucket takes JetStream several
      // seconds: made with a longer wait, then used with the usual one.
      const maker = new Kvm(jetstream(nc, { timeout: CREATE_TIMEOUT_MS }));
      const create = (replicas: number): Promise<KV> =>
        maker.create(bucket, { history: 1, storage: StorageType.File, replicas });
      const replicas = placeableReplicas(nc);
      // With a server of the cluster down, it is made with one copy now and raised at the next start.
      await create(replicas).catch((err: unknown) => {
        if (replicas > 1 && isTooFewPeers(err)) return create(1);
        throw err;
      });
      kv = await kvm.open(bucket);
    }
  } catch (err) {
    throw new StateOpenError(bucket, { cause: err });
  }

  const checkKey = (key: string, pattern = KEY): string => {
    if (!pattern.test(key)) throw new InvalidStateKeyError(bucket, key);
    return key;
  };
  const decode = (entry: KvEntry): T => {
    try {
      return parse(entry.json<unknown>());
    } catch (err) {
      throw new StateValueError(bucket, entry.key, { cause: err });
    }
  };

  return {
    bucket,
    async get(key) {
      const entry = await kv.get(checkKey(key));
      if (entry === null || entry.operation !== "PUT") return undefined;
      return decode(entry);
    },
    async put(key, value) {
      return kv.put(checkKey(key), JSON.stringify(value));
    },
    async delete(key) {
      await kv.delete(checkKey(key));
    },
    async entry(key) {
      const entry = await kv.get(checkKey(key));
      if (entry === null || entry.operation !== "PUT") return undefined;
      return { revision: entry.revision, value: decode(entry) };
    },
    async update(key, value, revision) {
      try {
        const data = JSON.stringify(value);
        return revision === 0
          ? await kv.create(checkKey(key), data)
          : await kv.update(checkKey(key), data, revision);
      } catch (err) {
        if (isWrongLastSequence(err)) throw new StaleRevisionError(bucket, key, { cause: err });
        throw err;
      }
    },
    async keys() {
      const found: string[] = [];
      for await (const key of await listKeys(kv)) found.push(key);
      return found;
    },
    async values() {
      // The bucket's history (in a bucket of one value per key, its values; in one that keeps
      // more, the older ones come first and are overwritten), in the order the bus stored it; it
      // ends once nothing more was pending, so an empty bucket is no wait.
      const found = new Map<string, T | StateValueError>();
      for await (const entry of await kv.history()) {
        if (entry.operation !== "PUT") {
          found.delete(entry.key);
          continue;
        }
        try {
          found.set(entry.key, decode(entry));
        } catch (err) {
          found.set(entry.key, err as StateValueError);
        }
      }
      return found;
    },
    async watch(watchOptions = {}) {
      const key = watchOptions.key !== undefined ? checkKey(watchOptions.key, WATCH_KEY) : undefined;
      const iterator = await kv.watch(key !== undefined ? { key } : {});
      return {
        stop: () => iterator.stop(),
        async *[Symbol.asyncIterator]() {
          for await (const entry of iterator) {
            const { key, revision } = entry;
            if (entry.operation !== "PUT") {
              yield { operation: "delete", key, revision };
              continue;
            }
            let value: T;
            try {
              value = decode(entry);
            } catch (err) {
              yield { operation: "invalid", key, revision, error: err as StateValueError };
              continue;
            }
            yield { operation: "put", key, revision, value };
          }
        },
      };
    },
  };
}
