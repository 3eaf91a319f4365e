import { readFile } from "node:fs/promises";

/** What kind of problem a manifest, a fleet file, or a fleet checked against its manifests has. */
export type ProblemCode =
  | "unreadable"
  | "not-json"
  | "not-yaml"
  | "invalid"
  | "duplicate-key"
  | "duplicate-module"
  | "manifest-missing"
  | "unknown-node"
  | "unknown-interface"
  | "no-provider"
  | "two-providers-on-node"
  | "ambiguous-provider"
  | "wrong-provider"
  | "bad-value"
  | "login-collision"
  | "resource-collision"
  | "endpoint-unresolved"
  | "admin-missing";

/**
 * One thing wrong with a file, said so that an operator can fix it without reading code: the
 * file, the line when known, the field as a dotted path (`needs.postgres-database.values.name`),
 * what is wrong with it, and what to do.
 */
export interface Problem {
  readonly code: ProblemCode;
  readonly file: string;
  /** 1-based; undefined when the problem is not at one place (an unreadable file). */
  readonly line?: number | undefined;
  /** Dotted path of the field, `(file)` for the whole file. */
  readonly field: string;
  /** What is wrong, starting with a verb or "must" so that `field message` reads as a sentence. */
  readonly message: string;
  /** What to do about it. */
  readonly fix: string;
}

/** One line for an operator: `file:line: field message; fix`. */
export function formatProblem(p: Problem): string {
  const where = p.line === undefined ? p.file : `${p.file}:${p.line}`;
  const subject = p.field === "(file)" ? "" : `${p.field} `;
  return `${where}: ${subject}${p.message}; ${p.fix}`;
}

/** Formats a field path the way every problem names it: `a.b[2].c`. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out === "" ? String(part) : `.${String(part)}`;
  }
  return out === "" ? "(file)" : out;
}

/** A short, safe rendering of a bad value for a message: quoted, clipped, never a whole document. */
export function describeValue(value: unknown): string {
  if (value === undefined) return "nothing";
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  const text = JSON.stringify(value);
  return text.length > 60 ? `${text.slice(0, 57)}..."` : text;
}

/**
 * Base of the errors that carry problems: the message lists them all, one per line. Catch the
 * subclass you can act on (`ManifestError`, `FleetError`, `FleetCheckError`).
 */
export class ProblemsError extends Error {
  override name = "ProblemsError";
  /** The first problem's file; each problem names its own. */
  readonly file: string;
  readonly problems: readonly Problem[];
  constructor(problems: readonly Problem[], options?: { cause?: unknown }) {
    super(problems.map(formatProblem).join("\n"), options);
    this.problems = problems;
    this.file = problems[0]?.file ?? "";
  }
  /** The first problem's field. */
  get field(): string {
    return this.problems[0]?.field ?? "(file)";
  }
  /** The first problem's fix. */
  get fix(): string {
    return this.problems[0]?.fix ?? "";
  }
}

/** The own, plain-object value at `from[key]`, or `{}`: for reading user data without prototypes. */
export function ownObject(from: unknown, key: string): Record<string, unknown> {
  if (typeof from !== "object" || from === null || !Object.hasOwn(from, key)) return {};
  const value = (from as Record<string, unknown>)[key];
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

/** How `readBounded` names a file it could not read. */
export interface BoundedFile {
  /** What it is, for the size message ("a fleet file", "a manifest"). */
  readonly what: string;
  readonly maxBytes: number;
  /** The fix for a file that is too large. */
  readonly tooLargeFix: string;
  /** The fix for a file that is missing or unreadable. */
  readonly unreadableFix: string;
  /** Wraps the problem in the caller's own error class. */
  readonly fail: (problems: Problem[], cause?: unknown) => Error;
}

/**
 * Reads the text of `path`, refusing one larger than `spec.maxBytes` (a stray path must not make the
 * mesh read a whole disk image).
 * @throws what `spec.fail` makes, naming the file and the fix.
 */
export async function readBounded(path: string, spec: BoundedFile): Promise<string> {
  let bytes: Buffer;
  try {
    bytes = await readFile(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const message = code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? String(err)})`;
    throw spec.fail(
      [{ code: "unreadable", file: path, field: "(file)", message, fix: spec.unreadableFix }],
      err,
    );
  }
  if (bytes.length > spec.maxBytes) {
    const message = `is ${bytes.length} bytes, more than ${spec.what}'s ${spec.maxBytes}`;
    throw spec.fail([{ code: "unreadable", file: path, field: "(file)", message, fix: spec.tooLargeFix }]);
  }
  return bytes.toString("utf8");
}
