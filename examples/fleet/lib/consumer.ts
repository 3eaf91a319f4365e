// What every example consumer does around its own work: find the credential file the mesh wrote
// for it, wait until it is there and the provider lets it in, notice a new password, and stop
// cleanly on SIGTERM. A consumer needs no Mesh library: the mesh hands it files, and reading them
// is all this takes.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

/** A consumer's credential with its password read from the password file. */
export interface Credential {
  /** The credential file it was read from. */
  readonly file: string;
  readonly login: string;
  /** Never printed: every line an app says is scrubbed of it. */
  readonly password: string;
  readonly host: string;
  readonly port?: number | undefined;
  /** The endpoint's path, `"/notes"` for a database; `""` when the provider has none. */
  readonly path: string;
  /** The connection URL without the password, safe to print. */
  readonly url: string;
  /** The values asked for and derived (`name`, `prefix`). */
  readonly values: Readonly<Record<string, unknown>>;
  /** The endpoint's named URLs (an OIDC provider's `issuer` and `discovery`); empty when none. */
  readonly links: Readonly<Record<string, string>>;
}

/**
 * The credential cannot be used yet: the file is missing (the mesh has not written it), is not a
 * credential, or its password file is missing or empty. The app waits and reads it again.
 */
export class CredentialNotReadyError extends Error {
  override name = "CredentialNotReadyError";
  constructor(
    readonly file: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`credential file ${file} ${why}`, options);
  }
}

/** The app was started without MESH_CREDENTIALS, so it cannot know where its credential is. */
export class NotStartedByMeshError extends Error {
  override name = "NotStartedByMeshError";
  constructor(readonly app: string) {
    super(
      `${app}: MESH_CREDENTIALS is not set: the mesh agent sets it to the directory of this module's ` +
        `credential files when it starts the module; run it with \`mesh up\`, or set it by hand`,
    );
  }
}

function fileError(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  return code === "ENOENT" ? "does not exist yet" : `cannot be read (${code ?? String(err)})`;
}

function field(doc: Record<string, unknown>, key: string, file: string): string {
  const value = doc[key];
  if (typeof value !== "string" || value === "") {
    throw new CredentialNotReadyError(file, `has no ${key} (a string); it is not a mesh credential file`);
  }
  return value;
}

/**
 * Reads `<dir>/<iface>.json` as the agent writes it (login, passwordFile, endpoint, url, values)
 * and the password from its password file: exactly the file, less one trailing newline.
 * @throws CredentialNotReadyError when either file is missing, unreadable, not a credential, or
 * the password is empty.
 */
export async function readCredential(dir: string, iface: string): Promise<Credential> {
  const file = join(dir, `${iface}.json`);
  let doc: unknown;
  try {
    doc = JSON.parse(await readFile(file, "utf8"));
  } catch (err) {
    const why = err instanceof SyntaxError ? `is not JSON (${err.message})` : fileError(err);
    throw new CredentialNotReadyError(file, why, { cause: err });
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
    throw new CredentialNotReadyError(file, "is not a JSON object; it is not a mesh credential file");
  }
  const record = doc as Record<string, unknown>;
  const login = field(record, "login", file);
  const passwordFile = field(record, "passwordFile", file);
  const url = field(record, "url", file);
  const endpoint = record["endpoint"];
  if (typeof endpoint !== "object" || endpoint === null) {
    throw new CredentialNotReadyError(file, "has no endpoint: the provider does not say how to reach it");
  }
  const ep = endpoint as Record<string, unknown>;
  const host = field(ep, "host", file);
  const port = typeof ep["port"] === "number" ? ep["port"] : undefined;
  const path = typeof ep["path"] === "string" ? ep["path"] : "";
  const values =
    typeof record["values"] === "object" && record["values"] !== null
      ? (record["values"] as Record<string, unknown>)
      : {};
  let raw: string;
  try {
    raw = await readFile(passwordFile, "utf8");
  } catch (err) {
    throw new CredentialNotReadyError(file, `names password file ${passwordFile}, which ${fileError(err)}`, {
      cause: err,
    });
  }
  const password = raw.endsWith("\r\n") ? raw.slice(0, -2) : raw.endsWith("\n") ? raw.slice(0, -1) : raw;
  if (password === "")
    throw new CredentialNotReadyError(file, `names password file ${passwordFile}, which is empty`);
  const links: Record<string, string> = {};
  if (typeof record["links"] === "object" && record["links"] !== null) {
    for (const [name, link] of Object.entries(record["links"]))
      if (typeof link === "string") links[name] = link;
  }
  return { file, login, password, host, port, path, url, values, links };
}

/** An open connection an app works through. */
export interface Session {
  /** Does one piece of the app's work and answers the line to print. Throws when the connection is lost. */
  step(): Promise<string>;
  /** Closes the connection; never throws. */
  close(): Promise<void>;
}

