// Waiting in tests for something real to happen (a login to appear, a file to be written, a
// scrape to show a count): poll until it does. The deadline only ends a test that would otherwise
// hang; nothing here asserts how long anything takes.

/** How long `until` keeps asking, and how often. */
export interface UntilOptions {
  /** Gives up after this many seconds (default 120). */
  readonly seconds?: number;
  /** The pause between two asks, in milliseconds (default 200). */
  readonly everyMs?: number;
}

/**
 * Asks `probe` until it answers something other than `undefined` or `false`, and returns that
 * answer. A probe that throws counts as "not yet"; its last error is named if the deadline passes.
 * `options` may be a number of seconds.
 * @throws Error `gave up waiting for <what>: <last error>` after the deadline.
 */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined | false> | T | undefined | false,
  options: UntilOptions | number = {},
): Promise<T> {
  const { seconds = 120, everyMs = 200 } = typeof options === "number" ? { seconds: options } : options;
  const deadline = Date.now() + seconds * 1000;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      const why = last instanceof Error ? last.message : last === undefined ? "" : String(last);
      throw new Error(`gave up waiting for ${what}${why === "" ? "" : `: ${why}`}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
