// The last lines of a module's log, for `mesh status` to show why a module keeps crashing without
// the operator opening a file on its node: a few lines, each clipped, read from the end of the file.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/** How many of a crashing module's last log lines its status carries. */
export const LOG_TAIL_LINES = 5;

/** The longest log line a status carries; a longer one is clipped with an ellipsis. */
export const LOG_TAIL_LINE_MAX = 200;

// Enough for LOG_TAIL_LINES lines of any length: a longer line is clipped anyway.
const TAIL_BYTES = 16 * 1024;

/**
 * The last `lines` non-empty lines of the file at `path`, each at most `lineMax` characters; empty
 * when the file cannot be read. Never throws.
 */
export function logTail(path: string, lines = LOG_TAIL_LINES, lineMax = LOG_TAIL_LINE_MAX): string[] {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const size = fstatSync(fd).size;
    const length = Math.min(size, TAIL_BYTES);
    const buffer = Buffer.alloc(length);
    const read = readSync(fd, buffer, 0, length, size - length);
    const all = buffer.subarray(0, read).toString("utf8").split("\n");
    // The first piece may be the end of a line cut by the window: only whole lines are shown.
    if (size > length) all.shift();
    return all
      .filter((l) => l.trim() !== "")
      .slice(-lines)
      .map((l) => (l.length > lineMax ? `${l.slice(0, lineMax - 1)}…` : l));
  } catch {
    return [];
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}
