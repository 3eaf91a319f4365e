import { readFile } from "node:fs/promises";

/** A consumer's secret file could not give a password. Never "no password": the consumer waits. */
export class SecretUnreadableError extends Error {
  override name = "SecretUnreadableError";
  constructor(
    readonly path: string,
    reason: string,
    options?: { cause?: unknown },
  ) {
    super(`secret file ${path} ${reason}`, options);
  }
}

/**
 * Reads a password from its secret file: exactly the file, less one trailing newline.
 * @throws SecretUnreadableError when the file cannot be read or is empty.
 */
export async function readSecret(path: string): Promise<string> {
  let raw: string;
  try {
    raw = await readFile(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const reason = code === "ENOENT" ? "does not exist" : `cannot be read (${code ?? "error"})`;
    throw new SecretUnreadableError(path, reason, { cause: err });
  }
  const password = raw.endsWith("\r\n") ? raw.slice(0, -2) : raw.endsWith("\n") ? raw.slice(0, -1) : raw;
  if (password === "") throw new SecretUnreadableError(path, "is empty");
  return password;
}
