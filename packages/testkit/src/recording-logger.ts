import type { Logger } from "@mesh/sdk";

/** One thing a logger was told, and at which level. */
export interface SaidLine {
  readonly level: "info" | "warn" | "error";
  readonly message: string;
}

/** A logger that keeps what it is told: `lines` as text (`"warn: …"`), `said` as level and message. */
export interface RecordingLogger extends Logger {
  readonly lines: string[];
  readonly said: SaidLine[];
}

/** A logger that keeps what it is told, for tests that check what was (and was not) said. */
export function recordingLogger(): RecordingLogger {
  const lines: string[] = [];
  const said: SaidLine[] = [];
  const keep = (level: SaidLine["level"]) => (message: string) => {
    lines.push(`${level}: ${message}`);
    said.push({ level, message });
  };
  return { lines, said, info: keep("info"), warn: keep("warn"), error: keep("error") };
}

/** A logger that says nothing. */
export const quietLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };
