import { describeValue } from "./problem.ts";
import { fillTemplate } from "./template.ts";

/** The types a value in a provider's spec may have. */
export type SpecType = "string" | "number" | "boolean" | "string[]";

/**
 * One value a consumer may give a provided interface (`name`, `extensions`). Kept deliberately
 * small: a type, whether it must be given, and for strings a pattern or a list of allowed values
 * (for `string[]`, per item).
 */
export interface SpecField {
  readonly type: SpecType;
  readonly required: boolean;
  /** For `string` and `string[]` (per item): the value must match. */
  readonly pattern?: RegExp | undefined;
  /** For `string`, `number` and `string[]` (per item): the value must be one of these. */
  readonly enum?: readonly (string | number)[] | undefined;
  /**
   * What the provider uses when the consumer gives nothing; the mesh derives it too, so both ends
   * agree (a string may name `{login}`).
   */
  readonly default?: string | number | boolean | readonly string[] | undefined;
  /**
   * The value names a resource of the provider's own (a database, a bucket, a key prefix): no two
   * consumers of one provider may have the same, given or derived from the default.
   */
  readonly unique?: boolean | undefined;
  readonly description?: string | undefined;
}

/** A value a consumer gave that the provider's spec does not accept. */
export interface ValueProblem {
  /** The value's key; the problem's field is `<where the values are>.<key>`. */
  readonly key: string;
  /** For a list, the item at fault. */
  readonly index?: number | undefined;
  /** Starts with "must" or "is", so that `key message` reads as a sentence. */
  readonly message: string;
}

function itemProblem(field: SpecField, item: unknown): string | undefined {
  if (typeof item !== "string") return `must be a string, not ${describeValue(item)}`;
  if (field.pattern && !field.pattern.test(item)) {
    return `must match ${field.pattern.source}, and ${describeValue(item)} does not`;
  }
  if (field.enum && !field.enum.includes(item)) {
    return `must be one of ${field.enum.map((e) => JSON.stringify(e)).join(", ")}, not ${describeValue(item)}`;
  }
  return undefined;
}

function valueProblem(field: SpecField, value: unknown): { index?: number; message: string } | undefined {
  const at = (message: string | undefined) => (message === undefined ? undefined : { message });
  switch (field.type) {
    case "string":
      if (typeof value !== "string") return at(`must be a string, not ${describeValue(value)}`);
      return at(itemProblem(field, value));
    case "number":
      if (typeof value !== "number" || !Number.isFinite(value))
        return at(`must be a number, not ${describeValue(value)}`);
      if (field.enum && !field.enum.includes(value)) {
        return at(`must be one of ${field.enum.join(", ")}, not ${describeValue(value)}`);
      }
      return undefined;
    case "boolean":
      return typeof value === "boolean"
        ? undefined
        : at(`must be true or false, not ${describeValue(value)}`);
    case "string[]": {
      if (!Array.isArray(value)) return at(`must be a list of strings, not ${describeValue(value)}`);
      for (const [index, item] of value.entries()) {
        const message = itemProblem(field, item);
        if (message !== undefined) return { index, message };
      }
      if (new Set(value).size !== value.length) return at("must not list one item twice");
      return undefined;
    }
  }
}

/**
 * Every way `values` does not fit `spec`: keys the spec does not know, values of the wrong type, not
 * matching, not allowed, and required values missing. An empty list means the values fit.
 */
export function specValueProblems(
  spec: ReadonlyMap<string, SpecField>,
  values: Readonly<Record<string, unknown>>,
): ValueProblem[] {
  const problems: ValueProblem[] = [];
  const known = [...spec.keys()];
  for (const key of Object.keys(values)) {
    const field = spec.get(key);
    if (!field) {
      problems.push({
        key,
        message:
          known.length === 0
            ? "is not a value this interface takes (it takes none)"
            : `is not a value this interface takes (it takes ${known.join(", ")})`,
      });
      continue;
    }
    const why = valueProblem(field, values[key]);
    if (why !== undefined) problems.push({ key, ...why });
  }
  for (const [key, field] of spec) {
    if (field.required && !Object.hasOwn(values, key)) {
      problems.push({
        key,
        message: `is required by this interface${field.description ? ` (${field.description})` : ""}`,
      });
    }
  }
  return problems;
}

/**
 * What the mesh derives for one consumer of a provided interface: the default of every spec value
 * the consumer did not give, then every `derives` template, filled from the login and the values.
 * Both the provider (through the contributions file) and the consumer (through its credential
 * file) see the same result.
 * @throws TemplateError when a template names a value that has none.
 */
export function deriveValues(
  provided: { readonly spec: ReadonlyMap<string, SpecField>; readonly derives: ReadonlyMap<string, string> },
  values: Readonly<Record<string, unknown>>,
  login: string,
): Record<string, unknown> {
  const derived: Record<string, unknown> = {};
  for (const [key, field] of provided.spec) {
    if (Object.hasOwn(values, key) || field.default === undefined) continue;
    const def = field.default;
    derived[key] =
      typeof def === "string" ? fillTemplate(def, { login }) : Array.isArray(def) ? [...def] : def;
  }
  const vars = { ...values, ...derived, login };
  for (const [key, template] of provided.derives) derived[key] = fillTemplate(template, vars);
  return derived;
}
