// The subjects the controller answers on, each answered one message at a time, in order; an error
// answering one message never stops the others.
import { respondInParts, sendReceipt, type BusLogger } from "@mesh/bus";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";

/** The queue group every controller answers in, so one request gets one answer. */
export const CONTROLLER_QUEUE = "mesh-controller";

/** Answers what the controller is asked on the bus, until stopped. */
export class BusAnswers {
  readonly #nc: NatsConnection;
  readonly #log: BusLogger;
  readonly #subscriptions: Subscription[] = [];
  /** Each subject's messages being answered, one after another. */
  readonly #chains: { current: Promise<void> }[] = [];

  constructor(nc: NatsConnection, logger: BusLogger) {
    this.#nc = nc;
    this.#log = logger;
  }

  /**
   * Answers every message on `subject` with what `handle` returns (nothing when it returns
   * undefined or the message wants no answer). `queued`: one controller of the queue group gets
   * each message; otherwise every controller does. A requester that asks for a receipt gets it as
   * the message arrives, before the messages ahead of it are answered: it then knows its request
   * was taken and waits for the answer rather than asking another server.
   */
  answer(
    subject: string,
    queued: boolean,
    handle: (data: Uint8Array, subject: string) => Promise<unknown>,
  ): void {
    const chain = { current: Promise.resolve() };
    this.#chains.push(chain);
    const sub = this.#nc.subscribe(subject, {
      ...(queued ? { queue: CONTROLLER_QUEUE } : {}),
      callback: (err, msg) => {
        if (err !== null) return;
        sendReceipt(this.#nc, msg);
        // One message at a time, in the order they came.
        chain.current = chain.current.then(async () => {
          try {
            const answer = await handle(msg.data, msg.subject);
            // In parts when the asker takes them: a large fleet's answer exceeds one message.
            if (answer !== undefined && msg.reply !== undefined && msg.reply !== "")
              respondInParts(this.#nc, msg, JSON.stringify(answer));
          } catch (err) {
            this.#log.error(`the controller could not answer on ${msg.subject}: ${(err as Error).message}`);
          }
        });
      },
    });
    this.#subscriptions.push(sub);
  }

  /** Stops taking messages, once those taken are answered. */
  async stop(): Promise<void> {
    for (const sub of this.#subscriptions.splice(0)) sub.unsubscribe();
    await Promise.all(this.#chains.splice(0).map((c) => c.current));
  }
}
