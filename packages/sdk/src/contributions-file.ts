import { readFile } from "node:fs/promises";
import { z } from "zod";
import { YieldTimer, yieldToEventLoop } from "./concurrency.ts";
import { readMinted } from "./consumer-mark.ts";

/** One consumer the mesh asks this provider to serve, as the contributions file gives it. */
export interface Contribution {
  readonly as: string;
  readonly secret: string;
  readonly node?: string | undefined;
  readonly at?: string | undefined;
  readonly values: Readonly<Record<string, unknown>>;
  readonly derived: Readonly<Record<string, unknown>>;
  /**
   * Why this entry cannot be served as it stands (its values nest too deep or are too large): the
   * consumer is still asked for, so it is never retired for it, and it fails alone with this reason.
   * Its `values` and `derived` are then empty.
   */
  readonly refused?: string | undefined;
  /**
   * While a rotation lasts: the file holding the password being retired, beside `secret`'s new
   * one, so a provider that can hold both keeps the old one valid until its grace bound passes.
   */
  readonly retiring?: string | undefined;
  /**
   * Where the provider alternates two logins per consumer: the login that takes the password now
   * (its second login), when it is not `as`. Checked by the adapter's guard.
   */
  readonly login?: string | undefined;
  /**
   * Its password was minted by `mesh rotate --now` (a leaked one): no overlap, and once the new
   * password is applied in place of another, the login's open sessions are ended.
   */
  readonly cut?: true | undefined;
  /**
   * ISO 8601: when the mesh minted the password in `secret` (absent from a mesh of 0.1.0). A
   * password older than the one the backend holds is not applied (a restore of an older backup).
   */
  readonly minted?: string | undefined;
}

/** How deep an entry's `values` or `derived` may nest (an object or list inside another is one level). */
export const MAX_VALUE_DEPTH = 32;
/** How large an entry's `values` or `derived` may be, each, written as JSON (64 KiB). */
export const MAX_VALUE_BYTES = 64 * 1024;

/** What reading the contributions file gave: the consumers asked for, or why nothing can be said. */
export type ContributionsRead =
  | { readonly ok: true; readonly given: readonly Contribution[]; readonly skipped: number }
  | { readonly ok: false; readonly problem: string };

const optionalText = z.string().nullish();
const optionalRecord = z.record(z.string(), z.unknown()).nullish();

const entrySchema = z.looseObject({
  as: optionalText,
  secret: optionalText,
  retiring: optionalText,
  login: optionalText,
  cut: z.boolean().nullish(),
  minted: optionalText,
  node: optionalText,
  at: optionalText,
  values: optionalRecord,
  derived: optionalRecord,
});

const fileSchema = z.looseObject({
  requirement: z.string().optional(),
  given: z.array(z.unknown()),
});

/** How many entries are checked between two looks at whether the event loop is due a turn. */
const ENTRIES_PER_STEP = 500;

/**
 * Reads the contributions file for `iface`. Never throws: a file that cannot be read, is not JSON,
 * is for another requirement, has no `given` list, has an entry of the wrong shape, or names one
 * login twice is a problem, and a problem is not "nobody asks" — the caller applies and retires
 * nothing until it clears. Entries without `as` or `secret` are not credential grants and are skipped.
 * An entry whose values break the bounds is kept, `refused` (see `Contribution`). The entries are
 * checked a few hundred at a time, letting the event loop turn between, so a file of 100,000 holds
 * no tool's answer.
 */
export async function readContributions(path: string, iface: string): Promise<ContributionsRead> {
  const text = await readContributionsText(path);
  if (!text.ok) return text;
  return parseContributionsYielding(text.raw, path, iface);
}

