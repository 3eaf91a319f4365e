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

const CREDENTIAL_WORDS = [
  "password authentication failed",
  "authentication failed",
  "access denied",
  "wrongpass",
  "noauth",
  "invalid username-password",
  "unauthorized",
];
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
  "connection terminated",
  "connection is closed",
  "socket closed",
  "the database system is starting up",
  "the database system is shutting down",
];

/** An error's class read from its code and text: the words the backends the mesh runs use. */
export function classOf(err: unknown, text: string): FailureClass {
  const code = String((err as { code?: unknown } | null)?.code ?? "").toLowerCase();
  const t = `${code} ${text.toLowerCase()}`;
  if (CREDENTIAL_WORDS.some((w) => t.includes(w))) return "credentials-rejected";
  if (UNREACHABLE_WORDS.some((w) => t.includes(w))) return "unreachable";
  return "refused";
}
