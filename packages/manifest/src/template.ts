// The manifest's few templates (`"/{name}"`, `"{login}:"`) name values by key in braces. Nothing
// else is expanded, so a template can never reach beyond the consumer's own values and login.

const PLACEHOLDER = /\{([^{}]*)\}/g;

/** A template could not be filled: it names a value the consumer neither gave nor was derived. */
export class TemplateError extends Error {
  override name = "TemplateError";
  constructor(
    readonly template: string,
    readonly key: string,
    reason: string,
  ) {
    super(`template ${JSON.stringify(template)}: {${key}} ${reason}`);
  }
}

/** The keys a template names, in order (`"/{name}"` → `["name"]`). */
export function templateKeys(template: string): string[] {
  return [...template.matchAll(PLACEHOLDER)].map((m) => m[1] ?? "");
}

/**
 * Why `template` is not valid given the keys it may name, or undefined when it is: every `{`
 * closes, nothing is nested, and each placeholder is one of `allowed`.
 */
export function templateProblem(template: string, allowed: readonly string[]): string | undefined {
  const stripped = template.replace(PLACEHOLDER, "");
  if (stripped.includes("{") || stripped.includes("}")) {
    return `${JSON.stringify(template)} has a "{" or "}" that is not part of a placeholder like {login}`;
  }
  for (const key of templateKeys(template)) {
    if (!allowed.includes(key)) {
      return `${JSON.stringify(template)} names {${key}}, which is not one of ${allowed.map((k) => `{${k}}`).join(", ")}`;
    }
  }
  return undefined;
}

/**
 * Fills each `{key}` of `template` from `vars`, through `encode` (for a URL, percent-encoding).
 * @throws TemplateError when a key has no value or a value that is not a string, number or boolean.
 */
export function fillTemplate(
  template: string,
  vars: Readonly<Record<string, unknown>>,
  encode: (text: string) => string = (text) => text,
): string {
  return template.replace(PLACEHOLDER, (_whole, key: string) => {
    const value = Object.hasOwn(vars, key) ? vars[key] : undefined;
    if (value === undefined || value === null) throw new TemplateError(template, key, "has no value");
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      throw new TemplateError(template, key, "is not a single value (a string, number or boolean)");
    }
    return encode(String(value));
  });
}
