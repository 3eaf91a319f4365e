/** What every backend accepts as a login: lowercase, starts with a letter, at most 32 characters. */
export const LOGIN_PATTERN = /^[a-z][a-z0-9_]{0,31}$/;

/** A login that is not valid for every backend; refused before it reaches any. */
export class InvalidLoginError extends Error {
  override name = "InvalidLoginError";
  constructor(readonly login: string) {
    super(
      `login ${JSON.stringify(login)} is not valid: a login is 1–32 characters of a-z, 0-9 and _, ` +
        `starting with a letter; refused before it reaches the backend`,
    );
  }
}

/** Whether `login` is valid for every backend. */
export function isValidLogin(login: unknown): login is string {
  return typeof login === "string" && LOGIN_PATTERN.test(login);
}

/**
 * Returns `login` when it is valid.
 * @throws InvalidLoginError when it is not.
 */
export function assertLogin(login: unknown): string {
  if (!isValidLogin(login)) throw new InvalidLoginError(String(login));
  return login;
}

// The light entry: a provider process loads no schema of the manifest package for these.
export { isSecondLogin, secondLogin } from "@mesh/manifest/login";
