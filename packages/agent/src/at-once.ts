// Work on many files at once, a few at a time: each write is synced on its own, and a disk takes
// many syncs at once in about the time of one.

/**
 * How many files are written at once by a step that writes one (or a few) per secret or module.
 * The order that matters between files (every new secret before the contributions file naming it,
 * a rotation's steps) is kept between such steps, never within one.
 */
export const FILES_AT_ONCE = 16;

/**
 * Calls `fn` for each of `items`, at most `most` at once; the first failure is thrown once every
 * call under way has ended, and no further item is started after it.
 */
export async function eachAtOnce<T>(
  items: readonly T[],
  most: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let failed: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (next < items.length && failed === undefined) {
      const item = items[next++] as T;
      await fn(item).catch((err: unknown) => {
        failed ??= { err };
      });
    }
  };
  await Promise.all(Array.from({ length: Math.min(most, items.length) }, worker));
  if (failed !== undefined) throw failed.err;
}
