// The refusals every provider shares. A refusal is the backend's state or the consumer's values
// making a step wrong, not a fault: retrying it changes nothing until a person acts, so the harness
// classes each one `refused` without asking the adapter, wherever it sits in an error's cause chain.

import { InvalidLoginError } from "./login.ts";

/**
 * The base of every refusal a provider makes (a kit class or a provider's own): what a person must
 * act on before the step can succeed. The harness classes it `refused`.
 */
export class RefusalError extends Error {
  override name = "RefusalError";
  constructor(
    /** The consumer the refusal is about. */
    readonly login: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** What the backend holds under a name, and who made it instead, for a `NotMadeHereError`. */
export interface NotMadeHereDetail {
  /** What exists, as the backend names it ("role \"alice\"", "database \"shop\""). Default: the consumer. */
  readonly resource?: string | undefined;
  /** Who made it instead, when known ("it is marked by instance \"other\""). Default: it carries no mark. */
  readonly madeBy?: string | undefined;
  /** What to do instead of the default fix (give the consumer another name, or remove it by hand). */
  readonly fix?: string | undefined;
}

/**
 * Something of the consumer's name exists in the backend and this provider instance did not make
 * it (a person did, or another instance): the mesh never alters or deletes it.
 */
export class NotMadeHereError extends RefusalError {
  override name = "NotMadeHereError";
  /** What exists (the consumer's login, or the resource it would take). */
  readonly resource: string;
  constructor(
    login: string,
    /** The provider instance that refused. */
    readonly instance: string,
    detail: NotMadeHereDetail = {},
  ) {
    const resource = detail.resource ?? `consumer ${JSON.stringify(login)}`;
    super(
      login,
      `${resource} was not made by mesh provider instance ${JSON.stringify(instance)} ` +
        `(${detail.madeBy ?? "it carries no mark of this instance"}); it is left untouched: ` +
        (detail.fix ?? "give the consumer another name, or remove it by hand if nobody needs it"),
    );
    this.resource = resource;
  }
}

/** `delete` was asked of a consumer that is not retired: only a retired consumer is ever deleted. */
export class NotRetiredError extends RefusalError {
  override name = "NotRetiredError";
  constructor(
    login: string,
    /** Why it counts as not retired ("it is active", "its ACL user was turned on again"). */
    readonly why = "it is active",
  ) {
    super(
      login,
      `consumer ${JSON.stringify(login)} is not retired (${why}): nothing deleted; only a retired consumer ` +
        "is deleted — it retires once it is no longer asked for, or with `retire approve`",
    );
  }
}

/** A value the consumer contributed cannot be used; refused before anything reaches the backend. */
export class ValueRefusedError extends RefusalError {
  override name = "ValueRefusedError";
  constructor(
    login: string,
    /** The field of `values` (for example "name" or "extensions"). */
    readonly field: string,
    readonly value: unknown,
    /** What is wrong with it and what to give instead, as the end of a sentence. */
    why: string,
  ) {
    super(
      login,
      `${JSON.stringify(login)}: values.${field} ${quoteValue(value)} ${why}; nothing was sent to the backend`,
    );
  }
}

/**
 * Refuses the first of `values` that is not among `allowed` (a list, or a set's or map's keys),
 * naming `field`; `why` is handed the allowed names, joined with ", ", to say what to ask for.
 * @throws ValueRefusedError for that value, having sent nothing to the backend.
 */
export function refuseUnlisted(
  login: string,
  field: string,
  values: Iterable<string>,
  allowed: readonly string[] | ReadonlySet<string> | ReadonlyMap<string, unknown>,
  why: (allowedNames: string) => string,
): void {
  const names = Array.isArray(allowed) ? allowed : [...(allowed as ReadonlySet<string>).keys()];
  for (const value of values) {
    if (!names.includes(value)) throw new ValueRefusedError(login, field, value, why(names.join(", ")));
  }
}

/**
 * The consumer now asks for another derived resource (a database name) than the one it was made
 * with: the mesh never renames or moves data.
 */
export class DerivedChangedError extends RefusalError {
  override name = "DerivedChangedError";
  constructor(
    login: string,
    /** What changed, as a person names it ("database"). */
    readonly field: string,
    readonly recorded: string,
    readonly asked: string,
  ) {
    super(
      login,
      `${JSON.stringify(login)} was made with ${field} ${JSON.stringify(recorded)} and now asks for ` +
        `${JSON.stringify(asked)}; the mesh does not rename or move data: ask for ${JSON.stringify(recorded)} ` +
        "again, or give the consumer a new login",
    );
  }
}

/**
 * The first error along `err`'s `cause` chain (and an AggregateError's `errors`) that `test`
 * accepts, `err` itself included; undefined when none does. Bounded, so a cycle ends.
 */
export function findInChain<T>(err: unknown, test: (e: unknown) => e is T, depth?: number): T | undefined;
export function findInChain(err: unknown, test: (e: unknown) => boolean, depth?: number): unknown;
export function findInChain(err: unknown, test: (e: unknown) => boolean, depth = 0): unknown {
  if (err === undefined || err === null || depth > 5) return undefined;
  if (test(err)) return err;
  if (typeof err !== "object") return undefined;
  const { errors, cause } = err as { errors?: unknown; cause?: unknown };
  if (Array.isArray(errors)) {
    for (const inner of errors) {
      const found = findInChain(inner, test, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return findInChain(cause, test, depth + 1);
}

/** Whether `err`, or an error it wraps, is a refusal (a `RefusalError`, or a login refused as invalid). */
export function isRefusal(err: unknown): boolean {
  return findInChain(err, (e) => e instanceof RefusalError || e instanceof InvalidLoginError) !== undefined;
}

/** A value as an error message quotes it: JSON, clipped to 80 characters; never throws. */
export function quoteValue(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value) ?? String(value);
  } catch {
    return "(not JSON)";
  }
  return text.length > 80 ? `${text.slice(0, 80)}…` : text;
}
