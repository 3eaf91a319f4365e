// `mesh status …` read without Commander, when its words are plainly the status command's own
// flags: building the program (Commander, every command's flags and help) was most of what the
// command cost before it asked anything. Anything else, down to a flag's unusual spelling, goes to
// the program as before, so every help, error and exit code stays Commander's.
import type { StatusFlags } from "./ask-status.ts";

// Status's flags that take a value, by how they are written, and the key Commander gives each.
const VALUED: Readonly<Record<string, "state" | "bus" | "busCa">> = {
  "--state": "state",
  "--bus": "bus",
  "--bus-ca": "busCa",
};

/**
 * The flags of `argv` (the words after `mesh`) when it is `status` followed only by `--json`,
 * `--state DIR`, `--bus URL` (repeatable) and `--bus-ca FILE` (each also as `--flag=VALUE`), as
 * Commander would collect them; undefined for anything else (help, another word, a flag with no
 * value or one that starts with a dash, an option of `mesh` itself), which the program parses.
 */
export function plainStatusFlags(argv: readonly string[]): StatusFlags | undefined {
  if (argv[0] !== "status") return undefined;
  const flags: StatusFlags = {};
  for (let i = 1; i < argv.length; i++) {
    const word = argv[i] as string;
    if (word === "--json") {
      flags.json = true;
      continue;
    }
    const equals = word.indexOf("=");
    const name = equals === -1 ? word : word.slice(0, equals);
    const key = Object.hasOwn(VALUED, name) ? VALUED[name] : undefined;
    if (key === undefined) return undefined;
    const value = equals === -1 ? argv[++i] : word.slice(equals + 1);
    if (value === undefined || value === "" || value.startsWith("-")) return undefined;
    // As Commander: the last --state or --bus-ca counts; every --bus is kept, in order.
    if (key === "bus") flags.bus = [...(flags.bus ?? []), value];
    else flags[key] = value;
  }
  return flags;
}
