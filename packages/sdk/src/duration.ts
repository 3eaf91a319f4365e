// Durations as an operator writes them on a command line or in an environment variable.

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Node's timers take at most this many milliseconds; a longer one fires at once instead. */
export const MAX_DURATION_MS = 2_147_483_647;

const HOW_TO_WRITE = "write a number with a unit (ms, s, m or h), for example 250ms, 5s, 1m or 1h30m";

/** A duration that cannot be read, with the text as given (`text`) and how to write one. */
export class InvalidDurationError extends Error {
  override name = "InvalidDurationError";
  constructor(
    readonly text: string,
    why: string,
  ) {
    super(`${JSON.stringify(text)} is not a duration: ${why}`);
  }
}

/**
 * Reads a duration such as `250ms`, `5s`, `1m`, `1h`, `1h30m` or `1.5s` into milliseconds.
 * A plain number is refused because its unit is a guess (seconds? milliseconds?).
 * @throws InvalidDurationError when the text is empty, has no unit, is zero or negative, or is longer
 *   than a timer can wait (about 24.8 days).
 */
export function parseDuration(text: string): number {
  const trimmed = text.trim();
  if (trimmed === "") throw new InvalidDurationError(text, `it is empty; ${HOW_TO_WRITE}`);
  if (/^[+-]?\d+(\.\d+)?$/.test(trimmed)) {
    throw new InvalidDurationError(
      text,
      `a plain number is ambiguous: write it with a unit, such as ${trimmed}s or ${trimmed}ms (units: ms, s, m, h; combined like 1h30m)`,
    );
  }
  if (trimmed.startsWith("-"))
    throw new InvalidDurationError(text, `it must be more than zero; ${HOW_TO_WRITE}`);
  const part = /(\d+(?:\.\d+)?)(ms|s|m|h)/y;
  let total = 0;
  let at = 0;
  while (at < trimmed.length) {
    part.lastIndex = at;
    const match = part.exec(trimmed);
    if (match === null) throw new InvalidDurationError(text, HOW_TO_WRITE);
    total += Number(match[1]) * (UNIT_MS[match[2] ?? ""] ?? Number.NaN);
    at = part.lastIndex;
  }
  const ms = Math.round(total);
  if (!Number.isFinite(ms) || ms <= 0) {
    throw new InvalidDurationError(text, `it must be at least 1ms; ${HOW_TO_WRITE}`);
  }
  if (ms > MAX_DURATION_MS) {
    throw new InvalidDurationError(
      text,
      "it is longer than a timer can wait (about 24.8 days); choose a shorter one",
    );
  }
  return ms;
}

/**
 * Writes milliseconds the way `parseDuration` reads them, largest units first: `1h30m`, `5s`,
 * `1s500ms`, `0ms`. Fractions of a millisecond are rounded.
 */
export function formatDuration(ms: number): string {
  let rest = Math.max(0, Math.round(ms));
  if (rest === 0) return "0ms";
  let out = "";
  for (const unit of ["h", "m", "s", "ms"] as const) {
    const size = UNIT_MS[unit] ?? 1;
    const count = Math.floor(rest / size);
    if (count > 0) out += `${count}${unit}`;
    rest -= count * size;
  }
  return out;
}
