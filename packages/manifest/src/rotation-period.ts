// How often a consumer's password is rotated by the schedule, as a fleet file says it:
// `rotate: { every: 30d }`. Days are allowed here (a rotation period is days or weeks), beside the
// hours, minutes and seconds every other duration of the mesh is written in.

/** The shortest period the schedule accepts, unless `ROTATE_MIN_VARIABLE` says less (1 hour). */
export const DEFAULT_ROTATE_MIN_MS = 3_600_000;

/**
 * The variable that lowers the shortest period (a test knob, like `1s`), read where the fleet is
 * read; a longer one raises it.
 */
export const ROTATE_MIN_VARIABLE = "MESH_ROTATE_MIN";

const UNIT_MS: Readonly<Record<string, number>> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 };

/** The longest period accepted (about 10 years): past it a date cannot be written. */
const MAX_PERIOD_MS = 10 * 366 * 86_400_000;

/**
 * Reads a period like `30d`, `7d`, `12h`, `1d12h` or `90m` into milliseconds; undefined when it is
 * not one (a plain number, an unknown unit, zero).
 */
export function parseRotationPeriod(text: string): number | undefined {
  const trimmed = text.trim();
  const part = /(\d+(?:\.\d+)?)(d|h|m|s)/y;
  let total = 0;
  let at = 0;
  if (trimmed === "") return undefined;
  while (at < trimmed.length) {
    part.lastIndex = at;
    const match = part.exec(trimmed);
    if (match === null) return undefined;
    total += Number(match[1]) * (UNIT_MS[match[2] ?? ""] ?? Number.NaN);
    at = part.lastIndex;
  }
  const ms = Math.round(total);
  return Number.isFinite(ms) && ms > 0 && ms <= MAX_PERIOD_MS ? ms : undefined;
}

/** The shortest period accepted now: `MESH_ROTATE_MIN` when it reads as a period, else 1 hour. */
export function rotateMinimumMs(env: Readonly<Record<string, string | undefined>> = process.env): number {
  const knob = env[ROTATE_MIN_VARIABLE];
  return (knob === undefined ? undefined : parseRotationPeriod(knob)) ?? DEFAULT_ROTATE_MIN_MS;
}

/** Writes milliseconds as `parseRotationPeriod` reads them, largest units first (`30d`, `1d12h`, `5s`). */
export function formatRotationPeriod(ms: number): string {
  let left = Math.round(ms);
  let out = "";
  for (const [unit, size] of Object.entries(UNIT_MS)) {
    const n = Math.floor(left / size);
    if (n > 0) out += `${n}${unit}`;
    left -= n * size;
  }
  return out === "" ? `${ms}ms` : left > 0 ? `${out}${left}ms` : out;
}
