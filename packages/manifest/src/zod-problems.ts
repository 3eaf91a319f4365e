// Turns zod's issues into problems an operator can act on. The schemas in this package word their
// own messages ("must be ...", "is missing: ..."); this file adds the file, the line and the fix.
import { z } from "zod";
import { describeValue, fieldPath, type Problem } from "./problem.ts";
import type { SourcePositions } from "./source-positions.ts";

type Issue = z.core.$ZodIssue;

/** How a field must look, for a schema's own message when it is missing or wrong. */
export function mustBe(what: string): (iss: { input?: unknown }) => string {
  return (iss) =>
    iss.input === undefined
      ? `is missing: it must be ${what}`
      : `must be ${what}, not ${describeValue(iss.input)}`;
}

/** A string field that must match `pattern`, with one message for every way it can be wrong. */
export function text(what: string, pattern?: RegExp): z.ZodString {
  const s = z.string({ error: mustBe(what) });
  return pattern ? s.regex(pattern, { error: mustBe(what) }) : s;
}

/**
 * An object that refuses keys it does not know, so a misspelt field is an error rather than
 * silently ignored. Its message for unknown keys is the list of known ones, which `zodProblems`
 * turns into the fix.
 */
export function strict<T extends z.core.$ZodLooseShape>(
  shape: T,
  what: string,
): z.ZodObject<T, z.core.$strict> {
  const known = Object.keys(shape).join(", ");
  return z.strictObject(shape, {
    error: (iss) => (iss.code === "unrecognized_keys" ? known : mustBe(what)(iss)),
  });
}

/** A map whose keys must match `pattern`; values as `value` says. */
export function keyed<V extends z.core.SomeType>(
  pattern: RegExp,
  keyWhat: string,
  value: V,
  what: string,
): z.ZodRecord<z.ZodString, V> {
  return z.record(
    z.string().regex(pattern, {
      error: (iss) => `is not a valid key: it must be ${keyWhat}, not ${describeValue(iss.input)}`,
    }),
    value,
    { error: mustBe(what) },
  );
}

/** The problems of a failed parse, each with its file, line, field and fix. */
export function zodProblems(issues: readonly Issue[], file: string, positions: SourcePositions): Problem[] {
  const problems: Problem[] = [];
  for (const iss of issues) {
    const path = iss.path.filter((p): p is string | number => typeof p !== "symbol");
    if (iss.code === "unrecognized_keys") {
      for (const key of iss.keys) {
        problems.push({
          code: "invalid",
          file,
          line: positions.lineOf([...path, key]),
          field: fieldPath([...path, key]),
          message: "is not a known field",
          fix: `remove it, or correct its spelling (known fields here: ${iss.message || "none"})`,
        });
      }
      continue;
    }
    if (iss.code === "invalid_key") {
      problems.push({
        code: "invalid",
        file,
        line: positions.lineOf(path),
        field: fieldPath(path),
        message: iss.issues[0]?.message ?? "is not a valid key",
        fix: "rename it",
      });
      continue;
    }
    const missing = iss.message.startsWith("is missing");
    problems.push({
      code: "invalid",
      file,
      line: positions.lineOf(path),
      field: fieldPath(path),
      message: iss.message,
      fix: missing ? "add it" : "fix the value",
    });
  }
  return problems;
}
