// Every stream of the mesh's account, read and written back through JetStream's own API: what
// `mesh backup` keeps and `mesh restore` loads. Read through the bus, never by copying a running
// server's files, so a backup of a running mesh is consistent: each stream is read up to the last
// message it held when the backup began. Generic on purpose: the account is the mesh's alone, so
// every stream in it (each KV bucket, each ledger, and whatever bucket a later version adds) is
// the mesh's, and is kept without this file knowing its name.
import { DeliverPolicy, jetstream, jetstreamManager, type StreamConfig } from "@nats-io/jetstream";
import { headers as natsHeaders, type NatsConnection } from "@nats-io/transport-node";

/** One stream as the backup keeps it: its configuration and how many messages follow. */
export interface StreamHeader {
  readonly name: string;
  /** The server's own configuration of it, as `STREAM.INFO` gave it. */
  readonly config: Readonly<Record<string, unknown>>;
  /** How many messages it held (and the backup keeps). */
  readonly messages: number;
  readonly firstSeq: number;
  readonly lastSeq: number;
}

/** One message of a stream as the backup keeps it. */
export interface StreamMessage {
  readonly seq: number;
  readonly subject: string;
  /** When the bus stored it (ISO 8601): the history's own time, shown after a restore too. */
  readonly time: string;
  /** Its headers, each name with its values (KV operations, rollups), or absent. */
  readonly headers?: readonly (readonly [string, readonly string[]])[];
  /** Its payload, base64. */
  readonly data: string;
}

/** What `dumpStreams` reports as it goes, for progress. */
export interface DumpProgress {
  stream(header: StreamHeader): void | Promise<void>;
  message(stream: string, message: StreamMessage): void | Promise<void>;
}

/** How long each read of a stream may go without a message before it is given up. */
const READ_IDLE_MS = 30_000;

/**
 * Headers the server checks on publish (a compare-and-set's expected sequence, a de-duplication
 * id), kept with the message as it was first sent: sent again, they would refuse the restore.
 */
const notResent = (name: string): boolean => {
  const lower = name.toLowerCase();
  return lower === "nats-msg-id" || lower.startsWith("nats-expected-");
};

/** The names of every stream of the connection's account, sorted. */
export async function streamNames(nc: NatsConnection): Promise<string[]> {
  const jsm = await jetstreamManager(nc, { timeout: 20_000 });
  const names: string[] = [];
  for await (const name of jsm.streams.names()) names.push(name);
  return names.sort();
}

/**
 * Reads every stream of the connection's account (or those `only` keeps): each one's configuration,
 * then its messages in order, up to the last one it held when it was first asked. Handed to
 * `progress` as they come, so a large history is never held in memory.
 * @throws the bus's error when a stream cannot be listed or read; an Error when a stream stops
 * delivering for 30 s.
 */
export async function dumpStreams(
  nc: NatsConnection,
  progress: DumpProgress,
  only: (name: string) => boolean = () => true,
): Promise<{ streams: number; messages: number }> {
  const jsm = await jetstreamManager(nc, { timeout: 20_000 });
  const js = jetstream(nc, { timeout: 20_000 });
  const names = (await streamNames(nc)).filter(only);
  let total = 0;
  for (const name of names) {
    const info = await jsm.streams.info(name);
    const header: StreamHeader = {
      name,
      config: info.config as unknown as Record<string, unknown>,
      messages: info.state.messages,
      firstSeq: info.state.first_seq,
      lastSeq: info.state.last_seq,
    };
    await progress.stream(header);
    if (header.messages === 0) continue;
    const consumer = await js.consumers.get(name, {
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: header.firstSeq,
    });
    const messages = await consumer.consume({ idle_heartbeat: 5_000 });
    let idle: NodeJS.Timeout | undefined;
    let stalled = false;
    const arm = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        stalled = true;
        void messages.close();
      }, READ_IDLE_MS);
    };
    arm();
    let last = 0;
    try {
      for await (const m of messages) {
        arm();
        const seq = m.info.streamSequence;
        // Written after the backup began: not part of it.
        if (seq > header.lastSeq) break;
        const kept: StreamMessage = {
          seq,
          subject: m.subject,
          time: new Date(Math.floor(m.info.timestampNanos / 1_000_000)).toISOString(),
          ...(m.headers !== undefined
            ? { headers: [...m.headers.keys()].map((k) => [k, m.headers!.values(k)] as const) }
            : {}),
          data: Buffer.from(m.data).toString("base64"),
        };
        await progress.message(name, kept);
        total += 1;
        last = seq;
        if (seq >= header.lastSeq || m.info.pending === 0) break;
      }
    } finally {
      clearTimeout(idle);
      messages.stop();
    }
    if (stalled)
      throw new Error(
        `stream ${name} stopped delivering at sequence ${last} of ${header.lastSeq} for ${READ_IDLE_MS / 1000} s`,
      );
  }
  return { streams: names.length, messages: total };
}

/** A stream that a restore would overwrite is already on the bus. */
export class StreamExistsError extends Error {
  override name = "StreamExistsError";
  constructor(readonly stream: string) {
    super(`stream ${stream} is already on the bus`);
  }
}

/**
 * Makes stream `header.name` as it was (its configuration, with `replicas` copies when given) and
 * returns a function that publishes its messages in order, then `done` to check the count.
 * @throws StreamExistsError when the stream is already there; the bus's error when it cannot be made.
 */
export async function loadStream(
  nc: NatsConnection,
  header: StreamHeader,
  replicas?: number,
): Promise<{ add(message: StreamMessage): Promise<void>; done(): Promise<number> }> {
  const jsm = await jetstreamManager(nc, { timeout: 20_000 });
  const js = jetstream(nc, { timeout: 20_000 });
  const exists = await jsm.streams.info(header.name).then(
    () => true,
    () => false,
  );
  if (exists) throw new StreamExistsError(header.name);
  const config = { ...header.config } as Partial<StreamConfig> & Record<string, unknown>;
  if (replicas !== undefined) config.num_replicas = replicas;
  // A sealed stream takes no message: sealed again once its messages are in.
  const sealed = config["sealed"] === true;
  delete config["sealed"];
  await jsm.streams.add({ ...config, name: header.name } as StreamConfig);
  let added = 0;
  return {
    async add(message) {
      const h = natsHeaders();
      let any = false;
      for (const [name, values] of message.headers ?? []) {
        if (notResent(name)) continue;
        for (const value of values) h.append(name, value);
        any = true;
      }
      await js.publish(message.subject, Buffer.from(message.data, "base64"), {
        ...(any ? { headers: h } : {}),
        expect: { streamName: header.name },
      });
      added += 1;
    },
    async done() {
      if (sealed) await jsm.streams.update(header.name, { ...config, sealed: true } as StreamConfig);
      return added;
    },
  };
}
