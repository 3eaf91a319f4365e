// The bus authority: the operator and account keys that make NATS's decentralized authentication
// work. The server trusts the operator; the operator signs the mesh's account; the account signs
// each user's JWT. So adding a node or a module needs a new user JWT only, never a server restart,
// and only public keys ever travel to the controller.
import {
  Algorithms,
  encodeAccount,
  encodeOperator,
  encodeUser,
  fmtCreds,
  type Account,
  type User,
} from "@nats-io/jwt";
import { createAccount, createOperator, fromPublic, fromSeed, type KeyPair } from "@nats-io/nkeys";
import { newUserKeyPair, signingKey } from "./signing-keys.ts";

/** The seeds an authority is rebuilt from; keep them secret (mode 0600), as the controller's own keys. */
export interface AuthoritySeeds {
  readonly operator: string;
  readonly account: string;
  readonly system: string;
}

/** Subjects a user may, and may not, use in one direction. */
export interface SubjectRules {
  /** Allowed subjects (wildcards welcome). Empty means nothing is allowed, not everything. */
  readonly allow: readonly string[];
  readonly deny?: readonly string[];
}

/** What one user may publish and subscribe to, enforced by the NATS server itself. */
export interface BusPermissions {
  readonly pub: SubjectRules;
  readonly sub: SubjectRules;
  /**
   * Whether the user may answer requests (publish to the reply subject it was given), as a service
   * does, within `RESPONSE_WINDOW_MS` of each. Not for a user that may publish everywhere anyway:
   * the server notes the reply subject of every message such a user receives (a JetStream message
   * has one too), and scans those notes on each message once they pass a few thousand, so a
   * connection that reads a large bucket pays for it quadratically.
   */
  readonly allowResponses?: boolean;
}

/**
 * How long a user with `allowResponses` may take to answer a request (2 min): longer than the
 * controller waits for a relayed tool (110 s). The server forgets each reply subject after it, so
 * what it keeps for a long-lived connection stays bounded.
 */
export const RESPONSE_WINDOW_MS = 120_000;

/** What a user JWT is issued for. */
export interface UserRequest {
  /** Who the user is, for people reading the server's logs (a node or module name). */
  readonly name: string;
  /** The user's nkey public key (`U…`); its seed stays where it was made. */
  readonly publicKey: string;
  readonly permissions: BusPermissions;
  /** When the JWT stops being accepted; never, when absent. */
  readonly expiresAt?: Date;
  /** What the server lets one connection of the user hold; unbounded (-1) where absent. */
  readonly limits?: UserLimits;
}

/**
 * A user's own limits, carried in its JWT (-1: no bound). nats-server 2.9 enforces `subs` (a
 * subscription past it is refused) and `payload` (a larger message is refused, and the connection
 * closed); it does not enforce `data` for a user, nor any number of connections per user.
 */
export interface UserLimits {
  readonly subs: number;
  readonly payload: number;
  readonly data: number;
}

/** A user's key pair, made where it is used: only `publicKey` travels. */
export interface UserKeys {
  readonly publicKey: string;
  readonly seed: string;
}

/** Where and how the mesh's nats-server runs; every field is optional. */
export interface ServerConfigOptions {
  /** The client port. Omit when the launcher passes it on the command line. */
  readonly port?: number;
  /** The address to listen on; 127.0.0.1 for the embedded default. */
  readonly host?: string;
  /** Where JetStream keeps its files. Omit when the launcher passes it on the command line. */
  readonly storeDir?: string;
  readonly serverName?: string;
  /**
   * Keep account JWTs in this directory with nats-server's `full` resolver (deletes refused), so an
   * account update pushed at run time (a revocation) is stored, shared with the cluster's other
   * servers, and still known after a restart. Without it the config preloads the JWTs in a memory
   * resolver, which forgets pushed updates when the server restarts.
   */
  readonly resolverDir?: string;
  /** Join a cluster: its name, where this server listens for routes, and the others' route URLs. */
  readonly cluster?: ClusterOptions;
  /** TLS for clients (and, in `cluster`, for routes), with certificates signed by the mesh's CA. */
  readonly tls?: TlsFiles;
}

/** The cluster block of one server's configuration. */
export interface ClusterOptions {
  /** The cluster's name, the same on every server. */
  readonly name: string;
  /** The address the route listener binds. */
  readonly host: string;
  readonly port: number;
  /** The other servers' route URLs (`nats-route://host:port`). */
  readonly routes: readonly string[];
}

