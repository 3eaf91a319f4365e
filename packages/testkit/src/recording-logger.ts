import type { Logger } from "@mesh/sdk";

/** A logger that keeps what it is told, for tests that check what was said. */
export function recordingLogger(): Logger & { lines: { level: string; message: string }[] } {
  const lines: { level: string; message: string }[] = [];
  return {
    lines,
    info: (message) => lines.push({ level: "info", message }),
    warn: (message) => lines.push({ level: "warn", message }),
    error: (message) => lines.push({ level: "error", message }),
  };
}

/** A logger that says nothing. */
export const quietLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };
