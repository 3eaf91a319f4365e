// How `mesh up` and `mesh agent` take SIGINT and SIGTERM: the first starts a clean stop (and aborts
// whatever is still starting), a second one is said and changes nothing (a second Ctrl-C must not
// leave the bus or a module behind), and a deadline bounds the whole stop: once it passes, what the
// mesh started is killed and the process exits.
import { isRunning, ProcessRecords } from "@mesh/agent";

/** A process's stop signals, watched. */
export interface StopSignals {
  /** Resolves with the first SIGINT or SIGTERM. */
  readonly signalled: Promise<NodeJS.Signals>;
  /** Aborted with the first signal: what is still starting gives up. */
  readonly signal: AbortSignal;
  /** Stops watching (the stop is over). */
  dispose(): void;
}

/** What `watchStopSignals` is told. */
export interface StopSignalsOptions {
  readonly say: (message: string) => void;
  /** How long a clean stop may take, from the first signal. */
  readonly withinMs: number;
  /** Called when the clean stop took longer than `withinMs`, just before the process exits 1. */
  readonly onDeadline: () => void;
}

/** Watches SIGINT and SIGTERM for a clean, bounded stop. */
export function watchStopSignals(options: StopSignalsOptions): StopSignals {
  const controller = new AbortController();
  let received: NodeJS.Signals | undefined;
  let deadline: NodeJS.Timeout | undefined;
  let resolve: (signal: NodeJS.Signals) => void = () => undefined;
  const signalled = new Promise<NodeJS.Signals>((r) => (resolve = r));
  const onSignal = (signal: NodeJS.Signals): void => {
    if (received !== undefined) {
      options.say(
        `${signal} again: already stopping, in order; done within ${options.withinMs / 1000} s of the first`,
      );
      return;
    }
    received = signal;
    options.say(`${signal}: stopping cleanly, within ${options.withinMs / 1000} s (again changes nothing)`);
    controller.abort();
    deadline = setTimeout(() => {
      options.say(`the stop took longer than ${options.withinMs / 1000} s: killing what is left`);
      options.onDeadline();
      process.exit(1);
    }, options.withinMs);
    deadline.unref();
    resolve(signal);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  // A stop goes on when whoever read the output is gone (a closed pipe): its children must not be left.
  const ignore = (): void => undefined;
  process.stdout.on("error", ignore);
  process.stderr.on("error", ignore);
  return {
    signalled,
    signal: controller.signal,
    dispose() {
      clearTimeout(deadline);
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      process.stdout.off("error", ignore);
      process.stderr.off("error", ignore);
    },
  };
}

/**
 * Sends SIGKILL to every process recorded in the records of `dirs` that still runs as recorded
 * (to its process group): the last resort of a stop that did not end in time.
 */
export function killRecorded(dirs: readonly string[]): void {
  for (const dir of dirs) {
    let records;
    try {
      records = new ProcessRecords(dir).list();
    } catch {
      continue;
    }
    for (const r of records) {
      if (!isRunning(r.pid, r.start)) continue;
      try {
        process.kill(-r.pid, "SIGKILL");
      } catch {
        try {
          process.kill(r.pid, "SIGKILL");
        } catch {
          // gone meanwhile
        }
      }
    }
  }
}