/** An example consumer: its name, the interface it needs and how it connects. */
export interface ConsumerApp {
  /** Its module name, the first word of every line it prints. */
  readonly name: string;
  readonly interface: string;
  /** Opens a session with `credential`; throws when the provider cannot be reached or refuses it. */
  connect(credential: Credential): Promise<Session>;
  /** How long between two steps; the default is 3 s (EXAMPLE_INTERVAL_MS overrides it). */
  readonly intervalMs?: number;
}

const RETRY_MS = 1_000;
const STOP_GRACE_MS = 5_000;

/** What to print for a failure: its message (or its code, for errors that have none). */
function describe(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return describe(err.errors[0]);
  if (err instanceof Error) return err.message || (err as NodeJS.ErrnoException).code || err.name;
  return String(err);
}

function intervalFrom(app: ConsumerApp): number {
  const fromEnv = Number(process.env["EXAMPLE_INTERVAL_MS"]);
  return Number.isFinite(fromEnv) && fromEnv > 0 ? fromEnv : (app.intervalMs ?? 3_000);
}

/** What identifies the connection a credential makes, so a change in any part means a reconnect. */
function connectionKey(c: Credential): string {
  return JSON.stringify([c.login, c.host, c.port, c.path, c.values]);
}

/**
 * Runs `app` until SIGTERM or SIGINT, then exits 0: reads its credential from MESH_CREDENTIALS,
 * waits (saying so once, retrying every second) until the file is there and the provider lets it
 * in, does a step every interval, and reconnects when the password or endpoint changes or the
 * connection is lost. Never prints the password.
 * @throws NotStartedByMeshError (before doing anything) when MESH_CREDENTIALS is not set.
 */
export async function runConsumer(app: ConsumerApp): Promise<void> {
  const dir = process.env["MESH_CREDENTIALS"];
  if (dir === undefined || dir === "") throw new NotStartedByMeshError(app.name);
  const interval = intervalFrom(app);
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals): void => {
    if (stop.signal.aborted) return;
    say(`stopping (${signal})`);
    stop.abort();
    // Closing a connection to a server that went away can hang; stopping must not.
    setTimeout(() => process.exit(0), STOP_GRACE_MS).unref();
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);

  // Every password this process has seen: an error message quoting an old one is scrubbed too.
  const secrets = new Set<string>();
  function say(text: string): void {
    let line = text;
    for (const secret of secrets) line = line.split(secret).join("<password>");
    console.log(`${app.name}: ${line}`);
  }
  // A state the app is waiting in, said once until it changes, so a person watching sees why
  // nothing happens without a line every second.
  let waitingFor: string | undefined;
  function waitingOnce(why: string): void {
    if (why === waitingFor) return;
    waitingFor = why;
    say(`${why}; retrying every second`);
  }
  const pause = async (ms: number): Promise<void> => {
    await sleep(ms, undefined, { signal: stop.signal }).catch(() => {});
  };

  let session: Session | undefined;
  let current: Credential | undefined;
  while (!stop.signal.aborted) {
    let credential: Credential;
    try {
      credential = await readCredential(dir, app.interface);
      secrets.add(credential.password);
    } catch (err) {
      if (!(err instanceof CredentialNotReadyError)) throw err;
      waitingOnce(`waiting for my credential: ${err.message}`);
      await pause(RETRY_MS);
      continue;
    }
    if (session && current) {
      const passwordChanged = credential.password !== current.password;
      const endpointChanged = connectionKey(credential) !== connectionKey(current);
      if (passwordChanged || endpointChanged) {
        say(
          endpointChanged
            ? `my credential changed (now ${credential.url}); reconnecting`
            : "my password changed; reconnecting with the new one",
        );
        await session.close();
        session = undefined;
      }
    }
    if (!session) {
      try {
        session = await app.connect(credential);
      } catch (err) {
        waitingOnce(`cannot connect to ${credential.url} yet (${describe(err)})`);
        await pause(RETRY_MS);
        continue;
      }
      current = credential;
      waitingFor = undefined;
      say(`connected to ${credential.url} as ${credential.login}`);
    }
    try {
      say(await session.step());
    } catch (err) {
      say(`lost the connection (${describe(err)}); reconnecting`);
      await session.close();
      session = undefined;
      await pause(RETRY_MS);
      continue;
    }
    await pause(interval);
  }
  await session?.close();
}

/**
 * Runs `app` as a program's main: exits 0 after a clean stop, 1 with the reason when it cannot run.
 */
export function main(app: ConsumerApp): void {
  runConsumer(app).then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err instanceof Error ? err.message : String(err));
      process.exit(1);
    },
  );
}
