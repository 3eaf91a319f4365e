// The controller's HTTP tokens: the operator token (the dashboard and its API, as the operator) and
// the scrape token (`/metrics` alone, for Prometheus). Each is a file of one line, 0600, made at the
// first start when missing and kept after, so scripts and a Prometheus keep working across restarts.
// By default both live in the controller's state directory, which a standby copies from its leader.
import { randomBytes } from "node:crypto";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "@mesh/bus";

/** The operator token's file in the controller's state directory, when no other is given. */
export const OPERATOR_TOKEN_FILE = "operator.token";

/** The scrape token's file in the controller's state directory. */
export const SCRAPE_TOKEN_FILE = "scrape.token";

/** How many random bytes a token made by the mesh holds (written as base64url: 43 characters). */
export const TOKEN_BYTES = 32;

/** The shortest token read from a file: one an operator wrote must still be hard to guess. */
export const MIN_TOKEN_CHARS = 16;

/** The largest token file read. */
const MAX_TOKEN_FILE_BYTES = 4_096;

/** Which token a file holds, in words for messages: "operator token" or "scrape token". */
export type TokenKind = "operator token" | "scrape token";

/** A token file that cannot be used: unreadable, not a file, open to others, or not one token. */
export class TokenFileError extends Error {
  override name = "TokenFileError";
  constructor(
    readonly path: string,
    readonly kind: TokenKind,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`the ${kind} file ${path} ${why}`, options);
  }
}

/** `<controllerState>/operator.token`: where the operator token lives unless a flag says otherwise. */
export function operatorTokenPath(controllerState: string): string {
  return join(controllerState, OPERATOR_TOKEN_FILE);
}

/** `<controllerState>/scrape.token`: where the scrape token lives. */
export function scrapeTokenPath(controllerState: string): string {
  return join(controllerState, SCRAPE_TOKEN_FILE);
}

/** A new token: `TOKEN_BYTES` from the CSPRNG, base64url. */
export function newToken(): string {
  return randomBytes(TOKEN_BYTES).toString("base64url");
}

/**
 * The token in `path`, or undefined when there is no file there.
 * @throws TokenFileError when the file is not a regular file, others may read or write it, it is
 * too large, or it does not hold one token (a line of at least MIN_TOKEN_CHARS, no spaces).
 */
export async function readToken(path: string, kind: TokenKind): Promise<string | undefined> {
  let info;
  try {
    // Followed: a secrets manager's link to its file is a file; a FIFO or a device is not.
    info = await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new TokenFileError(path, kind, `cannot be read (${(err as NodeJS.ErrnoException).code ?? "?"})`, {
      cause: err,
    });
  }
  if (!info.isFile())
    throw new TokenFileError(path, kind, "is not a regular file: give the path of a file holding the token");
  // A token others can read makes every user of the machine the operator (or a scraper).
  if ((info.mode & 0o077) !== 0)
    throw new TokenFileError(
      path,
      kind,
      `may be read or written by others (mode ${(info.mode & 0o777).toString(8)}): chmod 600 ${path}`,
    );
  if (info.size > MAX_TOKEN_FILE_BYTES)
    throw new TokenFileError(path, kind, `is larger than ${MAX_TOKEN_FILE_BYTES} bytes: it holds one token`);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new TokenFileError(path, kind, `cannot be read (${(err as NodeJS.ErrnoException).code ?? "?"})`, {
      cause: err,
    });
  }
  const token = text.trim();
  if (token.length < MIN_TOKEN_CHARS || /\s/.test(token))
    throw new TokenFileError(
      path,
      kind,
      `does not hold a token (one line of at least ${MIN_TOKEN_CHARS} characters, no spaces): ` +
        "remove it and the mesh makes a new one at its next start",
    );
  return token;
}

/**
 * The token in `path`, or a new one written there (0600, atomically) when the file does not exist.
 * A token is never printed or logged: whoever needs it reads the file.
 * @throws TokenFileError as `readToken` does, or when a new one cannot be written.
 */
export async function loadOrCreateToken(path: string, kind: TokenKind): Promise<string> {
  const kept = await readToken(path, kind);
  if (kept !== undefined) return kept;
  const token = newToken();
  try {
    await writeFileAtomic(path, `${token}\n`, 0o600);
  } catch (err) {
    throw new TokenFileError(path, kind, `cannot be written: ${(err as Error).message}`, { cause: err });
  }
  return token;
}
