// The oidc-client adapter: one confidential Glewlwyd client per consumer, whose client_id is the
// login the mesh derived and whose secret is the password it minted, with the grant types, scopes
// and redirect URIs the consumer asked for.
//
// Where the mark lives: in the client's `description`, `mesh:<instance> {json}`. Only a Glewlwyd
// administrator can write it: a client authenticates to the OIDC plugin's endpoints, none of which
// changes a client's record (dynamic client registration manages only clients it registered). No
// secret ever goes into it.
//
// How the secret is checked: Glewlwyd keeps only a PBKDF2 hash and never shows it, so the admin API
// cannot compare. The OIDC plugin's token introspection endpoint authenticates the client with HTTP
// Basic before it looks at the token: a made-up token answered 200 means the secret is right, 401
// means it is not (or the client is disabled or gone). It mints nothing: a token request per client
// per minute would fill the server's token table.
//
// The admin session: the admin's password makes one API key (`POST /api/key`) at first start, kept
// 0600 in the key file; every admin call uses the key, and the password is used again only when the
// key stops working.

import { readFile } from "node:fs/promises";
import { writeFileAtomic } from "@mesh/bus/files";
import { AdminLoginRefusedError, BackendUnreachableError, classifyBackendFailure } from "@mesh/sdk";
import { consoleLogger, findInChain, forEachLimited, isValidLogin, type Logger } from "@mesh/sdk";
import { NotMadeHereError, NotRetiredError, refuseUnlisted, ValueRefusedError } from "@mesh/sdk";
import { markEntry, parseJsonOrUndefined, readMark, retiredMark, type ConsumerMark } from "@mesh/sdk";
import type { Adapter, Deleted, FailureClass, InventoryEntry, Provision, Retired } from "@mesh/sdk";
import {
  ALLOWED_SCOPES,
  DEFAULT_VALUES,
  GRANT_TYPES,
  REDIRECT_URI_MAX_LENGTH,
  REDIRECT_URIS_MAX,
  resolveOidcConfig,
  type OidcAdapterConfig,
  type ResolvedOidcConfig,
} from "./config.ts";

/** One HTTP request, as the adapter makes it. */
export interface HttpRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: string | undefined;
  readonly signal?: AbortSignal | undefined;
}

/** What an HTTP request answered. */
export interface HttpReply {
  readonly status: number;
  readonly text: string;
  /** The `Set-Cookie` header, for the one login that makes the API key. */
  readonly setCookie: string | null;
}

/** The slice of an HTTP client the adapter uses; a counting wrapper or a fake can stand in. */
export type HttpClient = (request: HttpRequest) => Promise<HttpReply>;

/** An `HttpClient` over Node's `fetch`, each request bounded by `timeoutMs`. */
export function fetchHttpClient(timeoutMs: number): HttpClient {
  return async (request) => {
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = request.signal === undefined ? timeout : AbortSignal.any([timeout, request.signal]);
    const response = await fetch(request.url, {
      method: request.method,
      headers: request.headers,
      ...(request.body === undefined ? {} : { body: request.body }),
      signal,
    });
    return {
      status: response.status,
      text: await response.text(),
      setCookie: response.headers.get("set-cookie"),
    };
  };
}

/** Glewlwyd refused the admin's user and password when the provider made its API key. */
export class GlewlwydAdminLoginError extends AdminLoginRefusedError {
  override name = "GlewlwydAdminLoginError";
  constructor(
    endpoint: string,
    readonly user: string,
    why: string,
  ) {
    super(
      "Glewlwyd",
      endpoint,
      `the admin ${JSON.stringify(user)}`,
      why,
      "check the user and password in the admin URL: the user needs Glewlwyd's admin scope (g_admin), " +
        'and the server admin_session_authentication="cookie,api_key"',
    );
  }
}

/** An admin or OIDC call answered something the adapter does not expect; `status` says what. */
export class GlewlwydAnswerError extends Error {
  override name = "GlewlwydAnswerError";
  constructor(
    readonly step: string,
    readonly status: number,
    body: string,
  ) {
    super(`Glewlwyd answered ${status} to ${step}${body.trim() === "" ? "" : `: ${clip(body.trim(), 300)}`}`);
  }
}

/**
 * The OIDC plugin the provider was pointed at cannot check a client's secret: it does not exist, or
 * it does not let a client introspect with client_secret_basic.
 */
