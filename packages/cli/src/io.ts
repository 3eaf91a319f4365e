import type { Readable } from "node:stream";

/** Where a command reads and writes; the process's own streams outside tests. */
export interface CliIo {
  /** Writes to standard output. */
  out(text: string): void;
  /** Writes to standard error. */
  err(text: string): void;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stdin: Readable & { readonly isTTY?: boolean };
  /** Whether standard output is a terminal (colours there); absent means it is not. */
  readonly outIsTTY?: boolean;
  /** Whether standard error is a terminal (colours and progress there); absent means it is not. */
  readonly errIsTTY?: boolean;
}

/** The process's own streams and environment. */
export const processIo: CliIo = {
  out: (text) => process.stdout.write(text),
  err: (text) => process.stderr.write(text),
  env: process.env,
  stdin: process.stdin,
  outIsTTY: process.stdout.isTTY === true,
  errIsTTY: process.stderr.isTTY === true,
};
