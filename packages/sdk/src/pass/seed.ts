// The first stage: what this provider made, read back from the backend's own marks (its
// inventory), before anything asked is compared with it.

import type { PassContext } from "./context.ts";

/** Reads what this provider made into the book, once the backend answers. */
export class SeedStage {
  #seeded = false;
  #problem: string | undefined;

  constructor(private readonly ctx: PassContext) {}

  /** Whether the inventory was read: until it is, nothing is retired. */
  get seeded(): boolean {
    return this.#seeded;
  }

  async run(): Promise<void> {
    if (this.#seeded) return;
    const { adapter, book, log, report, settings } = this.ctx;
    try {
      const entries = await adapter.inventory();
      for (const e of entries) book.seeded(e);
      this.#seeded = true;
      // A drain read back from the marks ends at its grace bound, as it would have without the restart.
      this.ctx.wakes.wakeForDrains();
      const retired = entries.filter((e) => e.state === "retired").length;
      log.info(
        `found ${entries.length - retired} active and ${retired} retired consumer(s) made by instance ${settings.instance}`,
      );
      if (this.#problem) log.info("the backend's inventory is readable again");
      this.#problem = undefined;
    } catch (err) {
      const text = report.describe(err, report.passwords());
      if (text !== this.#problem) {
        log.warn(
          `cannot read what this provider made from the backend (${text}); nothing is retired until it can`,
        );
      }
      this.#problem = text;
    }
  }
}