export class GlewlwydPluginError extends Error {
  override name = "GlewlwydPluginError";
  constructor(
    readonly issuer: string,
    status: number,
  ) {
    super(
      `the OIDC plugin at ${issuer} answered ${status} to a token introspection: the provider checks each ` +
        `client's secret there, so make sure the plugin exists (${PLUGIN_HINT}) and allows introspection ` +
        'by the client itself ("introspection-revocation-allowed" and ' +
        '"introspection-revocation-allow-target-client" both true)',
    );
  }
}

const PLUGIN_HINT = "its name goes in MESH_OIDC_PLUGIN";

/** A client as Glewlwyd's admin API answers it. */
type ClientRecord = Readonly<Record<string, unknown>> & { readonly client_id: string };

/** What the consumer asked for, checked, as Glewlwyd takes it. */
interface ClientSettings {
  /** Glewlwyd's `authorization_type` values, sorted. */
  readonly authorizationTypes: readonly string[];
  readonly scopes: readonly string[];
  readonly redirectUris: readonly string[];
}

const MARK_PREFIX = "mesh:";
/** How many times a write Glewlwyd answered 500 is tried in all. */
const WRITE_ATTEMPTS = 4;
/** The most clients read in all. */
const MAX_LISTED = 1_000_000;
const AUTH_METHODS = ["client_secret_basic", "client_secret_post"];
// What the admin API adds to a client it answers, which a PUT does not take back.
const ANSWER_ONLY = new Set(["source"]);

/**
 * Makes the `oidc-client` adapter for one Glewlwyd server. Nothing is asked of the server until the
 * first call.
 * @throws AdminSettingError when the admin URL, the instance or the plugin name cannot be used.
 */
export function createOidcAdapter(config: OidcAdapterConfig, http?: HttpClient): OidcClientAdapter {
  const resolved = resolveOidcConfig(config);
  const logger = config.logger ?? consoleLogger;
  if (resolved.keyFile === undefined) {
    logger.info(
      `no key file for the Glewlwyd API key: it is kept in memory only, so each start makes a new one ` +
        `(set MESH_OIDC_KEY_FILE, or run the provider under the mesh agent, to keep it)`,
    );
  }
  return new OidcClientAdapter(http ?? fetchHttpClient(resolved.requestTimeoutMs), resolved, logger);
}

/** The `oidc-client` adapter over an HTTP client the caller made. */
export class OidcClientAdapter implements Adapter {
  private key: string | undefined;
  private keying: Promise<string> | undefined;
  private readonly knownScopes = new Set<string>();
  private readonly lock = new ReadWriteLock();

  constructor(
    private readonly http: HttpClient,
    private readonly config: ResolvedOidcConfig,
    private readonly logger: Logger,
  ) {}

