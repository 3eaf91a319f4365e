// What the launchers of a private server process share: starting it on a free port (a few tries,
// since a port free when chosen may be taken before the server binds it), waiting until it answers,
// stopping it, and killing whatever is left when the test process exits.
import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import { freePort } from "./free-port.ts";
import { exitOnSignal } from "./exit-on-signal.ts";

// Servers still running when the process exits are killed, so a crashed or forgetful test run
// does not leave servers behind on a shared machine.
const running = new Set<ChildProcess>();
exitOnSignal();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** A started server process, and a promise that answers, in words, when it exits or cannot run. */
export interface SpawnedServer {
  readonly child: ChildProcess;
  readonly exited: Promise<string>;
}

/** Spawns `binary` with no stdio, to be killed if still running when the test process exits. */
export function spawnServer(binary: string, args: readonly string[]): SpawnedServer {
  const child = spawn(binary, args, { stdio: "ignore" });
  running.add(child);
  child.once("exit", () => running.delete(child));
  const exited = new Promise<string>((resolve) => {
    child.once("exit", (code, signal) => resolve(`exited (${code ?? signal})`));
    child.on("error", (err) => resolve(`could not run ${binary}: ${err.message}`));
  });
  return { child, exited };
}

/** How `awaitReady` asks a server whether it serves yet. */
export interface ReadyCheck {
  /** Asks the server once; what it said (a rejection counts as "not yet"). */
  readonly probe: () => Promise<string>;
  /** Whether what it said means it serves. */
  readonly ready: (reply: string) => boolean;
  /** What it should have said, for the give-up message ("INFO", "PONG"). */
  readonly expected: string;
  readonly withinMs: number;
  /** Stops the server when it does not come up in time. */
  readonly stopWithinMs: number;
  /** The server's log file, whose tail goes into the error. */
  readonly log: string;
  /** Makes the launcher's own error from what went wrong. */
  readonly fail: (detail: string) => Error;
}

/**
 * Asks the server until it serves; stops it when it does not within `check.withinMs`.
 * @throws what `check.fail` makes, with the log's tail, when it exits or does not answer in time.
 */
export async function awaitReady(server: SpawnedServer, check: ReadyCheck): Promise<ChildProcess> {
  const { child, exited } = server;
  const deadline = Date.now() + check.withinMs;
  for (;;) {
    const reply = await Promise.race([exited, check.probe().catch(() => "")]);
    if (check.ready(reply)) return child;
    if (
      child.exitCode !== null ||
      child.signalCode !== null ||
      reply.startsWith("exited") ||
      reply.startsWith("could not")
    ) {
      throw check.fail(`${reply}; log: ${await logTail(check.log)}`);
    }
    if (Date.now() > deadline) {
      await terminate(child, check.stopWithinMs);
      throw check.fail(`no ${check.expected} within ${check.withinMs} ms; log: ${await logTail(check.log)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Launches on a free port, choosing another when the launch fails (up to 3 tries).
 * @throws the last launch's error.
 */
export async function onFreePort(
  launch: (port: number) => Promise<ChildProcess>,
): Promise<{ port: number; child: ChildProcess }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      return { port, child: await launch(port) };
    } catch (err) {
      if (attempt >= 3) throw err;
    }
  }
}

/** SIGTERM, then SIGKILL after `withinMs`; answers once the process has exited. */
export async function terminate(child: ChildProcess, withinMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), withinMs);
  await exited;
  clearTimeout(timer);
}

/** The last 5 lines of a server's log, on one line, for an error message. */
export async function logTail(log: string): Promise<string> {
  try {
    const text = await readFile(log, "utf8");
    return text.trim().split("\n").slice(-5).join(" | ") || "(empty)";
  } catch {
    return "(no log)";
  }
}
