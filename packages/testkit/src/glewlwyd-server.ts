// A private Glewlwyd (OpenID Connect provider) for tests: its own directory, a fresh SQLite
// database loaded from Debian's schema, a free loopback port, the stock admin password replaced
// before anything else happens, and one OIDC plugin instance that signs with an ES256 key made here
// (an HMAC key would publish no JWKS, so no consumer could verify a token). Non-OIDC OAuth2 requests
// and client_credentials are on, and access tokens live five minutes.
import type { ChildProcess } from "node:child_process";
import { spawnSync } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { constants } from "node:fs";
import { access, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { awaitReady, onFreePort, spawnServer, terminate } from "./server-process.ts";

/** Where Debian's glewlwyd package keeps the SQLite schema (with the stock admin). */
export const GLEWLWYD_SQLITE_SCHEMA = "/usr/share/dbconfig-common/data/glewlwyd/install/sqlite3";
/** Where Debian's glewlwyd package keeps its modules. */
export const GLEWLWYD_MODULES = "/usr/lib/glewlwyd";
/** The scopes every test server has, besides Glewlwyd's own `openid`: what consumers may ask for. */
export const GLEWLWYD_TEST_SCOPES: readonly string[] = ["api.read", "api.write", "profile", "email"];
/** How long an access token lives on a test server (seconds): short, as a retired client's tokens stay valid until then. */
export const GLEWLWYD_ACCESS_TOKEN_SECONDS = 300;

/** How to start a private Glewlwyd. */
export interface StartGlewlwydOptions {
  /** The OIDC plugin instance's name: its endpoints are under `/api/<name>/` ("oidc"). */
  readonly plugin?: string | undefined;
  /** How long to wait for it to answer (30 s: the test machines are small and busy). */
  readonly startTimeout?: number | undefined;
}

/** What an admin call answered. */
export interface GlewlwydReply {
  readonly status: number;
  /** The body parsed as JSON, or its text when it is not JSON, or undefined when empty. */
  readonly body: unknown;
}

/** A running private Glewlwyd. */
export interface GlewlwydServer {
  readonly host: string;
  readonly port: number;
  /** `http://127.0.0.1:<port>`. */
  readonly baseUrl: string;
  /** `http://admin:<password>@127.0.0.1:<port>/api`: the admin's URL, as a provider is given it. */
  readonly adminUrl: string;
  /** The admin's password, which replaced the stock one at start. */
  readonly adminPassword: string;
  /** The OIDC issuer, `http://127.0.0.1:<port>/api/<plugin>`, as tokens carry it in `iss`. */
  readonly issuer: string;
  /** `<issuer>/.well-known/openid-configuration`. */
  readonly discoveryUrl: string;
  /** `<issuer>/token`. */
  readonly tokenUrl: string;
  /** `<issuer>/jwks`. */
  readonly jwksUrl: string;
  /** `<issuer>/introspect` (client_secret_basic: a client introspects its own tokens). */
  readonly introspectionUrl: string;
  /** The scopes made at start (see `GLEWLWYD_TEST_SCOPES`) and `openid`. */
  readonly scopes: readonly string[];
  /** Where the server keeps its files (removed by `stop`). */
  readonly dir: string;
  /** Calls the admin API (`path` under `/api`, "/client/x") with the testkit's own API key. */
  admin(method: string, path: string, body?: unknown): Promise<GlewlwydReply>;
  /** Stops the server and removes its directory. Idempotent. */
  stop(): Promise<void>;
}

/** glewlwyd, its modules or the sqlite3 command are not installed where the tests look. */
export class GlewlwydNotFoundError extends Error {
  override name = "GlewlwydNotFoundError";
  constructor(readonly missing: string) {
    super(
      `${missing} not found; install the Debian packages glewlwyd and sqlite3 ` +
        "(apt-get install -y glewlwyd sqlite3; `npm test` does it when run as root)",
    );
  }
}

/** Glewlwyd did not start, did not answer, or refused a step of its set-up; carries its log's tail. */
export class GlewlwydStartError extends Error {
  override name = "GlewlwydStartError";
  constructor(
    readonly port: number,
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`glewlwyd on 127.0.0.1:${port} did not start: ${detail}`, options);
  }
}