  /**
   * Creates or repairs the consumer's client, enabling a retired one again as it was and clearing
   * its mark; writes nothing when all is already in place (the secret included).
   * @throws ValueRefusedError for values that cannot be used or scopes the server lacks;
   *   NotMadeHereError when a client of that id exists without this instance's mark.
   */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    const login = p.as;
    const settings = settingsOf(p);
    await this.ensureScopes(login, settings.scopes, signal);
    const mark: ConsumerMark = { state: "active", derived: p.derived, minted: p.minted };
    // Glewlwyd on SQLite refuses a write now and then when writes overlap (500: "database is
    // locked"), and a refused POST may leave the client made without its properties: each attempt
    // reads the client again, so the next one repairs whatever the last one left.
    for (let attempt = 1; ; attempt++) {
      const existing = await this.readClient(login, signal);
      let reply: HttpReply;
      if (existing === undefined) {
        const body = clientBody(login, undefined, settings, this.markText(mark), p.password);
        reply = await this.admin("POST", "/client/", body, signal);
      } else {
        this.assertOurs(login, existing);
        const recorded = decodeMark(existing, this.config.instance);
        const inPlace =
          isConfigured(existing, settings) &&
          recorded?.state === "active" &&
          JSON.stringify(recorded.derived) === JSON.stringify(p.derived) &&
          recorded.minted === p.minted &&
          (await this.secretWorks(login, p.password, signal));
        if (inPlace) return;
        signal.throwIfAborted();
        const body = clientBody(login, existing, settings, this.markText(mark), p.password);
        reply = await this.admin("PUT", `/client/${encodeURIComponent(login)}`, body, signal);
      }
      if (reply.status === 200) return;
      const what = `${existing === undefined ? "making" : "updating"} client ${JSON.stringify(login)}`;
      if (reply.status < 500 || attempt >= WRITE_ATTEMPTS)
        throw new GlewlwydAnswerError(what, reply.status, reply.text);
      await pause(attempt, signal);
    }
  }

  /** Whether the client exists, is enabled and ours, matches the values, and takes the minted secret. */
  async holds(p: Provision, signal: AbortSignal): Promise<boolean> {
    const login = p.as;
    const client = await this.readClient(login, signal);
    return (await this.holdsFrom(client, p, signal)) === true;
  }

  /** `holds` for many with one paged admin read of this instance's clients, then one secret check per configured client. */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    const clients = await this.listClients(signal);
    const answers = new Map<string, boolean | Error>();
    await forEachLimited(ps, this.config.checkConcurrency, async (p) => {
      if (signal.aborted) return; // not checked: left out of the answer
      try {
        answers.set(p.as, await this.holdsFrom(clients.get(p.as), p, signal));
      } catch (err) {
        answers.set(p.as, err instanceof Error ? err : new Error(String(err)));
      }
    });
    return answers;
  }

  /**
   * Disables the client and marks it retired with when and why. Tokens it already holds stay valid
   * until they expire (access tokens are short); no new one is given.
   * @throws NotMadeHereError when the client is not this instance's.
   */
  async retire(as: string, derived: Readonly<Record<string, unknown>>, why: string, at: Date): Promise<void> {
    const login = as;
    const signal = new AbortController().signal;
    const existing = await this.readClient(login, signal);
    if (existing === undefined) return; // gone already: nothing is left to disable or mark
    this.assertOurs(login, existing);
    const recorded = decodeMark(existing, this.config.instance);
    const mark = retiredMark(derived, recorded, why, at);
    await this.put(
      login,
      { ...writable(existing), enabled: false, description: this.markText(mark) },
      "disable",
      signal,
    );
  }

  /** The clients this instance made, active and retired, read from their marks (one admin read per 200). */
  async inventory(): Promise<InventoryEntry[]> {
    const clients = await this.listClients(new AbortController().signal);
    const entries: InventoryEntry[] = [];
    for (const [login, client] of clients) {
      if (!isValidLogin(login)) continue;
      const mark = decodeMark(client, this.config.instance);
      if (mark === undefined) continue;
      entries.push(markEntry(login, mark));
    }
    return entries.sort((a, b) => a.as.localeCompare(b.as));
  }

  /**
   * Deletes a retired client. An OIDC client keeps no data of its own, so the bytes freed are 0, and
   * the log says so.
   * @throws NotRetiredError when a person enabled the client again, having deleted nothing.
   */
  async delete(r: Retired): Promise<Deleted> {
    // The guard lets only a client this instance's mark says it made and retired get here.
    const login = r.as;
    const signal = new AbortController().signal;
    const existing = await this.readClient(login, signal);
    if (existing?.["enabled"] === true) throw new NotRetiredError(login, "its client was enabled again");
    const removed = await this.admin("DELETE", `/client/${encodeURIComponent(login)}`, undefined, signal);
    if (removed.status !== 200 && removed.status !== 404) {
      throw new GlewlwydAnswerError(`deleting client ${JSON.stringify(login)}`, removed.status, removed.text);
    }
    this.logger.info(
      `deleted ${clientName(login)} from Glewlwyd at ${this.config.endpoint}: an OIDC client keeps no data of ` +
        "its own, so 0 bytes were freed",
    );
    return { freedBytes: 0 };
  }

  /** Whether a client of this id exists at all, made by anyone. */
  async exists(as: string): Promise<boolean> {
    const login = as;
    return (await this.readClient(login, new AbortController().signal)) !== undefined;
  }

  /** Classes Glewlwyd's answers and this adapter's errors. */
  classify(err: unknown): FailureClass | undefined {
    return classifyOidcError(err);
  }

  /** Nothing to release: every call is its own HTTP request. */
  async close(): Promise<void> {}

  private markText(mark: ConsumerMark): string {
    return `${MARK_PREFIX}${this.config.instance} ${JSON.stringify({ v: 1, ...mark })}`;
  }

  private assertOurs(login: string, client: ClientRecord): void {
    if (decodeMark(client, this.config.instance) !== undefined) return;
    const other = markInstance(client);
    throw new NotMadeHereError(login, this.config.instance, {
      resource: clientName(login),
      ...(other === undefined ? {} : { madeBy: `it is marked by instance ${JSON.stringify(other)}` }),
    });
  }

  private async holdsFrom(
    client: ClientRecord | undefined,
    p: Provision,
    signal: AbortSignal,
  ): Promise<boolean> {
    if (client === undefined) return false;
    const mark = decodeMark(client, this.config.instance);
    if (mark?.state !== "active") return false;
    let settings: ClientSettings;
    try {
      settings = settingsOf(p);
    } catch (err) {
      if (err instanceof ValueRefusedError) return false; // values it could never have been made with
      throw err;
    }
    if (!isConfigured(client, settings)) return false;
    return this.secretWorks(p.as, p.password, signal);
  }

  /** Whether the OIDC plugin takes `password` as the client's secret (token introspection, nothing minted). */
  private async secretWorks(login: string, password: string, signal: AbortSignal): Promise<boolean> {
    const reply = await this.send({
      method: "POST",
      url: `${this.config.issuer}/introspect`,
      headers: {
        authorization: `Basic ${Buffer.from(`${login}:${password}`, "utf8").toString("base64")}`,
        "content-type": "application/x-www-form-urlencoded",
      },
      body: "token=mesh-secret-check",
      signal,
    });
    if (reply.status === 200) return true;
    if (reply.status === 401 || reply.status === 403) return false;
    if (reply.status === 404 || reply.status === 400)
      throw new GlewlwydPluginError(this.config.issuer, reply.status);
    throw new GlewlwydAnswerError(
      `checking the secret of client ${JSON.stringify(login)}`,
      reply.status,
      reply.text,
    );
  }

  private async ensureScopes(login: string, scopes: readonly string[], signal: AbortSignal): Promise<void> {
    for (const scope of scopes) {
      if (this.knownScopes.has(scope)) continue;
      const reply = await this.admin("GET", `/scope/${encodeURIComponent(scope)}`, undefined, signal);
      if (reply.status === 200) {
        this.knownScopes.add(scope);
        continue;
      }
      if (reply.status === 404) {
        throw new ValueRefusedError(
          login,
          "scopes",
          scope,
          `is not a scope on Glewlwyd at ${this.config.endpoint}: make it there (the admin page's Scopes, ` +
            "or POST /api/scope/) or ask for another",
        );
      }
      throw new GlewlwydAnswerError(`reading scope ${JSON.stringify(scope)}`, reply.status, reply.text);
    }
  }

  private async readClient(login: string, signal: AbortSignal): Promise<ClientRecord | undefined> {
    const reply = await this.admin("GET", `/client/${encodeURIComponent(login)}`, undefined, signal);
    if (reply.status === 404) return undefined;
    if (reply.status !== 200)
      throw new GlewlwydAnswerError(`reading client ${JSON.stringify(login)}`, reply.status, reply.text);
    const client = parseJsonOrUndefined(reply.text);
    if (!isClient(client))
      throw new GlewlwydAnswerError(`reading client ${JSON.stringify(login)}`, reply.status, "not a client");
    return client;
  }

  /**
   * Every client whose id, name or description holds this instance's mark prefix (Glewlwyd's
   * `pattern`), page by page: the admin API answers at most 200 a page and ignores `limit=0`.
   */
  private async listClients(signal: AbortSignal): Promise<Map<string, ClientRecord>> {
    const pattern = encodeURIComponent(`${MARK_PREFIX}${this.config.instance} `);
    const clients = new Map<string, ClientRecord>();
    const page = this.config.listPage;
    for (let offset = 0; offset < MAX_LISTED; offset += page) {
      const reply = await this.admin(
        "GET",
        `/client/?pattern=${pattern}&offset=${offset}&limit=${page}`,
        undefined,
        signal,
      );
      if (reply.status !== 200) throw new GlewlwydAnswerError("listing clients", reply.status, reply.text);
      const list = parseJsonOrUndefined(reply.text);
      if (!Array.isArray(list)) throw new GlewlwydAnswerError("listing clients", reply.status, "not a list");
      for (const client of list) if (isClient(client)) clients.set(client.client_id, client);
      if (list.length < page) return clients;
    }
    throw new Error(
      `Glewlwyd at ${this.config.endpoint} lists more than ${MAX_LISTED} clients of instance ${this.config.instance}; not read further`,
    );
  }

  /** A PUT of the whole client, tried again (a few times) when SQLite refuses the overlapping write. */
  private async put(
    login: string,
    body: Record<string, unknown>,
    what: string,
    signal: AbortSignal,
  ): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const reply = await this.admin("PUT", `/client/${encodeURIComponent(login)}`, body, signal);
      if (reply.status === 200) return;
      if (reply.status < 500 || attempt >= WRITE_ATTEMPTS)
        throw new GlewlwydAnswerError(`${what} client ${JSON.stringify(login)}`, reply.status, reply.text);
      await pause(attempt, signal);
    }
  }

  /** One admin call with the API key; a key the server no longer takes is made again, once. */
  private async admin(method: string, path: string, body: unknown, signal: AbortSignal): Promise<HttpReply> {
    const call = (key: string): Promise<HttpReply> =>
      this.send({
        method,
        url: `${this.config.apiUrl}${path}`,
        headers: {
          authorization: `token ${key}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        signal,
      });
    const key = await this.apiKey(false);
    const reply = await call(key);
    if (reply.status !== 401) return reply;
    return call(await this.apiKey(true, key));
  }

  /**
   * The API key: in memory, else from the key file, else made from the admin's password. With
   * `renew`, a key other than `refused` is taken as already renewed by a concurrent call.
   */
  private apiKey(renew: boolean, refused?: string): Promise<string> {
    if (this.key !== undefined && (!renew || this.key !== refused)) return Promise.resolve(this.key);
    if (renew && this.key === refused) this.key = undefined;
    this.keying ??= (async () => {
      try {
        this.key = (!renew && (await this.keyFromFile())) || (await this.makeKey());
        return this.key;
      } finally {
        this.keying = undefined;
      }
    })();
    return this.keying;
  }

  private async keyFromFile(): Promise<string | undefined> {
    if (this.config.keyFile === undefined) return undefined;
    try {
      const key = (await readFile(this.config.keyFile, "utf8")).trim();
      return key === "" ? undefined : key;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }

  private async makeKey(): Promise<string> {
    const { apiUrl, adminUser, adminPassword, endpoint } = this.config;
    const login = await this.send({
      method: "POST",
      url: `${apiUrl}/auth/`,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ username: adminUser, password: adminPassword }),
    });
    if (login.status === 401 || login.status === 403)
      throw new GlewlwydAdminLoginError(endpoint, adminUser, `answered ${login.status}`);
    const cookie = login.setCookie?.split(";")[0];
    if (login.status !== 200 || cookie === undefined)
      throw new GlewlwydAnswerError("the admin login", login.status, login.text);
    const made = await this.send({ method: "POST", url: `${apiUrl}/key/`, headers: { cookie } });
    const key = (parseJsonOrUndefined(made.text) as { key?: unknown } | undefined)?.key;
    if (made.status === 401 || made.status === 403) {
      throw new GlewlwydAdminLoginError(
        endpoint,
        adminUser,
        "it may not make API keys: it lacks the admin scope",
      );
    }
    if (made.status !== 200 || typeof key !== "string" || key === "")
      throw new GlewlwydAnswerError("making an API key", made.status, "");
    if (this.config.keyFile !== undefined) {
      await writeFileAtomic(this.config.keyFile, `${key}\n`, 0o600);
      this.logger.info(
        `made a Glewlwyd API key for the admin session; kept in ${this.config.keyFile} (0600)`,
      );
    } else {
      this.logger.info("made a Glewlwyd API key for the admin session (kept in memory only)");
    }
    return key;
  }

  /**
   * One request. Writes run alone, reads together: Glewlwyd on SQLite has no busy timeout, so a
   * write that overlaps another write (or a read) fails part-way, and may answer 200 with the
   * client's properties half saved.
   */
  private async send(request: HttpRequest): Promise<HttpReply> {
    const write = request.method !== "GET" && !request.url.endsWith("/introspect");
    try {
      return await this.lock.run(write, () => this.http(request));
    } catch (err) {
      if (request.signal?.aborted === true) throw err;
      throw new BackendUnreachableError("Glewlwyd", this.config.endpoint, { cause: err });
    }
  }
}

/**
 * The failure class of an error from Glewlwyd or from this adapter: a refused admin login is
 * `credentials-rejected`, a server that cannot be reached, answer in time or answers 5xx is
 * `unreachable`, and an OIDC plugin that cannot check secrets is `refused`. The kit's refusals
 * (values, a client not ours) the harness classes itself.
 */
export function classifyOidcError(err: unknown): FailureClass | undefined {
  const kit = classifyBackendFailure(err);
  if (kit !== undefined) return kit;
  if (findInChain(err, (e) => e instanceof GlewlwydPluginError) !== undefined) return "refused";
  const answer = findInChain(err, (e): e is GlewlwydAnswerError => e instanceof GlewlwydAnswerError);
  if (answer !== undefined && answer.status >= 500) return "unreachable";
  return undefined;
}

/** Reads run together, a write runs alone; first come, first served, so neither starves. */
export class ReadWriteLock {
  private readers = 0;
  private writing = false;
  private readonly waiting: { write: boolean; go: () => void }[] = [];

  /** Runs `fn` once it may: with other readers when `write` is false, alone when it is true. */
  async run<T>(write: boolean, fn: () => Promise<T>): Promise<T> {
    if (this.waiting.length > 0 || !this.free(write)) {
      await new Promise<void>((go) => this.waiting.push({ write, go }));
    } else {
      this.take(write);
    }
    try {
      return await fn();
    } finally {
      if (write) this.writing = false;
      else this.readers--;
      this.pump();
    }
  }

  private free(write: boolean): boolean {
    return write ? !this.writing && this.readers === 0 : !this.writing;
  }

  private take(write: boolean): void {
    if (write) this.writing = true;
    else this.readers++;
  }

  private pump(): void {
    for (let next = this.waiting[0]; next !== undefined && this.free(next.write); next = this.waiting[0]) {
      this.waiting.shift();
      this.take(next.write);
      next.go();
    }
  }
}

/** Waits a little longer after each refused write, with jitter so overlapping writers spread out. */
function pause(attempt: number, signal: AbortSignal): Promise<void> {
  const ms = attempt * (25 + Math.random() * 100);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
      },
      { once: true },
    );
  });
}

function clientName(login: string): string {
  return `Glewlwyd client ${JSON.stringify(login)}`;
}

/** The consumer's values (or what the mesh derived for them), checked. */
function settingsOf(p: Provision): ClientSettings {
  const pick = (key: keyof typeof DEFAULT_VALUES): unknown =>
    Object.hasOwn(p.values, key)
      ? p.values[key]
      : Object.hasOwn(p.derived, key)
        ? p.derived[key]
        : DEFAULT_VALUES[key];
  const list = (key: keyof typeof DEFAULT_VALUES): string[] => {
    const value = pick(key);
    if (!Array.isArray(value) || !value.every((v): v is string => typeof v === "string")) {
      throw new ValueRefusedError(p.as, key, value, "must be a list of strings");
    }
    if (new Set(value).size !== value.length)
      throw new ValueRefusedError(p.as, key, value, "lists one item twice");
    return value;
  };
  const grants = list("grant_types");
  if (grants.length === 0)
    throw new ValueRefusedError(
      p.as,
      "grant_types",
      grants,
      `must name at least one of ${[...GRANT_TYPES.keys()].join(", ")}`,
    );
  refuseUnlisted(p.as, "grant_types", grants, GRANT_TYPES, (names) => {
    return `is not a grant type this provider gives: ask for ${names}`;
  });
  const scopes = list("scopes");
  refuseUnlisted(p.as, "scopes", scopes, ALLOWED_SCOPES, (names) => {
    return `is not a scope this provider allows: ask for ${names}`;
  });
  // What a grant type needs beside it: refused as the field that is empty.
  const needs = (grant: string, field: string, items: readonly string[], why: string): void => {
    if (grants.includes(grant) && items.length === 0) throw new ValueRefusedError(p.as, field, items, why);
  };
  needs(
    "client_credentials",
    "scopes",
    scopes,
    "is empty, and Glewlwyd gives no client_credentials token without a scope: ask for at least one",
  );
  const redirectUris = list("redirect_uris");
  if (redirectUris.length > REDIRECT_URIS_MAX) {
    throw new ValueRefusedError(p.as, "redirect_uris", redirectUris, `lists more than ${REDIRECT_URIS_MAX}`);
  }
  for (const uri of redirectUris) {
    const why = redirectUriProblem(uri);
    if (why !== undefined) throw new ValueRefusedError(p.as, "redirect_uris", uri, why);
  }
  needs(
    "authorization_code",
    "redirect_uris",
    redirectUris,
    "is empty, and authorization_code needs at least one redirect URI",
  );
  return {
    authorizationTypes: grants.map((g) => GRANT_TYPES.get(g) as string).sort(),
    scopes: [...scopes].sort(),
    redirectUris: [...redirectUris].sort(),
  };
}

/** Why `uri` is not an absolute http(s) redirect URI (RFC 6749 §3.1.2), or undefined when it is. */
function redirectUriProblem(uri: string): string | undefined {
  if (uri.length > REDIRECT_URI_MAX_LENGTH) return `is longer than ${REDIRECT_URI_MAX_LENGTH} characters`;
  // Control characters and spaces are refused before parsing: the URL parser would quietly drop some.
  if (/[\u0000-\u0020\u007f\\]/.test(uri)) return "holds a space, a backslash or a control character";
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return "is not an absolute URL: give one like https://app.example.net/callback";
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    return `has the scheme ${JSON.stringify(url.protocol)}: give an http or https URL`;
  if (url.hash !== "" || uri.includes("#")) return "has a fragment, which a redirect URI may not have";
  if (url.username !== "" || url.password !== "") return "holds a user or password";
  return undefined;
}

/** The whole client to write: what is there (a person's additions kept), with the mesh's own fields set. */
function clientBody(
  login: string,
  existing: ClientRecord | undefined,
  settings: ClientSettings,
  description: string,
  password: string,
): Record<string, unknown> {
  return {
    ...(existing === undefined ? {} : writable(existing)),
    client_id: login,
    // The display name is the server's people's to change; the mesh only gives a first one.
    name: typeof existing?.["name"] === "string" && existing["name"] !== "" ? existing["name"] : login,
    description,
    enabled: true,
    confidential: true,
    password,
    scope: settings.scopes,
    redirect_uri: settings.redirectUris,
    authorization_type: settings.authorizationTypes,
    token_endpoint_auth_method: AUTH_METHODS,
  };
}

/** A client as a PUT takes it: Glewlwyd's PUT replaces the whole record, so every field goes back. */
function writable(client: ClientRecord): Record<string, unknown> {
  return Object.fromEntries(Object.entries(client).filter(([key]) => !ANSWER_ONLY.has(key)));
}

function isConfigured(client: ClientRecord, settings: ClientSettings): boolean {
  return (
    client["enabled"] === true &&
    client["confidential"] === true &&
    sameSet(client["scope"], settings.scopes) &&
    sameSet(client["authorization_type"], settings.authorizationTypes) &&
    sameSet(client["redirect_uri"] ?? [], settings.redirectUris) &&
    sameSet(client["token_endpoint_auth_method"], AUTH_METHODS)
  );
}

function sameSet(value: unknown, wanted: readonly string[]): boolean {
  if (!Array.isArray(value)) return false;
  const have = value.map(String).sort();
  const want = [...wanted].sort();
  return have.length === want.length && have.every((v, i) => v === want[i]);
}

function markInstance(client: ClientRecord): string | undefined {
  const description = client["description"];
  if (typeof description !== "string" || !description.startsWith(MARK_PREFIX)) return undefined;
  const end = description.indexOf(" ");
  return end < 0 ? undefined : description.slice(MARK_PREFIX.length, end);
}

/** This instance's mark on `client`, or undefined when it carries none (or another instance's). */
function decodeMark(client: ClientRecord, instance: string): ConsumerMark | undefined {
  if (markInstance(client) !== instance) return undefined;
  const description = client["description"] as string;
  return readMark(parseJsonOrUndefined(description.slice(description.indexOf(" ") + 1)));
}

function isClient(value: unknown): value is ClientRecord {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { client_id?: unknown }).client_id === "string"
  );
}

function clip(text: string, limit: number): string {
  return text.length > limit ? `${text.slice(0, limit)}…` : text;
}
