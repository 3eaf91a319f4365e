// The fleet file's `limits:` under a module (`limits: { memory: 512M, pids: 256, cpu: 1.5, home: 1G }`),
// read and checked. What it leaves out takes the defaults of limit-values.ts, which `mesh plan` shows
// and the agent applies: one place for the words and the numbers, so the plan, the status and the
// agent never disagree.
import { z } from "zod";
import { mustBe } from "./zod-problems.ts";
import { LIMIT_NAMES, MIN_SIZE_LIMIT, MAX_PIDS_LIMIT, parseSize, type ModuleLimits } from "./limit-values.ts";

export {
  DEFAULT_MODULE_LIMITS,
  LIMIT_NAMES,
  effectiveLimits,
  MIN_SIZE_LIMIT,
  MAX_PIDS_LIMIT,
  parseSize,
  formatSize,
  formatLimit,
  formatLimits,
  type ModuleLimits,
  type EffectiveLimits,
} from "./limit-values.ts";

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
