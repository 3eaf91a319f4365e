// What one module may use of its node, as values: the limits' shape, their defaults, and the words and
// numbers a size is written in. No schema here, so `mesh plan` and `mesh status` show limits without
// loading the fleet file's parsers; the schema that reads them from a fleet file is module-limits.ts.

/**
 * A module's limits as the fleet file writes them, in bytes, processes and cores: absent takes
 * the default, null (`max` in the file) is no bound.
 */
export interface ModuleLimits {
  /** Memory, bytes (cgroup `memory.max` / `memory.limit_in_bytes`). */
  readonly memory?: number | null;
  /** Processes and threads at once (`pids.max`). */
  readonly pids?: number | null;
  /** CPU time, in cores (1.5: one and a half CPUs' worth each period). */
  readonly cpu?: number | null;
  /** The size of its home on disk, bytes: checked every minute; passing it stops the module. */
  readonly home?: number | null;
}

/** A module's limits with the defaults filled in: null is no bound. */
export interface EffectiveLimits {
  readonly memory: number | null;
  readonly pids: number | null;
  readonly cpu: number | null;
  readonly home: number | null;
}

/** What a module gets when the fleet file says nothing: 512 processes, no other bound. */
export const DEFAULT_MODULE_LIMITS: EffectiveLimits = { memory: null, pids: 512, cpu: null, home: null };

/** The limit names, in the order they are shown. */
export const LIMIT_NAMES = ["pids", "memory", "cpu", "home"] as const;

/** `limits` with the defaults filled in for what it leaves out. */
export function effectiveLimits(limits: ModuleLimits | undefined): EffectiveLimits {
  const pick = (key: keyof ModuleLimits): number | null =>
    limits?.[key] === undefined ? DEFAULT_MODULE_LIMITS[key] : limits[key];
  return { memory: pick("memory"), pids: pick("pids"), cpu: pick("cpu"), home: pick("home") };
}

const UNITS: Readonly<Record<string, number>> = { "": 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3, t: 1024 ** 4 };
const SIZE = /^(\d+(?:\.\d+)?) ?([kmgt]?)(?:i?b)?$/i;

/** The smallest memory or home limit taken: below it nothing runs, and a typo is likelier. */
export const MIN_SIZE_LIMIT = 1024 ** 2;
/** The most processes a limit may name (the kernel's own ceiling, `pid_max` on 64-bit). */
export const MAX_PIDS_LIMIT = 4_194_304;

/**
 * Bytes of a size as written: `512M`, `1G`, `1.5G`, `64MiB`, `1048576` (K, M, G and T are powers of
 * 1024, as systemd reads them), or undefined when it is not one.
 */
export function parseSize(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  const m = SIZE.exec(value.trim());
  if (m === null) return undefined;
  const bytes = Math.floor(Number(m[1]) * (UNITS[(m[2] ?? "").toLowerCase()] ?? 1));
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

/** A size as a person reads it, in the fleet file's own units: `64M`, `1.5G`, `900K`, `12B`. */
export function formatSize(bytes: number): string {
  for (const [unit, size] of [
    ["T", 1024 ** 4],
    ["G", 1024 ** 3],
    ["M", 1024 ** 2],
    ["K", 1024],
  ] as const) {
    if (bytes >= size) {
      const n = bytes / size;
      return `${n >= 100 || Number.isInteger(n) ? Math.round(n) : Math.round(n * 10) / 10}${unit}`;
    }
  }
  return `${bytes}B`;
}

/** One limit as shown: `pids 512`, `memory 64M`, `cpu 1.5`, `home none`. */
export function formatLimit(name: keyof EffectiveLimits, value: number | null): string {
  if (value === null) return `${name} none`;
  return name === "memory" || name === "home" ? `${name} ${formatSize(value)}` : `${name} ${value}`;
}

/** Every limit as shown: `pids 512, memory none, cpu none, home none`. */
export function formatLimits(limits: EffectiveLimits): string {
  return LIMIT_NAMES.map((name) => formatLimit(name, limits[name])).join(", ");
}
