// The lines `mesh up` and `mesh agent` write on standard error, for an operator to read: each starts
// with an ISO timestamp and who says it (`2026-12-01T10:00:00.000Z controller  │ …`), or, with
// `--log-format json`, each is one JSON object (pino's: `{"level":"info","time":"…","who":"…","msg":"…"}`)
// for a log shipper. Also the flags that size a module's log.
import type { BusLogger } from "@mesh/bus";
import { pino, type Logger as PinoLogger } from "pino";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";
import { DEFAULT_LOG_KEEP, DEFAULT_LOG_MAX_SIZE, type LogFlags } from "./log-flags.ts";

/** How the mesh's own lines are written. */
export type LogFormat = "text" | "json";

/** The formats `--log-format` takes. */
export const LOG_FORMATS: readonly LogFormat[] = ["text", "json"];

/** How a module's log is rotated, as the flags say. */
export interface ModuleLogFlags {
  /** The size at which a module's log rotates, in bytes. */
  readonly maxBytes: number;
  /** How many rotated files are kept besides the current one. */
  readonly keep: number;
}

const LINES = Symbol("mesh log lines");

/** A CliIo whose standard error writes log lines (see `logLinesIo`). */
export interface LogLinesIo extends CliIo {
  readonly [LINES]: LogLines;
}

type Level = "info" | "warn" | "error";

/** Writes one line for `who` at `level`; every line of a multi-line message is a line of its own. */
interface LogLines {
  write(who: string, level: Level, message: string): void;
  readonly format: LogFormat;
  readonly modules: ModuleLogFlags | undefined;
}

const WHO_WIDTH = 12;

/**
 * `io` with its standard error made of log lines in `format`: every line written to it starts with an
 * ISO timestamp (text), or becomes one JSON object (json). A line written as `who│ message` (as
 * `mesh up` says its steps) keeps its `who`. `modules` is what `agentLogOptions` gives the agents.
 */
export function logLinesIo(io: CliIo, format: LogFormat = "text", modules?: ModuleLogFlags): LogLinesIo {
  const lines = format === "json" ? jsonLines(io, modules) : textLines(io, modules);
  let pending = "";
  return {
    ...io,
    err: (text: string) => {
      pending += text;
      let newline: number;
      while ((newline = pending.indexOf("\n")) !== -1) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        const said = /^(\S(?:.*?\S)?) *│ ?(.*)$/.exec(line);
        if (said !== null && said[1] !== undefined && said[1].length <= WHO_WIDTH)
          lines.write(said[1], "info", said[2] ?? "");
        else lines.write("mesh", "info", line);
      }
    },
    [LINES]: lines,
  };
}

/**
 * The logger of `who` (the controller, a node), writing through `io`: log lines when `io` is a
 * `logLinesIo`, else timestamped text lines on its standard error.
 */
export function prefixed(io: CliIo, who: string): BusLogger {
  const lines = (io as Partial<LogLinesIo>)[LINES] ?? textLines(io, undefined);
  return {
    info: (m) => lines.write(who, "info", m),
    warn: (m) => lines.write(who, "warn", m),
    error: (m) => lines.write(who, "error", m),
  };
}

/** What `startAgent` is given for its modules' logs, from the flags `logLinesIo` was told. */
export function agentLogOptions(io: CliIo): {
  timings?: { logMaxBytes: number; logKeep: number; logFormat: LogFormat };
} {
  const lines = (io as Partial<LogLinesIo>)[LINES];
  const modules = lines?.modules;
  if (lines === undefined || modules === undefined) return {};
  return { timings: { logMaxBytes: modules.maxBytes, logKeep: modules.keep, logFormat: lines.format } };
}

function textLines(io: CliIo, modules: ModuleLogFlags | undefined): LogLines {
  const paint = paintFor(io, "err");
  const level = { info: "", warn: paint.yellow("warning: "), error: paint.red("error: ") };
  return {
    format: "text",
    modules,
    write(who, at, message) {
      const time = new Date().toISOString();
      const text = message
        .split("\n")
        .map((line) => `${time} ${who.padEnd(WHO_WIDTH)}│ ${level[at]}${line}\n`)
        .join("");
      io.err(text);
    },
  };
}

function jsonLines(io: CliIo, modules: ModuleLogFlags | undefined): LogLines {
  const root: PinoLogger = pino(
    {
      base: null,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    { write: (line: string) => io.err(line) },
  );
  const children = new Map<string, PinoLogger>();
  return {
    format: "json",
    modules,
    write(who, level, message) {
      let child = children.get(who);
      if (child === undefined) {
        child = root.child({ who });
        children.set(who, child);
      }
      child[level](message);
    },
  };
}

/**
 * The value of `--log-format`.
 * @throws CliExit (usage) naming the formats when it is neither.
 */
export function parseLogFormat(value: string | undefined): LogFormat {
  if (value === undefined) return "text";
  if ((LOG_FORMATS as readonly string[]).includes(value)) return value as LogFormat;
  throw new CliExit(
    EXIT_USAGE,
    `--log-format is ${JSON.stringify(value)}: it is one of ${LOG_FORMATS.join(", ")}`,
  );
}

const UNITS: Readonly<Record<string, number>> = {
  "": 1,
  b: 1,
  k: 1000,
  kb: 1000,
  kib: 1024,
  m: 1000 ** 2,
  mb: 1000 ** 2,
  mib: 1024 ** 2,
  g: 1000 ** 3,
  gb: 1000 ** 3,
  gib: 1024 ** 3,
};

/**
 * A size such as `10MiB`, `512KiB`, `1GB` or `4096` (bytes), as `--log-max-size` takes it.
 * @throws CliExit (usage) quoting the value and saying what a size looks like.
 */
export function parseSize(value: string, flag = "--log-max-size"): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(value);
  const unit = UNITS[(m?.[2] ?? "").toLowerCase()];
  const bytes = m === null || unit === undefined ? NaN : Math.floor(Number(m[1]) * unit);
  if (!Number.isFinite(bytes) || bytes < 1024) {
    throw new CliExit(
      EXIT_USAGE,
      `${flag} is ${JSON.stringify(value)}: give a size of at least 1KiB, like 10MiB, 512KiB or 1GB`,
    );
  }
  return bytes;
}

/**
 * The module log flags of `mesh up` and `mesh agent`, read.
 * @throws CliExit (usage) for a size or count that is not one.
 */
export function moduleLogFlags(flags: { logMaxSize?: string; logKeep?: string }): ModuleLogFlags {
  const keep = flags.logKeep === undefined ? DEFAULT_LOG_KEEP : Number(flags.logKeep);
  if (!Number.isInteger(keep) || keep < 0 || keep > 100) {
    throw new CliExit(
      EXIT_USAGE,
      `--log-keep is ${JSON.stringify(flags.logKeep)}: give a whole number from 0 to 100`,
    );
  }
  return { maxBytes: parseSize(flags.logMaxSize ?? DEFAULT_LOG_MAX_SIZE), keep };
}

/**
 * `io` writing log lines as the flags say.
 * @throws CliExit (usage) for a flag that is not valid.
 */
export function logIo(io: CliIo, flags: LogFlags): CliIo {
  return logLinesIo(io, parseLogFormat(flags.logFormat), moduleLogFlags(flags));
}