/** A server's certificate and key, and the CA that signed every server's certificate. */
export interface TlsFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly caFile: string;
}

/** A public key that is not a NATS user key was given where one is needed. */
export class InvalidUserKeyError extends Error {
  override name = "InvalidUserKeyError";
  constructor(
    readonly publicKey: string,
    options?: { cause?: unknown },
  ) {
    super(
      `${JSON.stringify(publicKey.slice(0, 60))} is not a NATS user public key (it starts with U and is 56 ` +
        `characters): make the key pair with newUserKeys() and send its publicKey`,
      options,
    );
  }
}

/** A permission names something that is not a NATS subject, so it would not mean what it says. */
export class InvalidPermissionError extends Error {
  override name = "InvalidPermissionError";
  constructor(
    readonly subject: string,
    readonly user: string,
  ) {
    super(
      `permission ${JSON.stringify(subject)} for ${user} is not a NATS subject: tokens separated by ".", ` +
        `none empty, no spaces, ">" only last`,
    );
  }
}

/** Seeds that do not rebuild an authority (wrong kind of key, or damaged). */
export class InvalidAuthoritySeedsError extends Error {
  override name = "InvalidAuthoritySeedsError";
  constructor(
    readonly which: keyof AuthoritySeeds,
    options?: { cause?: unknown },
  ) {
    super(
      `the bus authority's ${which} seed is not a valid ${which === "operator" ? "operator" : "account"} ` +
        `seed: restore the authority file from a backup, or create a new authority and issue every ` +
        `credential again`,
      options,
    );
  }
}

/** A server option that cannot be written into a nats-server config as given. */
export class InvalidServerOptionError extends Error {
  override name = "InvalidServerOptionError";
  constructor(
    readonly option: string,
    readonly value: string,
  ) {
    super(
      `${option} ${JSON.stringify(value)} cannot be written into the nats-server config: ` +
        `choose one without quotes, backslashes or control characters (a port is -1 to 65535)`,
    );
  }
}

// An account JWT's limits default to zero (nothing allowed), so every one is set: -1 is unlimited.
const UNLIMITED_ACCOUNT: Account["limits"] = {
  subs: -1,
  data: -1,
  payload: -1,
  imports: -1,
  exports: -1,
  wildcards: true,
  conn: -1,
  leaf: -1,
  mem_storage: -1,
  disk_storage: -1,
  streams: -1,
  consumer: -1,
  max_ack_pending: -1,
  mem_max_stream_bytes: -1,
  disk_max_stream_bytes: -1,
  max_bytes_required: false,
};

const MESH_ACCOUNT = "MESH";
const SYSTEM_ACCOUNT = "SYS";
const OPERATOR = "mesh";

/**
 * The operator and the mesh's account: it writes the nats-server configuration that trusts them
 * and issues user JWTs signed by the account. Made by `createAuthority` or `loadAuthority`.
 */
export class BusAuthority {
  readonly #operator: KeyPair;
  readonly #account: KeyPair;
  readonly #system: KeyPair;
  #accountJwt: string;
  #revocations: Record<string, number>;
  /** The operator's JWT, which the server trusts. */
  readonly operatorJwt: string;
  /** The system account's JWT, which the server needs for its own traffic. */
  readonly systemJwt: string;

  /** @internal use createAuthority or loadAuthority. */
  constructor(
    keys: { operator: KeyPair; account: KeyPair; system: KeyPair },
    jwts: { operator: string; account: string; system: string },
    revocations: Readonly<Record<string, number>>,
  ) {
    this.#operator = signingKey(keys.operator);
    this.#account = signingKey(keys.account);
    this.#system = signingKey(keys.system);
    this.operatorJwt = jwts.operator;
    this.#accountJwt = jwts.account;
    this.systemJwt = jwts.system;
    this.#revocations = { ...revocations };
  }

  /** The mesh's account JWT (JetStream on, no limits, the revocations so far). */
  get accountJwt(): string {
    return this.#accountJwt;
  }

