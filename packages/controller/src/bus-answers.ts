// The subjects the controller answers on, each read by its own loop; one message at a time per
// subject, and an error answering one message never ends the loop.
import { respondInParts, type BusLogger } from "@mesh/bus";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";

/** The queue group every controller answers in, so one request gets one answer. */
export const CONTROLLER_QUEUE = "mesh-controller";

/** Answers what the controller is asked on the bus, until stopped. */
export class BusAnswers {
  readonly #nc: NatsConnection;
  readonly #log: BusLogger;
  readonly #subscriptions: Subscription[] = [];
  readonly #loops: Promise<void>[] = [];

  constructor(nc: NatsConnection, logger: BusLogger) {
    this.#nc = nc;
    this.#log = logger;
  }

  /**
   * Answers every message on `subject` with what `handle` returns (nothing when it returns
   * undefined or the message wants no answer). `queued`: one controller of the queue group gets
   * each message; otherwise every controller does.
   */
  answer(
    subject: string,
    queued: boolean,
    handle: (data: Uint8Array, subject: string) => Promise<unknown>,
  ): void {
    const sub = this.#nc.subscribe(subject, queued ? { queue: CONTROLLER_QUEUE } : {});
    this.#subscriptions.push(sub);
    this.#loops.push(
      (async () => {
        for await (const msg of sub) {
          try {
            const answer = await handle(msg.data, msg.subject);
            // In parts when the asker takes them: a large fleet's answer exceeds one message.
            if (answer !== undefined && msg.reply !== undefined && msg.reply !== "")
              respondInParts(this.#nc, msg, JSON.stringify(answer));
          } catch (err) {
            this.#log.error(`the controller could not answer on ${msg.subject}: ${(err as Error).message}`);
          }
        }
      })(),
    );
  }

  /** Stops answering, once each loop has finished the message it was answering. */
  async stop(): Promise<void> {
    for (const sub of this.#subscriptions.splice(0)) sub.unsubscribe();
    await Promise.all(this.#loops.splice(0));
  }
}
