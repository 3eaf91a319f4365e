// Runs the real `mesh` executable as a child process, as an operator's shell would.

import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

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
  readonly done: Promise<MeshRun>;
}

/** Starts `mesh args…` with a clean environment plus `env`; stdin is a pipe (not a terminal). */
export function startMesh(args: readonly string[], env: Readonly<Record<string, string>> = {}): MeshProcess {
  const child = spawn(process.execPath, [MESH_BIN, ...args], {
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

/** Runs `mesh args…` to the end, with stdin closed at once. */
export async function runMesh(
  args: readonly string[],
  env: Readonly<Record<string, string>> = {},
): Promise<MeshRun> {
  const started = startMesh(args, env);
  started.child.stdin?.end();
  return started.done;
}
