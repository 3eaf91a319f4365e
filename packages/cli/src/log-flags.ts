// The flags of `mesh up`, `mesh controller` and `mesh agent` that shape their lines and their
// modules' logs, as the program defines them. Apart from log-lines.ts, which writes the lines (with
// pino for --log-format json), so that building the program loads neither.
import type { Command } from "commander";

/** `--log-max-size` when not given. */
export const DEFAULT_LOG_MAX_SIZE = "10MiB";

/** `--log-keep` when not given. */
export const DEFAULT_LOG_KEEP = 3;

/** The flags of `mesh up` and `mesh agent` that shape their lines and their modules' logs. */
export interface LogFlags {
  logFormat?: string;
  logMaxSize?: string;
  logKeep?: string;
}

/** Adds the log flags to `command` (`mesh up`, `mesh agent`). */
export function withLogFlags(command: Command): Command {
  return command
    .option(
      "--log-format <format>",
      "text: each line (also of each module's log) starts with an ISO timestamp; json: one JSON object a line",
      "text",
    )
    .option(
      "--log-max-size <size>",
      "rotate each module's log at this size (e.g. 10MiB, 512KiB)",
      DEFAULT_LOG_MAX_SIZE,
    )
    .option("--log-keep <n>", "how many rotated logs of each module to keep", String(DEFAULT_LOG_KEEP));
}
