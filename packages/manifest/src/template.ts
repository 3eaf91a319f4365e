// The manifest's few templates (`"/{name}"`, `"{login}:"`) name values by key in braces. Nothing
// else is expanded, so a template can never reach beyond the consumer's own values and login. A
// placeholder may pass its value through one of a fixed table of rules (`{login|s3-bucket}`),
// for a name that a backend spells otherwise than a login.

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

/**
 * The S3 bucket named from a login, by one rule that always gives a valid bucket name: every `_`
 * becomes `-` (S3 refuses `_`); a result shorter than 3 characters, ending in `-` or starting
 * with `xn--` (all refused by S3) is wrapped as `0<result>0`. No plain result starts with a digit,
 * since logins start with a letter, so two logins never share a bucket.
 * `s3BucketName("notes_s3") === "notes-s3"`, `s3BucketName("ab") === "0ab0"`.
 */
export function s3BucketName(login: string): string {
  const plain = login.replace(/_/g, "-");
  const valid = plain.length >= 3 && !plain.endsWith("-") && !plain.startsWith("xn--");
  return valid ? plain : `0${plain}0`;
}

/** The rules a placeholder may apply to its value, by name: `{login|s3-bucket}`. */
export const TEMPLATE_RULES: Readonly<Record<string, (value: string) => string>> = {
  "s3-bucket": s3BucketName,
};

function split(placeholder: string): { key: string; rule: string | undefined } {
  const bar = placeholder.indexOf("|");
  return bar < 0
    ? { key: placeholder, rule: undefined }
    : { key: placeholder.slice(0, bar), rule: placeholder.slice(bar + 1) };
}

/** The keys a template names, in order (`"/{name}"` → `["name"]`, `"{login|s3-bucket}"` → `["login"]`). */
export function templateKeys(template: string): string[] {
  return [...template.matchAll(PLACEHOLDER)].map((m) => split(m[1] ?? "").key);
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
  for (const m of template.matchAll(PLACEHOLDER)) {
    const { key, rule } = split(m[1] ?? "");
    if (rule !== undefined && !Object.hasOwn(TEMPLATE_RULES, rule)) {
      return `${JSON.stringify(template)} applies the rule |${rule}, which is not one of ${Object.keys(
        TEMPLATE_RULES,
      )
        .map((r) => `|${r}`)
        .join(", ")}`;
    }
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
  return template.replace(PLACEHOLDER, (_whole, placeholder: string) => {
    const { key, rule } = split(placeholder);
    const value = Object.hasOwn(vars, key) ? vars[key] : undefined;
    if (value === undefined || value === null) throw new TemplateError(template, key, "has no value");
    if (typeof value !== "string" && typeof value !== "number" && typeof value !== "boolean") {
      throw new TemplateError(template, key, "is not a single value (a string, number or boolean)");
    }
    const apply = rule === undefined ? undefined : TEMPLATE_RULES[rule];
    if (rule !== undefined && apply === undefined)
      throw new TemplateError(template, key, `names the unknown rule |${rule}`);
    return encode(apply === undefined ? String(value) : apply(String(value)));
  });
}
