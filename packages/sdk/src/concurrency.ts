import type { Clock } from "./collaborators.ts";

/** How long work over many items runs before it lets the event loop answer others (ms). */
const YIELD_EVERY_MS = 10;

/**
 * How long it runs while an answer is being written to someone who waits for it: the kernel takes
 * one socket buffer of it (a few hundred KB) per turn of the event loop, so a status of 100,000
 * consumers (15 MB) needs some 75 turns, which at 10 ms each would be most of a second.
 */
const YIELD_WHILE_WRITING_MS = 1;

let writing = 0;

/**
 * Says that a large answer is being written out, until the function it returns is called (once;
 * more calls do nothing). Meanwhile work over many items lets the event loop run more often.
 */
export function writingAnswer(): () => void {
  writing++;
  let done = false;
  return () => {
    if (done) return;
    done = true;
    writing--;
  };
}

function sliceMs(): number {
  return writing > 0 ? YIELD_WHILE_WRITING_MS : YIELD_EVERY_MS;
}

/**
 * Lets timers, sockets and file events run before going on. A promise that settles at once (an
 * in-memory backend, a cached answer) never leaves the microtask queue, so work over 100,000 items
 * would otherwise hold the process until it ends.
 */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Says when work done in one go (no I/O in between) has held the event loop long enough: the
 * caller then awaits `yieldToEventLoop()`, so a tool asked meanwhile is answered.
 */
export class YieldTimer {
  #since = performance.now();

  /** True once a few milliseconds have passed since it last said so (or was made). */
  due(): boolean {
    const now = performance.now();
    if (now - this.#since < sliceMs()) return false;
    this.#since = now;
    return true;
  }
}

/**
 * Runs `fn` over `items` with at most `limit` at once; resolves when all have settled. It yields to
 * the event loop at least every few milliseconds, so tools and signals are answered while it runs.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  let yieldedAt = performance.now();
  // One pause shared by every worker: were each to yield on its own, the others would go on in
  // microtasks and the event loop would wait for all of them.
  let pause: Promise<void> | undefined;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
      if (pause === undefined && performance.now() - yieldedAt >= sliceMs()) {
        pause = yieldToEventLoop().then(() => {
          pause = undefined;
          yieldedAt = performance.now();
        });
      }
      if (pause !== undefined) await pause;
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, limit), items.length) }, worker));
}

/** The harness stopped waiting for an adapter call. */
export class TimeoutError extends Error {
  override name = "TimeoutError";
  constructor(
    readonly what: string,
    readonly ms: number,
  ) {
    super(`${what}: no answer within ${Math.round(ms / 1000)}s (timed out)`);
  }
}

/**
 * Runs `fn` with an AbortSignal that is aborted after `ms` on `clock`; rejects with TimeoutError then,
 * whether or not `fn` listens to the signal. `settled` resolves when `fn` itself has finished, so a
 * caller can avoid starting the same work again while a late answer is still on its way.
 */
export function withTimeout<T>(
  clock: Clock,
  ms: number,
  what: string,
  fn: (signal: AbortSignal) => Promise<T>,
): { result: Promise<T>; settled: Promise<void> } {
  const controller = new AbortController();
  const work = fn(controller.signal);
  const settled = work.then(
    () => undefined,
    () => undefined,
  );
  const result = new Promise<T>((resolve, reject) => {
    const timer = clock.setTimeout(() => {
      controller.abort();
      reject(new TimeoutError(what, ms));
    }, ms);
    work.then(
      (value) => {
        clock.clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clock.clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
  return { result, settled };
}

/** A lock that runs what holds it one at a time, in the order asked. */
export class Mutex {
  #tail: Promise<void> = Promise.resolve();

  /** Runs `fn` once every earlier holder has finished. */
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.#tail.then(fn);
    this.#tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result;
  }
}