const HOST = "127.0.0.1";
const STOCK_ADMIN = { username: "admin", password: "password" };
const STOP_WITHIN_MS = 10_000;
const CALL_TIMEOUT_MS = 15_000;

/**
 * Starts a private Glewlwyd from Debian's package on a free loopback port, with a fresh SQLite
 * database, a random admin password, an API key of the testkit's own, the test scopes and an OIDC
 * plugin instance signing with a fresh ES256 key.
 * @throws GlewlwydNotFoundError when glewlwyd, its modules, its schema or sqlite3 is missing;
 *   GlewlwydStartError when it does not answer or refuses its set-up.
 */
export async function startGlewlwyd(options: StartGlewlwydOptions = {}): Promise<GlewlwydServer> {
  const binary = await findOnPath("glewlwyd", ["/usr/bin", "/usr/sbin"]);
  const sqlite = await findOnPath("sqlite3", ["/usr/bin"]);
  for (const needed of [GLEWLWYD_SQLITE_SCHEMA, join(GLEWLWYD_MODULES, "plugin", "libprotocol_oidc.so")]) {
    await access(needed, constants.R_OK).catch(() => {
      throw new GlewlwydNotFoundError(needed);
    });
  }
  const plugin = options.plugin ?? "oidc";
  const dir = await mkdtemp(join(tmpdir(), "mesh-glewlwyd-"));
  let child: ChildProcess | undefined;
  try {
    const database = join(dir, "glewlwyd.db");
    const loaded = spawnSync(sqlite, [database], {
      input: await readFile(GLEWLWYD_SQLITE_SCHEMA, "utf8"),
      encoding: "utf8",
    });
    if (loaded.status !== 0) {
      throw new GlewlwydStartError(
        0,
        `sqlite3 could not load ${GLEWLWYD_SQLITE_SCHEMA}: ${loaded.stderr.trim()}`,
      );
    }
    const log = join(dir, "glewlwyd.log");
    const started = await onFreePort(async (port) => {
      const config = join(dir, "glewlwyd.conf");
      await writeFile(config, configText(port, database, log), { mode: 0o600 });
      const server = spawnServer(binary, ["-c", config]);
      return awaitReady(server, {
        probe: async () => String((await fetch(`http://${HOST}:${port}/config/`)).status),
        ready: (reply) => reply === "200",
        expected: "answer to GET /config/",
        withinMs: options.startTimeout ?? 30_000,
        stopWithinMs: STOP_WITHIN_MS,
        log,
        fail: (detail) => new GlewlwydStartError(port, detail),
      });
    });
    child = started.child;
    const port = started.port;
    const baseUrl = `http://${HOST}:${port}`;
    const api = `${baseUrl}/api`;
    const fail = (step: string, reply: GlewlwydReply): GlewlwydStartError =>
      new GlewlwydStartError(port, `${step} answered ${reply.status} ${JSON.stringify(reply.body)}`);

    // The stock admin password is public: it is replaced before the API key is made with it.
    const cookie = await logIn(api, STOCK_ADMIN.username, STOCK_ADMIN.password);
    if (cookie === undefined) throw new GlewlwydStartError(port, "the stock admin login was refused");
    const adminPassword = randomBytes(24).toString("base64url");
    const changed = await call(api, { cookie }, "PUT", `/user/${STOCK_ADMIN.username}`, {
      password: adminPassword,
    });
    if (changed.status !== 200) throw fail("changing the admin password", changed);
    const keyReply = await call(api, { cookie }, "POST", "/key/");
    const key = (keyReply.body as { key?: unknown } | undefined)?.key;
    if (keyReply.status !== 200 || typeof key !== "string") throw fail("making an API key", keyReply);
    const admin = (method: string, path: string, body?: unknown): Promise<GlewlwydReply> =>
      call(api, { key }, method, path, body);

    for (const scope of GLEWLWYD_TEST_SCOPES) {
      const made = await admin("POST", "/scope/", {
        name: scope,
        display_name: scope,
        description: `test scope ${scope}`,
        password_required: false,
      });
      if (made.status !== 200) throw fail(`making scope ${scope}`, made);
    }

    const issuer = `${api}/${plugin}`;
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const made = await admin("POST", "/mod/plugin/", {
      module: "oidc",
      name: plugin,
      display_name: "OpenID Connect (tests)",
      enabled: true,
      parameters: {
        iss: issuer,
        "jwt-type": "ecdsa",
        "jwt-key-size": "256",
        key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
        cert: publicKey.export({ type: "spki", format: "pem" }).toString(),
        "access-token-duration": GLEWLWYD_ACCESS_TOKEN_SECONDS,
        "refresh-token-duration": 3600,
        "code-duration": 600,
        "refresh-token-rolling": false,
        "allow-non-oidc": true,
        "auth-type-client-enabled": true,
        "auth-type-code-enabled": true,
        "auth-type-refresh-enabled": true,
        "auth-type-token-enabled": false,
        "auth-type-none-enabled": false,
        "auth-type-password-enabled": false,
        "introspection-revocation-allowed": true,
        "introspection-revocation-allow-target-client": true,
        scope: [],
      },
    });
    if (made.status !== 200) throw fail("making the OIDC plugin instance", made);

    const running = child;
    let stopped: Promise<void> | undefined;
    return {
      host: HOST,
      port,
      baseUrl,
      adminUrl: `http://${STOCK_ADMIN.username}:${encodeURIComponent(adminPassword)}@${HOST}:${port}/api`,
      adminPassword,
      issuer,
      discoveryUrl: `${issuer}/.well-known/openid-configuration`,
      tokenUrl: `${issuer}/token`,
      jwksUrl: `${issuer}/jwks`,
      introspectionUrl: `${issuer}/introspect`,
      scopes: ["openid", ...GLEWLWYD_TEST_SCOPES],
      dir,
      admin,
      stop() {
        stopped ??= (async () => {
          await terminate(running, STOP_WITHIN_MS);
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  } catch (err) {
    if (child !== undefined) await terminate(child, STOP_WITHIN_MS);
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

// No `use_secure_connection` line at all: Glewlwyd demands certificates for any, even `=false`.
function configText(port: number, database: string, log: string): string {
  return [
    `port=${port}`,
    `bind_address="${HOST}"`,
    `external_url="http://${HOST}:${port}"`,
    'api_prefix="api"',
    'login_url="login.html"',
    'log_mode="file"',
    'log_level="INFO"',
    `log_file="${log}"`,
    "cookie_secure=0",
    "session_expiration=3600",
    'session_key="GLEWLWYD2_SESSION_ID"',
    'admin_session_authentication="cookie,api_key"',
    'profile_session_authentication="cookie"',
    "login_api_enabled=true",
    'admin_scope="g_admin"',
    'profile_scope="g_profile"',
    `user_module_path="${GLEWLWYD_MODULES}/user"`,
    `client_module_path="${GLEWLWYD_MODULES}/client"`,
    `user_auth_scheme_module_path="${GLEWLWYD_MODULES}/scheme"`,
    `plugin_module_path="${GLEWLWYD_MODULES}/plugin"`,
    'hash_algorithm="SHA512"',
    `database = { type = "sqlite3"; path = "${database}"; };`,
    "",
  ].join("\n");
}

async function logIn(api: string, username: string, password: string): Promise<string | undefined> {
  const response = await fetch(`${api}/auth/`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ username, password }),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  await response.arrayBuffer();
  if (response.status !== 200) return undefined;
  const cookie = response.headers.get("set-cookie");
  return cookie === null ? undefined : cookie.split(";")[0];
}

async function call(
  api: string,
  auth: { cookie?: string; key?: string },
  method: string,
  path: string,
  body?: unknown,
): Promise<GlewlwydReply> {
  const headers: Record<string, string> = {};
  if (auth.cookie !== undefined) headers["cookie"] = auth.cookie;
  if (auth.key !== undefined) headers["authorization"] = `token ${auth.key}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${api}${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  const text = await response.text();
  let parsed: unknown = text === "" ? undefined : text;
  try {
    if (text !== "") parsed = JSON.parse(text);
  } catch {
    // not JSON: kept as text
  }
  return { status: response.status, body: parsed };
}

async function findOnPath(name: string, also: readonly string[]): Promise<string> {
  const dirs = [...(process.env["PATH"] ?? "").split(delimiter), ...also].filter((d) => d !== "");
  for (const dir of dirs) {
    const candidate = join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this directory
    }
  }
  throw new GlewlwydNotFoundError(name);
}
