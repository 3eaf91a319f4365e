// An example app run as a child process the way the agent runs it (its manifest's `run`, from its
// directory, with the variables the test gives over this process's own), keeping everything it
// prints for the test's checks and failure messages.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** One example app running as a child process, with everything it printed. */
export interface RunningApp {
  readonly child: ChildProcess;
  output: string;
  readonly exited: Promise<number | null>;
}

interface Run {
  readonly command: string;
  readonly args: readonly string[];
}

/** What the app's manifest in `cwd` says to run, as the agent would read it (its built JavaScript). */
function manifestRun(cwd: string): Run {
  return (JSON.parse(readFileSync(join(cwd, "module.json"), "utf8")) as { run: Run }).run;
}

const started: RunningApp[] = [];

/** Starts the app in `cwd` with `env` over `process.env`; `killApps()` ends it, whatever happened. */
export function startApp(
  cwd: string,
  env: Readonly<Record<string, string>>,
  run: Run = manifestRun(cwd),
): RunningApp {
  const child = spawn(run.command, [...run.args], {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const app: RunningApp = {
    child,
    output: "",
    exited: new Promise((done) => child.once("exit", (code) => done(code))),
  };
  child.stdout?.on("data", (chunk: Buffer) => (app.output += chunk.toString("utf8")));
  child.stderr?.on("data", (chunk: Buffer) => (app.output += chunk.toString("utf8")));
  started.push(app);
  return app;
}

/** Kills (SIGKILL) every app `startApp` started: for a test's `after`. */
export function killApps(): void {
  for (const app of started) app.child.kill("SIGKILL");
}

/**
 * Waits until the app has printed a line matching `pattern` after `from` characters of output.
 * Fails, with everything it printed, when it exits first or `waitMs` passes.
 */
export async function waitForOutput(
  app: RunningApp,
  pattern: RegExp,
  waitMs: number,
  from = 0,
): Promise<RegExpExecArray> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const found = pattern.exec(app.output.slice(from));
    if (found) return found;
    if (app.child.exitCode !== null) {
      assert.fail(`the app exited (${app.child.exitCode}) before printing ${pattern}:\n${app.output}`);
    }
    if (Date.now() > deadline) assert.fail(`the app did not print ${pattern} in time:\n${app.output}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** How many times `pattern` occurs in `text`. */
export function count(text: string, pattern: RegExp): number {
  return text.match(new RegExp(pattern.source, "g"))?.length ?? 0;
}