/** The reading half of `readContributions`: the file's text, or why it cannot be read. */
export async function readContributionsText(
  path: string,
): Promise<{ readonly ok: true; readonly raw: string } | { readonly ok: false; readonly problem: string }> {
  try {
    return { ok: true, raw: await readFile(path, "utf8") };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const what = code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? String(err)})`;
    return { ok: false, problem: `contributions file ${path} ${what}` };
  }
}

/** The parsing half of `readContributions`, letting the event loop turn as it goes. */
export async function parseContributionsYielding(
  raw: string,
  path: string,
  iface: string,
): Promise<ContributionsRead> {
  const steps = parseSteps(raw, path, iface);
  const turns = new YieldTimer();
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    if (turns.due()) await yieldToEventLoop();
  }
}

/** The parsing half of `readContributions`, for text already read, all at once. */
export function parseContributions(raw: string, path: string, iface: string): ContributionsRead {
  const steps = parseSteps(raw, path, iface);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** Parses and checks the file, pausing (yielding nothing) every `ENTRIES_PER_STEP` entries. */
function* parseSteps(raw: string, path: string, iface: string): Generator<void, ContributionsRead> {
  if (raw.trim() === "") return { ok: false, problem: `contributions file ${path} is empty` };
  let doc: unknown;
  try {
    doc = JSON.parse(raw);
  } catch (err) {
    return { ok: false, problem: `contributions file ${path} is not JSON (${(err as Error).message})` };
  }
  yield;
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    return { ok: false, problem: `contributions file ${path} is not a JSON object with a "given" list` };
  }
  const requirement = (doc as { requirement?: unknown }).requirement;
  if (requirement !== undefined && requirement !== iface) {
    return {
      ok: false,
      problem: `contributions file ${path} is for ${JSON.stringify(requirement)}, not ${JSON.stringify(iface)}`,
    };
  }
  const invalid = (where: readonly PropertyKey[], why: string): ContributionsRead => ({
    ok: false,
    problem: `contributions file ${path} is not valid at ${where.map(String).join(".") || "(top)"}: ${why}`,
  });
  const parsed = fileSchema.safeParse(doc);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return invalid(issue?.path ?? [], issue?.message ?? "invalid");
  }
  const given: Contribution[] = [];
  const seen = new Set<string>();
  let skipped = 0;
  const entries = parsed.data.given;
  for (let i = 0; i < entries.length; i++) {
    if (i % ENTRIES_PER_STEP === ENTRIES_PER_STEP - 1) yield;
    const checked = entrySchema.safeParse(entries[i]);
    if (!checked.success) {
      const issue = checked.error.issues[0];
      return invalid(["given", i, ...(issue?.path ?? [])], issue?.message ?? "invalid");
    }
    const entry = checked.data;
    if (!entry.as || !entry.secret) {
      skipped++;
      continue;
    }
    if (seen.has(entry.as)) {
      return {
        ok: false,
        problem: `contributions file ${path} names the login ${JSON.stringify(entry.as)} twice; the whole file is refused`,
      };
    }
    seen.add(entry.as);
    const values = orNothing(entry.values);
    const derived = orNothing(entry.derived);
    const refused = boundsProblem("values", values) ?? boundsProblem("derived", derived);
    given.push({
      as: entry.as,
      secret: entry.secret,
      node: entry.node ?? undefined,
      at: entry.at ?? undefined,
      values: refused === undefined ? values : NOTHING,
      derived: refused === undefined ? derived : NOTHING,
      ...(refused === undefined ? {} : { refused }),
      ...(entry.retiring ? { retiring: entry.retiring } : {}),
      ...(entry.login && entry.login !== entry.as ? { login: entry.login } : {}),
      ...(entry.cut === true ? { cut: true as const } : {}),
      ...(readMinted(entry.minted) === undefined ? {} : { minted: entry.minted as string }),
    });
  }
  return { ok: true, given, skipped };
}

/** The `values` or `derived` of an entry that gives none: one frozen object shared by all of them. */
const NOTHING: Readonly<Record<string, unknown>> = Object.freeze({});

function orNothing(value: Record<string, unknown> | null | undefined): Readonly<Record<string, unknown>> {
  if (value === null || value === undefined) return NOTHING;
  for (const _ in value) return value;
  return NOTHING;
}

/**
 * Why `value` (an entry's `values` or `derived`) breaks the bounds, or undefined. Walked without
 * recursion: a value nested thousands of levels deep must fail its own consumer, not every pass.
 */
function boundsProblem(field: string, value: unknown): string | undefined {
  const stack: { value: unknown; depth: number }[] = [{ value, depth: 1 }];
  // Counted as it is walked: strings and keys as JSON would write them (near enough), so a huge
  // value is refused before anything is made of it.
  let bytes = 0;
  while (stack.length > 0) {
    const { value: v, depth } = stack.pop() as { value: unknown; depth: number };
    if (typeof v === "string") bytes += v.length + 2;
    else if (v === null || typeof v !== "object") bytes += 8;
    else {
      if (depth > MAX_VALUE_DEPTH) {
        return `its ${field} nest deeper than ${MAX_VALUE_DEPTH} levels; the entry is not applied until it is fixed`;
      }
      bytes += 2;
      if (Array.isArray(v)) {
        for (const item of v) stack.push({ value: item, depth: depth + 1 });
      } else {
        for (const [key, item] of Object.entries(v)) {
          bytes += key.length + 4;
          stack.push({ value: item, depth: depth + 1 });
        }
      }
    }
    if (bytes > MAX_VALUE_BYTES) {
      return `its ${field} are larger than ${MAX_VALUE_BYTES} bytes; the entry is not applied until it is fixed`;
    }
  }
  // Exact, now that it is known to be bounded.
  const exact = Buffer.byteLength(JSON.stringify(value));
  if (exact > MAX_VALUE_BYTES) {
    return `its ${field} are ${exact} bytes as JSON, larger than ${MAX_VALUE_BYTES}; the entry is not applied until it is fixed`;
  }
  return undefined;
}
