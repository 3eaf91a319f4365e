// What the mesh started, kept where the next start finds it. Node has no PR_SET_PDEATHSIG: a
// `kill -9` of the mesh leaves its children running under PID 1. So every child is recorded with its
// PID and its start time (`/proc/<pid>/stat` field 22), which tells one of our orphans from a
// process that was given the same PID since; and each child carries an environment marker, so one
// killed before its record was written is still found by scanning `/proc/*/environ`. The next start
// stops them all (never adopts: their log pipes died with their parent), then starts its own.
import {
  closeSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";
import type { BusLogger } from "@mesh/bus";

/** One process the mesh started. */
export interface ProcessRecord {
  /** `bus` for the embedded nats-server, `module` for a module's process (the leader of its group). */
  readonly kind: "bus" | "module";
  /** The module's name, or `nats-server`. */
  readonly name: string;
  readonly pid: number;
  /** Field 22 of `/proc/<pid>/stat` (clock ticks since boot): with the PID, names the process. */
  readonly start: number;
}

/** What `/proc/<pid>/stat` says of a live process. */
interface ProcStat {
  readonly state: string;
  readonly pgrp: number;
  readonly start: number;
}

function procStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  const state = rest[0] ?? "";
  const pgrp = Number(rest[2]);
  const start = Number(rest[19]);
  if (!Number.isInteger(start)) return undefined;
  return { state, pgrp, start };
}

/**
 * The start time of process `pid` (field 22 of `/proc/<pid>/stat`), or undefined when there is no
 * such process or it has already exited (a zombie no one has reaped yet counts as gone).
 */
export function processStartTime(pid: number): number | undefined {
  const stat = procStat(pid);
  return stat === undefined || stat.state === "Z" || stat.state === "X" ? undefined : stat.start;
}

/** Whether the process `pid` started at `start` still runs (false once its PID is someone else's). */
export function isRunning(pid: number, start: number): boolean {
  return processStartTime(pid) === start;
}

/**
 * The PIDs of every live process (this one and its parent excepted) whose environment matches
 * `match`. Processes whose environment cannot be read (another user's, when not root) are skipped.
 */
export function findProcessesByEnv(match: (env: ReadonlyMap<string, string>) => boolean): number[] {
  const found: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return found;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid || pid === process.ppid) continue;
    let raw: string;
    try {
      raw = readFileSync(`/proc/${pid}/environ`, "latin1");
    } catch {
      continue;
    }
    const env = new Map<string, string>();
    for (const pair of raw.split("\0")) {
      const at = pair.indexOf("=");
      if (at > 0) env.set(pair.slice(0, at), pair.slice(at + 1));
    }
    if (match(env) && processStartTime(pid) !== undefined) found.push(pid);
  }
  return found;
}

/**
 * The records of one state directory (`<dir>/processes.json`), written whole or not at all (temp
 * file, fsync, rename), synchronously, so a record is on disk before the next line of the caller
 * runs. One writer per file: the process that holds the directory's state lock.
 */
export class ProcessRecords {
  readonly path: string;
  #records: ProcessRecord[];

  constructor(dir: string) {
    this.path = join(dir, "processes.json");
    this.#records = readRecords(this.path);
  }

  /** The records as they stand (those of the last run, until `clear`). */
  list(): readonly ProcessRecord[] {
    return this.#records;
  }

  /** Records `record`, replacing any record of the same PID. @throws when the file cannot be written. */
  add(record: ProcessRecord): void {
    this.#records = [...this.#records.filter((r) => r.pid !== record.pid), record];
    this.#write();
  }

