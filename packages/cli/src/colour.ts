// Colours for people at a terminal, never for a pipe or a file: a script reading `mesh`'s output
// gets plain text. The conventions every terminal tool follows decide it (https://no-color.org):
// FORCE_COLOR forces colours on (0 or false forces them off), else a non-empty NO_COLOR or
// TERM=dumb turns them off, else the stream being a terminal turns them on.
import type { CliIo } from "./io.ts";

/** Wraps text in a colour when the stream takes colours; returns it as it is otherwise. */
export interface Paint {
  /** Whether this stream gets colours. */
  readonly on: boolean;
  /** Something wrong: failing, refused, denied, an error. */
  red(text: string): string;
  /** Something waiting for a person, or a warning. */
  yellow(text: string): string;
  /** Something fine: allowed, created. */
  green(text: string): string;
  bold(text: string): string;
  /** Something that matters less: retired, a hint. */
  dim(text: string): string;
}

/** Whether `stream` of `io` gets colours (see the file's comment for the rules). */
export function takesColour(io: CliIo, stream: "out" | "err"): boolean {
  const force = io.env["FORCE_COLOR"];
  if (force !== undefined) return !["0", "false"].includes(force.trim().toLowerCase());
  const noColour = io.env["NO_COLOR"];
  if (noColour !== undefined && noColour !== "") return false;
  if (io.env["TERM"] === "dumb") return false;
  return (stream === "out" ? io.outIsTTY : io.errIsTTY) === true;
}

// SGR: each colour is switched off by its own code, so a coloured word inside a bold line keeps the bold.
const sgr =
  (open: number, close: number) =>
  (text: string): string =>
    text === "" ? text : `\u001b[${open}m${text}\u001b[${close}m`;

const COLOURS: Omit<Paint, "on"> = {
  red: sgr(31, 39),
  yellow: sgr(33, 39),
  green: sgr(32, 39),
  bold: sgr(1, 22),
  dim: sgr(2, 22),
};

const plain = (text: string): string => text;

/** Text as it is: for output that never takes colours, and for tests. */
export const NO_PAINT: Paint = {
  on: false,
  red: plain,
  yellow: plain,
  green: plain,
  bold: plain,
  dim: plain,
};

/** The colours for `stream` of `io`: real ones on a terminal (or when forced), none otherwise. */
export function paintFor(io: CliIo, stream: "out" | "err"): Paint {
  return takesColour(io, stream) ? { on: true, ...COLOURS } : NO_PAINT;
}

/** `text` with every colour escape taken out. */
export function stripColour(text: string): string {
  return text.replace(/\u001b\[\d+(;\d+)*m/g, "");
}
