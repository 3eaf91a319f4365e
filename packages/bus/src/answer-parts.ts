// An answer too large for one NATS message (the default max_payload is 1 MiB: a large fleet's plan
// or status is more) goes as several replies to the same inbox, each saying which part of how many
// it is. A requester that can put them back together says so in a header; one that does not gets
// one message, as before.
//
// A requester may also ask for a receipt: an empty reply sent the moment an answerer takes the
// request, before it works on it. Without one within a few seconds, nothing took the request (it was
// routed to a server cut off from the cluster, say) and it may be asked again elsewhere; with one,
// it is being answered, however long that takes, and is not asked twice.
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

/** The request header that asks for a receipt, and the header of the receipt itself. */
export const RECEIPT_HEADER = "Mesh-Receipt";

/** At most this much of an answer goes in one message (well under the 1 MiB default). */
export const ANSWER_PART_BYTES = 256 * 1024;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Whether the requester of `msg` takes an answer in parts. */
export function takesAnswerInParts(msg: Msg): boolean {
  return msg.headers?.get(ANSWER_IN_PARTS_HEADER) === "1";
}

/**
 * Sends `msg`'s requester its receipt, when it asked for one (see `sendRequest`): that the request
 * was taken and is being answered. Call it as soon as the message arrives, before working on it.
 * @throws nothing: a receipt that cannot be sent is left out (the requester may ask again).
 */
export function sendReceipt(nc: NatsConnection, msg: Msg): void {
  if (msg.reply === undefined || msg.reply === "" || msg.headers?.get(RECEIPT_HEADER) !== "1") return;
  try {
    const h = headers();
    h.set(RECEIPT_HEADER, "1");
    nc.publish(msg.reply, new Uint8Array(0), { headers: h });
  } catch {
    // A closed or draining connection: the answer would not go either.
  }
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

/** How `sendRequest` asks. */
export interface SendRequestOptions {
  /** The inbox prefix replies go to (the connection's `inboxPrefix`), when its user may only read its own. */
  readonly inboxPrefix?: string;
  /** Ask the answerer for a receipt the moment it takes the request (see `sendReceipt`). */
  readonly receipt?: boolean;
}

/** A request sent, its answer read as it comes. */
export interface SentRequest {
  /**
   * Resolves when an answerer took the request: its receipt, or the first message of its answer.
   * @throws NoRespondersError when nothing listens on the subject (the server says so at once).
   */
  readonly taken: Promise<void>;
  /**
   * The answer's text: one message, or every part put back together in order.
   * @throws NoRespondersError when nothing listens on the subject; TimeoutError when its first
   * message, or a next part, does not come within `timeoutMs`.
   */
  answer(timeoutMs: number): Promise<string>;
  /** Stops reading: what comes after is dropped. Idempotent. */
  close(): void;
}

/**
 * Sends `body` on `subject` with a reply inbox of its own, saying that the answer may come in parts
 * (and asking for a receipt, with `options.receipt`).
 */
export function sendRequest(
  nc: NatsConnection,
  subject: string,
  body: string,
  options: SendRequestOptions = {},
): SentRequest {
  const inbox = createInbox(options.inboxPrefix);
  const queue: Msg[] = [];
  let wake: (() => void) | undefined;
  let markTaken: () => void = () => {};
  let refuse: (err: Error) => void = () => {};
  const taken = new Promise<void>((resolve, reject) => {
    markTaken = resolve;
    refuse = reject;
  });
  // Nobody may be waiting on it (the answer is read without it): never an unhandled rejection.
  taken.catch(() => undefined);
  const sub = nc.subscribe(inbox, {
    callback: (err, msg) => {
      if (err !== null) return;
      if (isNoResponders(msg)) refuse(new NoRespondersError(subject));
      else markTaken();
      queue.push(msg);
      wake?.();
    },
  });
  const h = headers();
  h.set(ANSWER_IN_PARTS_HEADER, "1");
  if (options.receipt === true) h.set(RECEIPT_HEADER, "1");
  nc.publish(subject, body, { reply: inbox, headers: h });

  const next = async (timeoutMs: number): Promise<Msg> => {
    for (;;) {
      const msg = queue.shift();
      if (msg !== undefined) {
        if (msg.headers?.get(RECEIPT_HEADER) === "1" && msg.data.length === 0) continue;
        return msg;
      }
      if (sub.isClosed()) throw new TimeoutError();
      let timer: NodeJS.Timeout | undefined;
      const arrived = await new Promise<boolean>((resolve) => {
        wake = () => resolve(true);
        timer = setTimeout(() => resolve(false), timeoutMs);
      }).finally(() => {
        wake = undefined;
        clearTimeout(timer);
      });
      if (!arrived) throw new TimeoutError();
    }
  };
  return {
    taken,
    async answer(timeoutMs) {
      const parts: Uint8Array[] = [];
      let count: number | undefined;
      while (count === undefined || parts.length < count) {
        const msg = await next(timeoutMs);
        if (isNoResponders(msg)) throw new NoRespondersError(subject);
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
    },
    close() {
      if (!sub.isClosed()) sub.unsubscribe();
      wake?.();
    },
  };
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
  const sent = sendRequest(nc, subject, body, {
    ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
  });
  try {
    return await sent.answer(options.timeoutMs);
  } finally {
    sent.close();
  }
}

// The server's own reply when nothing listens on the subject.
function isNoResponders(msg: Msg): boolean {
  return msg.headers?.hasError === true && msg.headers.code === 503;
}
