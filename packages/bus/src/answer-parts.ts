// An answer too large for one NATS message (the default max_payload is 1 MiB: a large fleet's plan
// or status is more) goes as several replies to the same inbox, each saying which part of how many
// it is. A requester that can put them back together says so in a header; one that does not gets
// one message, as before.
import {
  createInbox,
  headers,
  NoRespondersError,
  TimeoutError,
  type Msg,
  type NatsConnection,
} from "@nats-io/transport-node";

/** The request header that says the answer may come in parts. */
export const ANSWER_IN_PARTS_HEADER = "Mesh-Answer-Parts";
/** The header of each part of an answer: `<index>/<count>`, from 1. */
export const ANSWER_PART_HEADER = "Mesh-Answer-Part";

/** At most this much of an answer goes in one message (well under the 1 MiB default). */
export const ANSWER_PART_BYTES = 256 * 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Whether the requester of `msg` takes an answer in parts. */
export function takesAnswerInParts(msg: Msg): boolean {
  return msg.headers?.get(ANSWER_IN_PARTS_HEADER) === "1";
}

/**
 * Answers `msg` with `text`: in parts of at most `partBytes` when its requester takes them (see
 * `requestInParts`), else as one message.
 * @throws what publishing throws (a closed connection, a message over the server's max_payload).
 */
export function respondInParts(
  nc: NatsConnection,
  msg: Msg,
  text: string,
  partBytes = ANSWER_PART_BYTES,
): void {
  if (msg.reply === undefined || msg.reply === "") return;
  if (!takesAnswerInParts(msg)) {
    msg.respond(text);
    return;
  }
  const bytes = encoder.encode(text);
  const count = Math.max(1, Math.ceil(bytes.length / partBytes));
  for (let i = 0; i < count; i++) {
    const h = headers();
    h.set(ANSWER_PART_HEADER, `${i + 1}/${count}`);
    nc.publish(msg.reply, bytes.subarray(i * partBytes, (i + 1) * partBytes), { headers: h });
  }
}

/** How `requestInParts` asks. */
export interface RequestInPartsOptions {
  /** How long to wait for the first part, and for each next one (ms). */
  readonly timeoutMs: number;
  /** The inbox prefix replies go to (the connection's `inboxPrefix`), when its user may only read its own. */
  readonly inboxPrefix?: string;
}

/**
 * Sends `body` on `subject` and answers the reply's text: one message, or every part of an answer
 * in parts put back together in order.
 * @throws NoRespondersError when nothing answers on `subject`; TimeoutError when the first part, or
 * a next one, does not come within `timeoutMs`.
 */
export async function requestInParts(
  nc: NatsConnection,
  subject: string,
  body: string,
  options: RequestInPartsOptions,
): Promise<string> {
  const inbox = createInbox(options.inboxPrefix);
  const sub = nc.subscribe(inbox);
  try {
    const h = headers();
    h.set(ANSWER_IN_PARTS_HEADER, "1");
    nc.publish(subject, body, { reply: inbox, headers: h });
    const iterator = sub[Symbol.asyncIterator]();
    const parts: Uint8Array[] = [];
    let count: number | undefined;
    while (count === undefined || parts.length < count) {
      const msg = await next(iterator, options.timeoutMs);
      if (msg.headers?.hasError === true && msg.headers.code === 503) throw new NoRespondersError(subject);
      const part = msg.headers?.get(ANSWER_PART_HEADER);
      // One message without a part header: an answer in one (or a controller that sends no parts).
      if (part === undefined || part === "") return msg.string();
      const [index, of] = part.split("/").map(Number);
      if (index !== parts.length + 1 || of === undefined || !Number.isSafeInteger(of) || of < 1)
        throw new Error(
          `the answer on ${subject} came with part ${part} where part ${parts.length + 1} was due`,
        );
      count = of;
      parts.push(msg.data);
    }
    const whole = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      whole.set(p, at);
      at += p.length;
    }
    return decoder.decode(whole);
  } finally {
    sub.unsubscribe();
  }
}

async function next(iterator: AsyncIterator<Msg>, timeoutMs: number): Promise<Msg> {
  let timer: NodeJS.Timeout | undefined;
  try {
    const result = await Promise.race([
      iterator.next(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new TimeoutError()), timeoutMs);
      }),
    ]);
    if (result.done === true) throw new TimeoutError();
    return result.value;
  } finally {
    clearTimeout(timer);
  }
}
