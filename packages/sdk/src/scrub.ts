import type { FailureClass } from "./adapter.ts";
import { redactSecrets } from "./redact.ts";

const MOST = 300;

/** An error's text (its message, or what it is), scrubbed of `secrets` and clipped to a status line. */
export function describeError(err: unknown, secrets: readonly string[]): string {
  const text = err instanceof Error ? `${err.message}` : String(err);
  return clip(redactSecrets(text, secrets));
}

/** Keeps a message to what belongs in a status line. */
export function clip(text: string): string {
  const oneLine = text.replace(/\s*\n\s*/g, " ");
  return oneLine.length <= MOST ? oneLine : `${oneLine.slice(0, MOST)}…`;
}

// Words any backend may use. A backend's own words (Postgres's "the database system is starting
// up", Redis's WRONGPASS) are its adapter's `classify`, which is asked first.
const CREDENTIAL_WORDS = ["authentication failed", "access denied", "unauthorized"];
const UNREACHABLE_WORDS = [
  "econnrefused",
  "connection refused",
  "etimedout",
  "timed out",
  "timeout",
  "econnreset",
  "connection reset",
  "enotfound",
  "ehostunreach",
  "enetunreach",
  "socket closed",
];

/** The operating system's codes for "the server could not be reached", whatever the backend. */
export const NETWORK_ERROR_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EPIPE",
]);

/**
 * Every string `code` on `err`, its `cause` chain and an AggregateError's `errors` (a driver that
 * tried several addresses wraps one error per address).
 */
export function errorCodes(err: unknown, depth = 0): string[] {
  if (typeof err !== "object" || err === null || depth > 4) return [];
  const e = err as { code?: unknown; cause?: unknown; errors?: unknown };
  const found = typeof e.code === "string" ? [e.code] : [];
  if (Array.isArray(e.errors)) for (const inner of e.errors) found.push(...errorCodes(inner, depth + 1));
  if (e.cause !== undefined) found.push(...errorCodes(e.cause, depth + 1));
  return found;
}

/** Whether `err` (or what it wraps) is the network failing, not the backend answering. */
export function isNetworkError(err: unknown): boolean {
  return errorCodes(err).some((code) => NETWORK_ERROR_CODES.has(code));
}

/** An error's class read from its code and text: the words the backends the mesh runs use. */
export function classOf(err: unknown, text: string): FailureClass {
  if (isNetworkError(err)) return "unreachable";
  const code = String((err as { code?: unknown } | null)?.code ?? "").toLowerCase();
  const t = `${code} ${text.toLowerCase()}`;
  if (CREDENTIAL_WORDS.some((w) => t.includes(w))) return "credentials-rejected";
  if (UNREACHABLE_WORDS.some((w) => t.includes(w))) return "unreachable";
  return "refused";
}
