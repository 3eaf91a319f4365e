// What one module may use of its node: processes, memory, CPU and the size of its home. The fleet
// file says them per module (`limits: { memory: 512M, pids: 256, cpu: 1.5, home: 1G }`); what it
// leaves out takes the defaults here, which `mesh plan` shows and the agent applies. One place for
// the words and the numbers, so the plan, the status and the agent never disagree.
import { z } from "zod";
import { mustBe } from "./zod-problems.ts";

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

const NO_BOUND = "max";
const SIZE_WHAT = `a size like 512M or 1G (K, M, G, T are powers of 1024; at least 1M), or ${NO_BOUND} for no bound`;
const PIDS_WHAT = `a whole number of processes like 256 (1 to ${MAX_PIDS_LIMIT}), or ${NO_BOUND} for no bound`;
const CPU_WHAT = `a number of CPUs like 1.5 (0.01 to 1024), or ${NO_BOUND} for no bound`;

function limitField(what: string, read: (value: string | number) => number | undefined) {
  return z.union([z.string(), z.number()], { error: mustBe(what) }).transform((value, ctx) => {
    if (value === NO_BOUND) return null;
    const n = read(value);
    if (n === undefined) {
      ctx.addIssue({ code: "custom", input: value, message: mustBe(what)({ input: value }) });
      return z.NEVER;
    }
    return n;
  });
}

/** The fleet file's `limits:` of one module, as the fleet schema checks it. */
export const limitsSchema = z.strictObject(
  {
    memory: limitField(SIZE_WHAT, (v) => {
      const n = parseSize(v);
      return n !== undefined && n >= MIN_SIZE_LIMIT ? n : undefined;
    }).optional(),
    pids: limitField(PIDS_WHAT, (v) =>
      typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= MAX_PIDS_LIMIT ? v : undefined,
    ).optional(),
    cpu: limitField(CPU_WHAT, (v) =>
      typeof v === "number" && Number.isFinite(v) && v >= 0.01 && v <= 1024 ? v : undefined,
    ).optional(),
    home: limitField(SIZE_WHAT, (v) => {
      const n = parseSize(v);
      return n !== undefined && n >= MIN_SIZE_LIMIT ? n : undefined;
    }).optional(),
  },
  {
    error: (iss) =>
      iss.code === "unrecognized_keys"
        ? "memory, pids, cpu, home"
        : mustBe("an object like { memory: 512M, pids: 256, cpu: 1.5, home: 1G }")(iss),
  },
);

/**
 * Whether `value` is a module's limits as a delivery carries them (numbers or null, known keys
 * only): what an agent checks before it applies them.
 */
export function isModuleLimits(value: unknown): value is ModuleLimits {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  return Object.entries(value).every(
    ([key, v]) =>
      (LIMIT_NAMES as readonly string[]).includes(key) &&
      (v === null || (typeof v === "number" && Number.isFinite(v) && v > 0)),
  );
}
