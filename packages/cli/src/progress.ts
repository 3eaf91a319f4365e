// Progress for anything that may take more than a second: after a second of waiting, one line on
// standard error says what is awaited and for how long, rewritten each second and wiped when the
// wait ends. Only on a terminal: a pipe or a log file gets nothing, and standard output stays
// clean for --json.
import type { CliIo } from "./io.ts";

/** How long a wait goes unsaid. */
export const PROGRESS_AFTER_MS = 1000;

/**
 * Runs `work`, saying on standard error (a terminal only) `<what>… N s` while it takes more than a
 * second, then wiping that line. `work` is given `say`, which writes a line of its own to standard
 * error (a terminal or not), the progress line wiped first. Resolves or rejects as `work` does.
 */
export async function withProgress<T>(
  io: CliIo,
  what: string,
  work: (say: (line: string) => void) => Promise<T>,
): Promise<T> {
  if (io.errIsTTY !== true) return work((line) => io.err(`${line}\n`));
  const started = Date.now();
  let shown = 0;
  const show = (): void => {
    const seconds = Math.max(1, Math.floor((Date.now() - started) / 1000));
    const line = `${what}… ${seconds} s`;
    // Carriage return and spaces rather than an erase escape, so a dumb terminal shows it too.
    io.err(`\r${line}${" ".repeat(Math.max(0, shown - line.length))}`);
    shown = line.length;
  };
  let ticker: NodeJS.Timeout | undefined;
  const first = setTimeout(() => {
    show();
    ticker = setInterval(show, 1000);
  }, PROGRESS_AFTER_MS);
  const say = (line: string): void => {
    io.err(`\r${line}${" ".repeat(Math.max(0, shown - line.length))}\n`);
    shown = 0;
  };
  try {
    return await work(say);
  } finally {
    clearTimeout(first);
    clearInterval(ticker);
    if (shown > 0) io.err(`\r${" ".repeat(shown)}\r`);
  }
}
