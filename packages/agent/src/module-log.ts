// A module's log file as the agent writes it: the module's standard output and error arrive on pipes,
// and each line is written with an ISO timestamp and the stream it came from, so an operator can tell
// when anything happened. The file rotates at a size: `log` becomes `log.1` (and `log.1` `log.2`, …),
// keeping `keep` old files, so a chatty module never fills the disk.
import { closeSync, fstatSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { basename, dirname } from "node:path";
import type { Readable } from "node:stream";
import { StringDecoder } from "node:string_decoder";

/** How large a module's log grows before it rotates, when not told: 10 MiB. */
export const DEFAULT_LOG_MAX_BYTES = 10 * 1024 * 1024;

/** How many rotated files (`log.1` … `log.N`) are kept besides the current one, when not told. */
export const DEFAULT_LOG_KEEP = 3;

/** The longest line kept whole; a longer run of bytes without a newline is written as lines of this size. */
export const MAX_LOG_LINE_BYTES = 64 * 1024;

/** The rotation of one module's log. */
export interface ModuleLogLimits {
  /** The size at which the file rotates (DEFAULT_LOG_MAX_BYTES). */
  readonly maxBytes?: number | undefined;
  /** How many rotated files are kept (DEFAULT_LOG_KEEP); 0 keeps none. */
  readonly keep?: number | undefined;
  /**
   * `text` (the default): `<ISO time> <stream> | <line>`; `json`: one object a line, in the shape of
   * the mesh's own JSON lines (`{"level","time","module","stream","msg"}`), for a log shipper.
   */
  readonly format?: ModuleLogFormat | undefined;
}

/** How a module's log lines are written. */
export type ModuleLogFormat = "text" | "json";

/** Where a line came from: the module's standard output or error, or the agent saying something about it. */
export type LogStream = "out" | "err" | "mesh";

/** `<log>.<n>`: the `n`th rotated file of `logFile` (1 is the newest). */
export function rotatedLogPath(logFile: string, n: number): string {
  return `${logFile}.${n}`;
}

/**
 * One line as it is written: `2026-12-01T10:00:00.000Z out | text`. The timestamp comes first, so
 * lines sort and `grep` by time as they are.
 */
export function formatLogLine(at: Date, stream: LogStream, text: string): string {
  return `${at.toISOString()} ${stream.padEnd(4)}| ${text}\n`;
}

/** One line as `--log-format json` writes it: standard error's lines are at level `warn`. */
export function formatJsonLogLine(at: Date, module: string, stream: LogStream, text: string): string {
  const level = stream === "err" ? "warn" : "info";
  return `${JSON.stringify({ level, time: at.toISOString(), module, stream, msg: text })}\n`;
}

/**
 * A module's log file, appended to line by line. Opened at once; the streams handed to `follow`
 * are read until they end.
 */
export class ModuleLog {
  readonly path: string;
  readonly #maxBytes: number;
  readonly #keep: number;
  readonly #now: () => Date;
  readonly #line: (at: Date, stream: LogStream, text: string) => string;
  #fd: number | undefined;
  #size = 0;
  #streams = 0;
  #closeWhenDone = false;

  /**
   * Opens `path` for appending (its directory made 0700 when missing; the file 0600).
   * @throws the filesystem's error when the file cannot be opened.
   */
  constructor(path: string, limits: ModuleLogLimits = {}, now: () => Date = () => new Date()) {
    this.path = path;
    this.#maxBytes = Math.max(1, limits.maxBytes ?? DEFAULT_LOG_MAX_BYTES);
    this.#keep = Math.max(0, Math.floor(limits.keep ?? DEFAULT_LOG_KEEP));
    this.#now = now;
    const module = basename(dirname(path));
    this.#line =
      limits.format === "json"
        ? (at, stream, text) => formatJsonLogLine(at, module, stream, text)
        : formatLogLine;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    this.#open();
  }

  /** Writes one line the agent says about the module (its start, say). Never throws. */
  say(text: string): void {
    this.#write(this.#line(this.#now(), "mesh", text));
  }

  /**
   * Writes every line `stream` carries, each with its timestamp, until it ends. A last line without
   * a newline is written when the stream ends.
   */
  follow(stream: Readable, name: "out" | "err"): void {
    this.#streams += 1;
    let pending = "";
    // A character split between two chunks is joined, not written as two broken halves.
    const decoder = new StringDecoder("utf8");
    const take = (chunk: Buffer | string): void => {
      pending += typeof chunk === "string" ? chunk : decoder.write(chunk);
      const at = this.#now();
      let text = "";
      let newline: number;
      while ((newline = pending.indexOf("\n")) !== -1) {
        text += this.#line(at, name, pending.slice(0, newline).replace(/\r$/, ""));
        pending = pending.slice(newline + 1);
      }
      // A module that writes without newlines still has its output kept, in bounded pieces.
      while (Buffer.byteLength(pending) > MAX_LOG_LINE_BYTES) {
        text += this.#line(at, name, pending.slice(0, MAX_LOG_LINE_BYTES));
        pending = pending.slice(MAX_LOG_LINE_BYTES);
      }
      if (text !== "") this.#write(text);
    };
    let ended = false;
    const end = (): void => {
      if (ended) return;
      ended = true;
      pending += decoder.end();
      if (pending !== "") this.#write(this.#line(this.#now(), name, pending));
      pending = "";
      this.#streams -= 1;
      if (this.#closeWhenDone && this.#streams === 0) this.#close();
    };
    stream.on("data", take);
    stream.once("end", end);
    stream.once("close", end);
    stream.once("error", end);
  }

  /** Closes the file once every followed stream has ended (at once when none is open). */
  close(): void {
    this.#closeWhenDone = true;
    if (this.#streams === 0) this.#close();
  }

  #open(): void {
    this.#fd = openSync(this.path, "a", 0o600);
    this.#size = fstatSync(this.#fd).size;
  }

  #close(): void {
    if (this.#fd === undefined) return;
    closeSync(this.#fd);
    this.#fd = undefined;
  }

  #write(text: string): void {
    if (this.#fd === undefined) return;
    const bytes = Buffer.from(text, "utf8");
    try {
      if (this.#size > 0 && this.#size + bytes.length > this.#maxBytes) this.#rotate();
      if (this.#fd === undefined) return;
      writeSync(this.#fd, bytes);
      this.#size += bytes.length;
    } catch {
      // A full disk or a removed directory: the module runs on; its output is lost, not its process.
    }
  }

  // log.N is dropped, log.(N-1) becomes log.N, …, log becomes log.1, and a new log is opened. Each
  // rename is atomic, so a reader following the file sees the old one end and the new one begin.
  #rotate(): void {
    this.#close();
    try {
      if (this.#keep === 0) rmSync(this.path, { force: true });
      else {
        rmSync(rotatedLogPath(this.path, this.#keep), { force: true });
        for (let n = this.#keep - 1; n >= 1; n--) {
          try {
            renameSync(rotatedLogPath(this.path, n), rotatedLogPath(this.path, n + 1));
          } catch {
            // Not there yet: fewer files have rotated than are kept.
          }
        }
        renameSync(this.path, rotatedLogPath(this.path, 1));
      }
    } finally {
      // Whatever the renames did, the module's next lines have a file to go to.
      this.#open();
    }
  }
}