  /** Revoked user keys and the time (Unix seconds) before which their JWTs are refused. Keep them with the seeds. */
  get revocations(): Readonly<Record<string, number>> {
    return { ...this.#revocations };
  }

  /**
   * Revokes every JWT issued to `publicKey` up to now, in a new account JWT. It takes effect on a
   * running server when that JWT reaches it: `pushAccountClaims` (no restart, no reload), or the new
   * `serverConfig()` and a reload. Connections using those JWTs are then closed and refused. Keep
   * `revocations` with the seeds, so a restarted server's config refuses them too. A credential
   * that replaces a revoked one needs a new key pair.
   * @throws InvalidUserKeyError when the key is not a user key.
   */
  async revokeUser(publicKey: string): Promise<void> {
    assertUserKey(publicKey);
    this.#revocations[publicKey] = Math.floor(Date.now() / 1000);
    this.#accountJwt = await encodeMeshAccount(this.#account, this.#operator, this.#revocations);
  }

  /**
   * Takes in revocations made elsewhere (by another controller, kept on the bus): each key keeps
   * the later of its two times, and the account JWT is made again when anything changed.
   * @returns whether anything changed.
   */
  async adoptRevocations(revocations: Readonly<Record<string, number>>): Promise<boolean> {
    let changed = false;
    for (const [key, at] of Object.entries(revocations)) {
      if (typeof at !== "number" || !Number.isSafeInteger(at)) continue;
      assertUserKey(key);
      if ((this.#revocations[key] ?? -1) < at) {
        this.#revocations[key] = at;
        changed = true;
      }
    }
    if (changed) this.#accountJwt = await encodeMeshAccount(this.#account, this.#operator, this.#revocations);
    return changed;
  }

  /** The mesh account's public key (`A…`): every user issued here belongs to it. */
  get accountPublicKey(): string {
    return this.#account.getPublicKey();
  }

  /** The system account's public key (`A…`). */
  get systemPublicKey(): string {
    return this.#system.getPublicKey();
  }

  /** The operator's public key (`O…`). */
  get operatorPublicKey(): string {
    return this.#operator.getPublicKey();
  }

  /** The seeds to keep (secret) so a restarted controller issues credentials the server still trusts. */
  exportSeeds(): AuthoritySeeds {
    const text = (kp: KeyPair): string => new TextDecoder().decode(kp.getSeed());
    return { operator: text(this.#operator), account: text(this.#account), system: text(this.#system) };
  }

  /**
   * The nats-server configuration: the operator, the system account, and the account JWTs
   * preloaded (in a memory resolver, or with `resolverDir` in a `full` one), with JetStream on; a
   * cluster block and TLS when asked. It never contains an `authorization` block: combined with
   * `accounts`, nats-server 2.9 lets some clients in without credentials.
   * @throws InvalidServerOptionError for a value that cannot be written into the config safely.
   */
  serverConfig(options: ServerConfigOptions = {}): string {
    const lines = [
      "# Written by Mesh. Decentralized JWT authentication: the server trusts the operator below,",
      "# and every client needs a user JWT signed by a preloaded account. No `authorization` block.",
    ];
    if (options.serverName !== undefined)
      lines.push(`server_name: ${quote(options.serverName, "serverName")}`);
    if (options.host !== undefined) lines.push(`host: ${quote(options.host, "host")}`);
    if (options.port !== undefined) lines.push(`port: ${checkPort(options.port)}`);
    lines.push(`operator: ${this.operatorJwt}`, `system_account: ${this.systemPublicKey}`);
    if (options.resolverDir !== undefined) {
      // The preload seeds an empty directory; a stored JWT newer than it (revocations pushed since)
      // wins, since the resolver keeps whichever was issued last.
      lines.push(
        "resolver: {",
        "  type: full",
        `  dir: ${quote(options.resolverDir, "resolverDir")}`,
        "  allow_delete: false",
        // How often each server compares its JWTs with a peer's: a server that was down while a
        // revocation was pushed learns it within this of its restart (nats-server's default, 2 min,
        // let it accept a revoked key for minutes).
        '  interval: "2s"',
        "}",
      );
    } else {
      lines.push("resolver: MEMORY");
    }
    // With the full resolver the mesh account's JWT is not preloaded: a preload is taken in over
    // the newer JWT the directory kept, and a restarted server would forget the revocations. It is
    // seeded into the directory instead (see `accountJwtFiles`).
    const preload =
      options.resolverDir !== undefined
        ? [`  ${this.systemPublicKey}: ${this.systemJwt}`]
        : [`  ${this.accountPublicKey}: ${this.accountJwt}`, `  ${this.systemPublicKey}: ${this.systemJwt}`];
    lines.push(
      "resolver_preload: {",
      ...preload,
      "}",
      options.storeDir !== undefined
        ? `jetstream { store_dir: ${quote(options.storeDir, "storeDir")} }`
        : "jetstream: enabled",
    );
    const tls = options.tls;
    const tlsBlock = (indent: string): string[] =>
      tls === undefined
        ? []
        : [
            `${indent}tls {`,
            `${indent}  cert_file: ${quote(tls.certFile, "tls.certFile")}`,
            `${indent}  key_file: ${quote(tls.keyFile, "tls.keyFile")}`,
            `${indent}  ca_file: ${quote(tls.caFile, "tls.caFile")}`,
            // Routes authenticate each other by certificate: only a server the mesh's CA signed joins.
            ...(indent === "" ? [] : [`${indent}  verify: true`]),
            `${indent}  timeout: 5`,
            `${indent}}`,
          ];
    lines.push(...tlsBlock(""));
    const cluster = options.cluster;
    if (cluster !== undefined) {
      lines.push(
        // A peer cut off without closing its sockets is given up after two missed pings 2 s apart,
        // as the mesh's clients do: its route is closed during the partition and made afresh once
        // the network is back, instead of lingering half-open (nats-server's default ping, 2 min,
        // left a stale route until its write deadline closed it, a second disruption of JetStream
        // seconds after the partition had healed).
        'ping_interval: "2s"',
        "ping_max: 2",
        "cluster {",
        `  name: ${quote(cluster.name, "cluster.name")}`,
        `  host: ${quote(cluster.host, "cluster.host")}`,
        `  port: ${checkPort(cluster.port)}`,
        "  routes: [",
        ...cluster.routes.map((route) => `    ${quote(route, "cluster.routes")}`),
        "  ]",
        ...tlsBlock("  "),
        "}",
      );
    }
    lines.push("");
    return lines.join("\n");
  }

  /**
   * The files a `full` resolver's directory starts with (name → JWT): the mesh account's JWT, with
   * the revocations so far. Write each only where none is yet: the server keeps the newest it saw.
   */
  accountJwtFiles(): Record<string, string> {
    return { [`${this.accountPublicKey}.jwt`]: this.accountJwt };
  }

  /**
   * A user JWT signed by the mesh's account, carrying exactly `request.permissions`.
   * @throws InvalidUserKeyError when the public key is not a user key; InvalidPermissionError for a
   * permission that is not a subject.
   */
  async issueUser(request: UserRequest): Promise<string> {
    return encodeMeshUser(request, this.#account);
  }

  /**
   * A user JWT of the system account (signed by the system account's key), for the one connection
   * that talks to the server itself, such as `pushAccountClaims` (give it
   * `accountUpdaterPermissions`). A system user sees none of the mesh account's subjects, and the
   * mesh account's users see none of its own.
   * @throws InvalidUserKeyError when the public key is not a user key; InvalidPermissionError for a
   * permission that is not a subject.
   */
  async issueSystemUser(request: UserRequest): Promise<string> {
    return encodeMeshUser(request, this.#system);
  }
}

/** A user JWT carrying exactly `request.permissions`, signed by `account` (the mesh's or the system's). */
async function encodeMeshUser(request: UserRequest, account: KeyPair): Promise<string> {
  assertUserKey(request.publicKey);
  const { pub, sub, allowResponses } = request.permissions;
  const user: Partial<User> = {
    pub: rules(pub, request.name),
    sub: rules(sub, request.name),
    // A user's own limits default to zero too.
    subs: request.limits?.subs ?? -1,
    data: request.limits?.data ?? -1,
    payload: request.limits?.payload ?? -1,
  };
  // The server reads the window in nanoseconds; 0 would keep every reply subject for good.
  if (allowResponses === true) user.resp = { max: 1, ttl: RESPONSE_WINDOW_MS * 1_000_000 };
  const opts = request.expiresAt !== undefined ? { exp: Math.floor(request.expiresAt.getTime() / 1000) } : {};
  return encodeUser(request.name, request.publicKey, account, user, {
    algorithm: Algorithms.v2,
    ...opts,
  });
}

/** Creates a new operator, mesh account and system account, each with a fresh key pair. */
export async function createAuthority(): Promise<BusAuthority> {
  return build({ operator: createOperator(), account: createAccount(), system: createAccount() });
}

/**
 * Rebuilds the authority from its seeds (see `BusAuthority.exportSeeds`) and the revocations made
 * so far (see `BusAuthority.revocations`), so a revoked credential stays revoked.
 * @throws InvalidAuthoritySeedsError when a seed is damaged or of the wrong kind.
 */
export async function loadAuthority(
  seeds: AuthoritySeeds,
  revocations: Readonly<Record<string, number>> = {},
): Promise<BusAuthority> {
  const load = (which: keyof AuthoritySeeds, prefix: string): KeyPair => {
    let kp: KeyPair;
    try {
      kp = fromSeed(new TextEncoder().encode(seeds[which]));
    } catch (err) {
      throw new InvalidAuthoritySeedsError(which, { cause: err });
    }
    if (!kp.getPublicKey().startsWith(prefix)) throw new InvalidAuthoritySeedsError(which);
    return kp;
  };
  return build(
    { operator: load("operator", "O"), account: load("account", "A"), system: load("system", "A") },
    revocations,
  );
}

async function build(
  given: { operator: KeyPair; account: KeyPair; system: KeyPair },
  revocations: Readonly<Record<string, number>> = {},
): Promise<BusAuthority> {
  const keys = {
    operator: signingKey(given.operator),
    account: signingKey(given.account),
    system: signingKey(given.system),
  };
  const operator = await encodeOperator(
    OPERATOR,
    keys.operator,
    { system_account: keys.system.getPublicKey() },
    { algorithm: Algorithms.v2 },
  );
  const account = await encodeMeshAccount(keys.account, keys.operator, revocations);
  const system = await encodeAccount(
    SYSTEM_ACCOUNT,
    keys.system,
    { limits: { ...UNLIMITED_ACCOUNT, mem_storage: 0, disk_storage: 0, streams: 0, consumer: 0 } },
    { algorithm: Algorithms.v2, signer: keys.operator },
  );
  return new BusAuthority(keys, { operator, account, system }, revocations);
}

function encodeMeshAccount(
  account: KeyPair,
  operator: KeyPair,
  revocations: Readonly<Record<string, number>>,
): Promise<string> {
  const claims: Partial<Account> = { limits: UNLIMITED_ACCOUNT };
  if (Object.keys(revocations).length > 0) claims.revocations = { ...revocations };
  return encodeAccount(MESH_ACCOUNT, account, claims, { algorithm: Algorithms.v2, signer: operator });
}

/** A new user key pair. Make it where it is used and send only `publicKey` to the controller. */
export function newUserKeys(): UserKeys {
  return newUserKeyPair();
}

/**
 * The creds file contents (JWT and seed) a connection authenticates with; pass them straight to
 * `connectBus`. They hold the seed: write them only to a 0600 file.
 * @throws InvalidUserKeyError when `seed` is not a user seed.
 */
export function credsFor(jwt: string, seed: string): Uint8Array {
  let kp: KeyPair;
  try {
    kp = fromSeed(new TextEncoder().encode(seed));
  } catch (err) {
    throw new InvalidUserKeyError("(a seed)", { cause: err });
  }
  // The seed decoded (its checksum holds): its prefix says whose it is, with no key derived from it.
  if (!seed.startsWith("SU")) throw new InvalidUserKeyError(kp.getPublicKey());
  return fmtCreds(jwt, kp);
}

function assertUserKey(publicKey: string): void {
  try {
    fromPublic(publicKey);
  } catch (err) {
    throw new InvalidUserKeyError(publicKey, { cause: err });
  }
  if (!publicKey.startsWith("U")) throw new InvalidUserKeyError(publicKey);
}

// A subject or pattern: tokens of printable non-space characters, `>` only as the last token.
const TOKEN = /^[^\s.*>]+$|^\*$/;

function rules(given: SubjectRules, user: string): { allow: string[]; deny: string[] } {
  const check = (subject: string): string => {
    const tokens = subject.split(".");
    const ok = tokens.every((t, i) => TOKEN.test(t) || (t === ">" && i === tokens.length - 1));
    if (!ok) throw new InvalidPermissionError(subject, user);
    return subject;
  };
  const allow = given.allow.map(check);
  const deny = (given.deny ?? []).map(check);
  // NATS reads an empty allow list as "everything", so nothing allowed is said as "deny everything".
  if (allow.length === 0) return { allow: [], deny: [">"] };
  return { allow, deny };
}

function quote(value: string, field: string): string {
  if (/[\u0000-\u001f"\\]/.test(value)) throw new InvalidServerOptionError(field, value);
  return `"${value}"`;
}

function checkPort(port: number): number {
  if (!Number.isInteger(port) || port < -1 || port > 65535)
    throw new InvalidServerOptionError("port", String(port));
  return port;
}