  /** Removes the record of `pid`, if any. */
  remove(pid: number): void {
    const kept = this.#records.filter((r) => r.pid !== pid);
    if (kept.length === this.#records.length) return;
    this.#records = kept;
    this.#write();
  }

  /** Forgets every record. */
  clear(): void {
    this.#records = [];
    this.#write();
  }

  #write(): void {
    const temp = join(dirname(this.path), `.${basename(this.path)}.${process.pid}.tmp`);
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const fd = openSync(temp, "w", 0o600);
    try {
      writeSync(fd, `${JSON.stringify(this.#records, null, 2)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, this.path);
  }
}

function readRecords(path: string): ProcessRecord[] {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch {
    rmSync(path, { force: true });
    return [];
  }
  if (!Array.isArray(raw)) return [];
  return raw.filter(
    (r: Partial<ProcessRecord> | null): r is ProcessRecord =>
      (r?.kind === "bus" || r?.kind === "module") &&
      typeof r.name === "string" &&
      Number.isInteger(r.pid) &&
      Number.isInteger(r.start),
  );
}

/** A process to stop: what to call it, and its PID and start time. */
export interface LeftProcess {
  readonly name: string;
  readonly pid: number;
  readonly start: number;
}

/** How `stopProcesses` stops. */
export interface StopProcessesOptions {
  /** How long each has after SIGTERM before SIGKILL. */
  readonly graceMs: number;
  readonly logger?: BusLogger;
}

function signal(pid: number, sig: NodeJS.Signals): void {
  // A group leader is stopped with its group, so what it started goes too.
  const stat = procStat(pid);
  if (stat?.pgrp === pid) {
    try {
      process.kill(-pid, sig);
      return;
    } catch {
      // the group is gone: signal the process alone
    }
  }
  try {
    process.kill(pid, sig);
  } catch {
    // gone meanwhile
  }
}

/**
 * Stops each of `left` that still runs (same PID, same start time): SIGTERM (to its group when it
 * leads one), SIGKILL after `graceMs`, and waits (bounded) until each is gone.
 * @returns the processes that were still running and were stopped.
 */
export async function stopProcesses(
  left: readonly LeftProcess[],
  options: StopProcessesOptions,
): Promise<LeftProcess[]> {
  const running = left.filter((p) => isRunning(p.pid, p.start));
  if (running.length === 0) return [];
  for (const p of running) signal(p.pid, "SIGTERM");
  const gone = (): boolean => running.every((p) => !isRunning(p.pid, p.start));
  const deadline = Date.now() + options.graceMs;
  while (!gone() && Date.now() < deadline) await sleep(50);
  const stubborn = running.filter((p) => isRunning(p.pid, p.start));
  for (const p of stubborn) {
    options.logger?.warn(
      `${p.name} (pid ${p.pid}) did not stop within ${options.graceMs / 1000} s of SIGTERM: killing it`,
    );
    signal(p.pid, "SIGKILL");
  }
  const killDeadline = Date.now() + 5_000;
  while (!gone() && Date.now() < killDeadline) await sleep(50);
  return running;
}

/** What `stopLeftovers` looks for. */
export interface LeftoversOptions extends StopProcessesOptions {
  /** The records of the last run. */
  readonly records: ProcessRecords;
  /** Only records of this kind. */
  readonly kind: ProcessRecord["kind"];
  /** Whether a process's environment marks it as one this directory's mesh started. */
  readonly marked: (env: ReadonlyMap<string, string>) => boolean;
  /** Where the processes belong, for what is said: "node node-1", "the bus in /x/bus". */
  readonly where: string;
  /** Others found otherwise (a pid file), stopped with the rest. */
  readonly also?: readonly LeftProcess[];
}

/**
 * Stops what the last run left of `kind`: every recorded process that still runs as recorded, and
 * every live process whose environment is `marked` (one killed before its record was written), then
 * clears those records. Says what it stopped.
 * @returns the processes stopped.
 */
export async function stopLeftovers(options: LeftoversOptions): Promise<LeftProcess[]> {
  const { records, kind } = options;
  const left = new Map<number, LeftProcess>();
  for (const r of records.list()) if (r.kind === kind) left.set(r.pid, r);
  for (const p of options.also ?? []) left.set(p.pid, p);
  for (const pid of findProcessesByEnv(options.marked)) {
    const start = processStartTime(pid);
    if (start !== undefined && !left.has(pid)) left.set(pid, { name: nameOf(pid), pid, start });
  }
  const stopped = await stopProcesses([...left.values()], options);
  if (stopped.length > 0) {
    options.logger?.warn(
      `stopped what the last run of ${options.where} left running: ` +
        stopped.map((p) => `${p.name} (pid ${p.pid})`).join(", "),
    );
  }
  for (const r of records.list()) if (r.kind === kind) records.remove(r.pid);
  return stopped;
}

function nameOf(pid: number): string {
  try {
    const env = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0");
    const module = env.find((e) => e.startsWith("MESH_MODULE="));
    if (module !== undefined) return module.slice("MESH_MODULE=".length);
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return `process ${pid}`;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
