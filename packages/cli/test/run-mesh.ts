// Runs `mesh`: the real executable as a child process, as an operator's shell would, or the same
// commands in this process (a spawned mesh costs seconds to start, most of a CLI test's time).

import { type ChildProcess, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { credsFor, newUserKeys, type BusAuthority } from "@mesh/bus";
import { OPERATOR_IDENTITY, operatorPermissions } from "@mesh/controller";
import { until } from "@mesh/testkit";
import { runCli } from "../src/cli.ts";
import type { CliIo } from "../src/io.ts";

/** The `mesh` executable of this checkout. */
export const MESH_BIN = fileURLToPath(new URL("../bin/mesh.js", import.meta.url));

/** What a finished `mesh` said and how it ended. */
export interface MeshRun {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * The environment without any MESH_ variable of the shell that runs the tests, nor FORCE_COLOR or
 * NO_COLOR (node --test on a terminal sets FORCE_COLOR for its children), plus `env`.
 */
export function cleanEnv(env: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const base = Object.fromEntries(
    Object.entries(process.env).filter(
      ([key]) => !key.startsWith("MESH_") && key !== "FORCE_COLOR" && key !== "NO_COLOR",
    ),
  );
  return { ...base, ...env };
}

/** A started `mesh` whose output is collected as it comes. */
export interface MeshProcess {
  readonly child: ChildProcess;
  /** Everything said so far on both streams. */
  output(): string;
  /** Resolves once the output so far matches `pattern`; rejects if the process ends first. */
  waitFor(pattern: RegExp): Promise<void>;
  /**
   * The testkit's `until` (every half second, `seconds` at most, default 120), and when it gives up,
   * the end of what this mesh said: what a test through a running mesh waits with.
   */
  until<T>(what: string, probe: () => Promise<T | undefined | false>, seconds?: number): Promise<T>;
  readonly done: Promise<MeshRun>;
}

/**
 * Starts `mesh args…` with a clean environment plus `env`, in `cwd` (default: this process's);
 * stdin is a pipe (not a terminal).
 */
export function startMesh(
  args: readonly string[],
  env: Readonly<Record<string, string>> = {},
  cwd?: string,
): MeshProcess {
  const child = spawn(process.execPath, [MESH_BIN, ...args], {
    cwd,
    env: cleanEnv(env),
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const waiters = new Set<() => void>();
  const changed = (): void => {
    for (const check of waiters) check();
  };
  child.stdout.on("data", (chunk: Buffer) => {
    stdout += chunk.toString("utf8");
    changed();
  });
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
    changed();
  });
  const done = new Promise<MeshRun>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve({ code, signal, stdout, stderr }));
  });
  const output = (): string => `${stdout}${stderr}`;
  return {
    child,
    output,
    done,
    until: (what, probe, seconds = 120) =>
      until(what, probe, { seconds, everyMs: 500 }).catch((err: unknown) => {
        throw new Error(`${(err as Error).message}; mesh up said:\n${output().slice(-8000)}`);
      }),
    waitFor(pattern) {
      return new Promise((resolve, reject) => {
        const check = (): void => {
          if (pattern.test(output())) {
            waiters.delete(check);
            resolve();
          }
        };
        waiters.add(check);
        check();
        void done.then(() => {
          if (!pattern.test(output()))
            reject(new Error(`mesh ended before saying ${pattern}; it said:\n${output()}`));
        });
      });
    },
  };
}

/** Runs `mesh args…` to the end, in `cwd` (default: this process's), with stdin closed at once. */
export async function runMesh(
  args: readonly string[],
  env: Readonly<Record<string, string>> = {},
  cwd?: string,
): Promise<MeshRun> {
  const started = startMesh(args, env, cwd);
  started.child.stdin?.end();
  return started.done;
}

/** What a `mesh` run in this process said and the exit code it returned. */
export interface InProcessRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Runs `mesh args…` in this process through `runCli`, collecting what it says. By default the
 * environment is empty, standard input is empty and not a terminal, and neither output is a
 * terminal; `io` changes any of these. An `out` or `err` given in `io` is told each text as it is
 * said, besides it being collected.
 */
export async function meshInProcess(args: readonly string[], io: Partial<CliIo> = {}): Promise<InProcessRun> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    env: {},
    stdin: Readable.from([]),
    ...io,
    out: (text) => {
      stdout += text;
      io.out?.(text);
    },
    err: (text) => {
      stderr += text;
      io.err?.(text);
    },
  });
  return { code, stdout, stderr };
}

/**
 * Writes what `mesh up` leaves in `state` for an operator's shell: `operator.creds` (0600, an operator
 * credential from `authority`) and `bus.json` (where the bus is), so `mesh status`, `mesh ledger`
 * and `mesh tool` can ask the controller on `servers`.
 */
export async function writeOperatorState(
  authority: BusAuthority,
  state: string,
  servers: string,
): Promise<void> {
  const keys = newUserKeys();
  const jwt = await authority.issueUser({
    name: OPERATOR_IDENTITY,
    publicKey: keys.publicKey,
    permissions: operatorPermissions(),
  });
  await writeFile(join(state, "operator.creds"), credsFor(jwt, keys.seed), { mode: 0o600 });
  await writeFile(join(state, "bus.json"), JSON.stringify({ servers: [servers] }));
}
