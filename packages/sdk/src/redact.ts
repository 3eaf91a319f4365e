// Keeping the admin URL's password out of everything a provider process says. A URL is said back to
// an operator so they can see which server is meant; its password never is.

import type { Logger } from "./collaborators.ts";

const MASK = "***";

/** Query parameters some drivers take a password from (`?password=…`). */
const SECRET_PARAM = /^(pass(word)?|pwd|secret|token|key)$/i;

/** What stands in for a URL that neither parses nor shows where its password would be. */
export const UNREADABLE_URL = "(a URL that does not parse; not shown, as it may hold a password)";

/**
 * The URL with its password (and any `password=`-like query parameter) replaced by `***`, for
 * messages. A URL that does not parse is never echoed raw: its user-info is masked when it can be
 * found, else the whole URL is replaced by a note.
 */
export function redactUrl(url: string): string {
  if (!isServerUrl(url)) return redactUnparsed(url);
  const parsed = new URL(url);
  // An unescaped "@" or "/" in a password makes the parser end the host early and put the rest of the
  // password into the path; read such a URL the way its writer meant it instead.
  const hasUserinfo = parsed.username !== "" || parsed.password !== "";
  if (hasUserinfo && `${parsed.pathname}${parsed.search}${parsed.hash}`.includes("@"))
    return redactUnparsed(url);
  if (parsed.password !== "") parsed.password = MASK;
  for (const key of [...parsed.searchParams.keys()]) {
    if (SECRET_PARAM.test(key)) parsed.searchParams.set(key, MASK);
  }
  return parsed.toString();
}

const SCHEME_AND_SLASHES = /^[a-z][a-z0-9+.-]*:\/\//i;

/**
 * Whether `text` is a URL of the `scheme://…` kind a server is reached by. A bare `user:secret@host`
 * parses as a URL too (scheme `user`), so parsing alone does not say it.
 */
export function isServerUrl(text: string): boolean {
  return SCHEME_AND_SLASHES.test(text) && URL.canParse(text);
}

function redactUnparsed(url: string): string {
  // Everything up to the last "@" is the user-info, since an unescaped password may hold "@" or "/".
  const match = /^([a-z][a-z0-9+.-]*:\/\/)(.*)@([^@]*)$/is.exec(url);
  if (match === null) return UNREADABLE_URL;
  const [, scheme = "", userinfo = "", rest = ""] = match;
  const colon = userinfo.indexOf(":");
  const user = colon === -1 ? userinfo : userinfo.slice(0, colon);
  if (/[\s/?#]/.test(user)) return UNREADABLE_URL;
  const restShown = redactUrl(`${scheme}${rest}`);
  if (restShown === UNREADABLE_URL) return UNREADABLE_URL;
  return `${scheme}${user}:${MASK}@${restShown.slice(scheme.length)}`;
}

/**
 * The secrets a URL carries, in the forms it carries them (decoded and as written): its password
 * and any `password=`-like query parameter. For `redactSecrets` over whatever a driver says.
 */
export function secretsOfUrl(url: string): string[] {
  const found = new Set<string>();
  const add = (secret: string): void => {
    found.add(secret);
    found.add(safeDecode(secret));
  };
  try {
    const parsed = new URL(url);
    if (parsed.password !== "") add(parsed.password);
    for (const [key, value] of parsed.searchParams) {
      if (SECRET_PARAM.test(key)) add(value);
    }
  } catch {
    // Read below the way its writer meant it.
  }
  // Everything up to the last "@" is the user-info when the password holds an unescaped "@" or "/".
  const userinfo = /^[a-z][a-z0-9+.-]*:\/\/(.*)@[^@]*$/is.exec(url)?.[1] ?? "";
  const colon = userinfo.indexOf(":");
  if (colon !== -1) add(userinfo.slice(colon + 1));
  found.delete("");
  return [...found];
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The forms a secret takes on its way into a message: raw, query-, path- and user-info-escaped. */
function formsOf(secret: string): string[] {
  const component = encodeURIComponent(secret);
  const forms = new Set<string>([
    secret,
    component,
    component.replaceAll("%20", "+"),
    // Path escaping leaves these as they are.
    component.replace(/%(24|26|2B|2C|3A|3B|3D|40)/g, (escaped) => decodeURIComponent(escaped)),
    encodeURI(secret),
  ]);
  try {
    const probe = new URL("x://h");
    probe.password = secret;
    forms.add(probe.password);
  } catch {
    // A secret a URL cannot carry has no user-info form.
  }
  forms.delete("");
  return [...forms];
}

/**
 * `text` with every secret replaced by `***`, in its raw, percent-escaped (query and path) and
 * URL user-info forms. Empty secrets are ignored.
 */
export function redactSecrets(text: string, secrets: readonly string[]): string {
  // Longest first across all secrets, so a secret that contains another is masked whole.
  const forms = [...new Set(secrets.filter((s) => s !== "").flatMap(formsOf))].sort(
    (a, b) => b.length - a.length,
  );
  let out = text;
  for (const form of forms) out = out.split(form).join(MASK);
  return out;
}

/** A logger that says what `logger` says, with every one of `secrets` replaced by `***`. */
export function redactingLogger(logger: Logger, secrets: readonly string[]): Logger {
  const scrub = (message: string): string => redactSecrets(message, secrets);
  return {
    info: (message) => logger.info(scrub(message)),
    warn: (message) => logger.warn(scrub(message)),
    error: (message) => logger.error(scrub(message)),
  };
}

// `scheme://…` up to whitespace or a closing quote or bracket: a URL inside an error's text.
const URL_IN_TEXT = /[a-z][a-z0-9+.-]*:\/\/[^\s"'<>()[\]{}]+/gi;

/**
 * `text` with the password of every URL in it masked (`redactUrl`). The providers scrub what they
 * say already; this keeps a URL a driver wrote into its error from being shown whole all the same.
 */
export function maskUrls(text: string): string {
  return text.replace(URL_IN_TEXT, (url) => redactUrl(url));
}

/**
 * `value` with every string in it masked (see `maskUrls`): for what the mesh passes on (a standing,
 * a ledger, a tool's answer or refusal) before it is kept, shown or printed.
 */
export function maskDeep<T>(value: T): T {
  if (typeof value === "string") return maskUrls(value) as T;
  if (Array.isArray(value)) return value.map((v: unknown) => maskDeep(v)) as T;
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, maskDeep(v)])) as T;
  }
  return value;
}
