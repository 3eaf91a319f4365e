// Who may ask the controller's HTTP server what. Every request but the page itself carries a
// credential, loopback included: anyone on the machine can reach a loopback port (a module's own
// user among them), so the address proves nothing.
//
// - The operator token (`Authorization: Bearer …`): the operator, for scripts; also opens /metrics.
// - A dashboard session: a cookie (HttpOnly, SameSite=Strict) and, on every request, the session's
//   CSRF token in a header. A session starts from a one-time login code that only the operator's
//   token can ask for (`mesh dashboard`), so only the operator ever holds one. The header is
//   asked of reads too: cookies do not keep to a port, and a module serving a page on another
//   port of 127.0.0.1 that the operator opens is sent the cookie, never the header.
// - The scrape token: `/metrics` alone, for a Prometheus; refused everywhere else.
//
// Codes and sessions live in this process's memory: a controller restart logs everyone out.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { BusLogger } from "@mesh/bus";
import { systemClock, type Clock } from "@mesh/sdk";
import { describePeer, RefusalLog } from "./refusal-log.ts";

/** How long a login code may wait to be used (default). */
export const LOGIN_CODE_TTL_MS = 2 * 60_000;

/** How long a session lasts without a request (default). */
export const SESSION_IDLE_MS = 12 * 3_600_000;

/** How long a session lasts at most, however busy (default). */
export const SESSION_MAX_MS = 7 * 24 * 3_600_000;

/** The header a session's requests carry its CSRF token in. */
export const CSRF_HEADER = "x-mesh-csrf";

/** Codes kept waiting at once; minting one more forgets the oldest. */
const MAX_CODES = 64;

/** Sessions kept at once; a new one ends the least recently used. */
const MAX_SESSIONS = 256;

/** The longest name a login code may carry for its session (`alice`). */
const MAX_NAME_CHARS = 64;

/** What a route asks of a request. */
export type HttpAccess =
  /** Nothing: it holds no data (the dashboard's page, the login that takes a code). */
  | "open"
  /** The operator: the operator token, or a dashboard session with its CSRF token. */
  | "operator"
  /** The operator token or the scrape token (/metrics). */
  | "metrics";

/** A dashboard session, as the routes see it (its secrets stay inside `HttpAuth`). */
export interface DashboardSession {
  /** A short id, shown in the ledger and the log (not a secret): `3f9c`. */
  readonly id: string;
  /** Who the session acts as, in the ledger: `alice (dashboard session 3f9c)`. */
  readonly who: string;
  readonly startedAt: number;
  /** When it ends unless used before (idle), never after its maximum. */
  readonly expiresAt: number;
}

/** Who is asking, once the server has checked. */
export type HttpCaller =
  | { readonly kind: "operator-token" }
  | { readonly kind: "session"; readonly session: DashboardSession }
  | { readonly kind: "scrape-token" }
  /** An open route asked without a credential. */
  | { readonly kind: "nobody" };

/** What the ledger says did an action for `caller`. */
export function whoOf(caller: HttpCaller): string {
  switch (caller.kind) {
    case "session":
      return caller.session.who;
    case "operator-token":
      return OPERATOR_TOKEN_WHO;
    default:
      return "nobody";
  }
}

/** Who a request with the operator token is, in the ledger. */
export const OPERATOR_TOKEN_WHO = "operator (HTTP API, operator token)";

/** A login code, as handed to the operator. */
export interface LoginCode {
  readonly code: string;
  readonly expiresAt: number;
}

/** A session just started from a code: its cookie's value and its CSRF token, given once. */
export interface StartedSession {
  readonly session: DashboardSession;
  readonly cookie: string;
  readonly csrf: string;
}

/** The answer of `HttpAuth.check`. */
export type AuthCheck =
  | { readonly ok: true; readonly caller: HttpCaller }
  | { readonly ok: false; readonly status: 401 | 403; readonly code: string; readonly message: string };

/** How to make an `HttpAuth`. */
export interface HttpAuthOptions {
  /** The operator token (see `loadOrCreateToken`). */
  readonly operatorToken: string;
  /** The scrape token; absent: /metrics takes the operator token alone. */
  readonly scrapeToken?: string;
  /** Where refusals are said (rate-limited, see `RefusalLog`). */
  readonly logger?: BusLogger;
  /** Its time, and the refusal log's timer (the system's by default; `FakeClock` in tests). */
  readonly clock?: Clock;
  readonly loginCodeTtlMs?: number;
  readonly sessionIdleMs?: number;
  readonly sessionMaxMs?: number;
  /** At most one refusal line per this many ms after the first (default one minute). */
  readonly refusalsEveryMs?: number;
}

/** The operator token cannot be used: it must be a real secret. */
export class WeakTokenError extends Error {
  override name = "WeakTokenError";
  constructor(what: string) {
    super(`the ${what} is empty or shorter than 16 characters: give a token made by the mesh`);
  }
}

interface Session extends DashboardSession {
  csrfDigest: Buffer;
  lastSeenAt: number;
  expiresAt: number;
}

/**
 * The credentials of one controller's HTTP server: its two tokens, the login codes waiting, and
 * the dashboard sessions, in memory.
 */
export class HttpAuth {
  /** The session cookie's name: unique to this controller process, so two meshes on one host never share it. */
  readonly cookieName: string;
  readonly #operator: Buffer;
  readonly #scrape: Buffer | undefined;
  readonly #now: () => number;
  readonly #codeTtl: number;
  readonly #idle: number;
  readonly #max: number;
  readonly #codes = new Map<string, { expiresAt: number; name: string }>();
  readonly #sessions = new Map<string, Session>();
  readonly #refusals: RefusalLog | undefined;

  /** @throws WeakTokenError for a token shorter than 16 characters. */
  constructor(options: HttpAuthOptions) {
    if (options.operatorToken.length < 16) throw new WeakTokenError("operator token");
    if (options.scrapeToken !== undefined && options.scrapeToken.length < 16)
      throw new WeakTokenError("scrape token");
    this.#operator = digest(options.operatorToken);
    this.#scrape = options.scrapeToken === undefined ? undefined : digest(options.scrapeToken);
    const clock = options.clock ?? systemClock;
    this.#now = () => clock.now();
    this.#codeTtl = options.loginCodeTtlMs ?? LOGIN_CODE_TTL_MS;
    this.#idle = options.sessionIdleMs ?? SESSION_IDLE_MS;
    this.#max = options.sessionMaxMs ?? SESSION_MAX_MS;
    this.#refusals =
      options.logger === undefined
        ? undefined
        : new RefusalLog({
            logger: options.logger,
            clock,
            ...(options.refusalsEveryMs !== undefined ? { everyMs: options.refusalsEveryMs } : {}),
          });
    this.cookieName = `mesh-session-${randomBytes(4).toString("hex")}`;
  }

  /**
   * A new one-time login code, good for `loginCodeTtlMs`. `name` (default "operator") is who the
   * session it starts acts as: `alice` gives `alice (dashboard session 3f9c)` in the ledger.
   */
  mintLoginCode(name?: string): LoginCode {
    this.#prune();
    while (this.#codes.size >= MAX_CODES) this.#codes.delete(this.#codes.keys().next().value ?? "");
    const code = randomBytes(18).toString("base64url");
    const expiresAt = this.#now() + this.#codeTtl;
    this.#codes.set(key(code), { expiresAt, name: cleanName(name) });
    return { code, expiresAt };
  }

  /**
   * Starts a session from `code`, which is used up (a second use, or one after it expired, gives
   * undefined).
   */
  startSession(code: string): StartedSession | undefined {
    this.#prune();
    const k = key(code);
    const waiting = this.#codes.get(k);
    this.#codes.delete(k);
    if (waiting === undefined || waiting.expiresAt <= this.#now()) return undefined;
    while (this.#sessions.size >= MAX_SESSIONS) {
      const oldest = [...this.#sessions.entries()].sort((a, b) => a[1].lastSeenAt - b[1].lastSeenAt)[0];
      if (oldest === undefined) break;
      this.#sessions.delete(oldest[0]);
    }
    const cookie = randomBytes(32).toString("base64url");
    const csrf = randomBytes(32).toString("base64url");
    const id = randomBytes(2).toString("hex");
    const now = this.#now();
    const session: Session = {
      id,
      who: `${waiting.name} (dashboard session ${id})`,
      startedAt: now,
      lastSeenAt: now,
      expiresAt: Math.min(now + this.#idle, now + this.#max),
      csrfDigest: digest(csrf),
    };
    this.#sessions.set(key(cookie), session);
    return { session: view(session), cookie, csrf };
  }

  /** Ends the session whose cookie `req` carries, if any. */
  endSession(req: IncomingMessage): void {
    const cookie = cookieValue(req, this.cookieName);
    if (cookie !== undefined) this.#sessions.delete(key(cookie));
  }

  /** How many sessions are alive now. */
  sessions(): number {
    this.#prune();
    return this.#sessions.size;
  }

  /** The `Set-Cookie` value that gives the browser `started`'s session. */
  sessionCookie(started: StartedSession): string {
    return `${this.cookieName}=${started.cookie}; HttpOnly; SameSite=Strict; Path=/`;
  }

  /** The `Set-Cookie` value that removes the session cookie. */
  clearedCookie(): string {
    return `${this.cookieName}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0`;
  }

  /**
   * Whether `req` may be answered by a route that asks `access`, and who asks. A session is used
   * (its idle time starts again) only when its CSRF token came with it.
   */
  check(req: IncomingMessage, access: HttpAccess): AuthCheck {
    const bearer = bearerOf(req);
    if (bearer !== undefined) {
      const d = digest(bearer);
      if (timingSafeEqual(d, this.#operator)) return { ok: true, caller: { kind: "operator-token" } };
      if (this.#scrape !== undefined && timingSafeEqual(d, this.#scrape)) {
        if (access !== "operator") return { ok: true, caller: { kind: "scrape-token" } };
        return refuse(403, "scrape-token", "the scrape token opens /metrics alone");
      }
      if (access === "open") return { ok: true, caller: { kind: "nobody" } };
      return refuse(401, "bad-token", "the bearer token is neither the operator's nor the scrape token");
    }
    const session = access === "metrics" ? undefined : this.#sessionOf(req);
    if (session !== undefined) {
      const csrf = req.headers[CSRF_HEADER];
      if (typeof csrf === "string" && timingSafeEqual(digest(csrf), session.csrfDigest)) {
        const now = this.#now();
        session.lastSeenAt = now;
        session.expiresAt = Math.min(now + this.#idle, session.startedAt + this.#max);
        return { ok: true, caller: { kind: "session", session: view(session) } };
      }
      if (access === "open") return { ok: true, caller: { kind: "nobody" } };
      return refuse(
        403,
        "csrf",
        `a dashboard session's request carries its CSRF token in the ${CSRF_HEADER} header; this one did not`,
      );
    }
    if (access === "open") return { ok: true, caller: { kind: "nobody" } };
    return refuse(
      401,
      "unauthorized",
      access === "metrics"
        ? "no credential: send Authorization: Bearer <scrape token or operator token>"
        : "no credential: log in with the link `mesh dashboard` prints, or send Authorization: Bearer <operator token>",
    );
  }

  /**
   * Says a refusal of `req` on the log (rate-limited), with the path only (a query may hold a code).
   * Awaited before the refusal is answered: who sent it is read while the connection is open.
   */
  async refused(req: IncomingMessage, why: string): Promise<void> {
    const refusals = this.#refusals;
    if (refusals === undefined) return;
    const method = req.method ?? "?";
    const path = new URL(req.url ?? "/", "http://controller").pathname;
    // Only a line said now names the Unix user: a flood of refusals never reads /proc for each.
    const from = refusals.saysNext()
      ? await describePeer(req)
      : (req.socket.remoteAddress ?? "an unknown address");
    refusals.refused({ method, path, why, from });
  }

  /** Says the refusals still counted; the log is kept, so it may be used again. */
  flush(): void {
    this.#refusals?.flush();
  }

  #sessionOf(req: IncomingMessage): Session | undefined {
    const cookie = cookieValue(req, this.cookieName);
    if (cookie === undefined) return undefined;
    const k = key(cookie);
    const session = this.#sessions.get(k);
    if (session === undefined) return undefined;
    if (session.expiresAt <= this.#now()) {
      this.#sessions.delete(k);
      return undefined;
    }
    return session;
  }

  #prune(): void {
    const now = this.#now();
    for (const [k, c] of this.#codes) if (c.expiresAt <= now) this.#codes.delete(k);
    for (const [k, s] of this.#sessions) if (s.expiresAt <= now) this.#sessions.delete(k);
  }
}

function refuse(status: 401 | 403, code: string, message: string): AuthCheck {
  return { ok: false, status, code, message };
}

function view(s: Session): DashboardSession {
  return { id: s.id, who: s.who, startedAt: s.startedAt, expiresAt: s.expiresAt };
}

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

// Maps are keyed by a digest: a lookup never compares the secret itself.
function key(secret: string): string {
  return digest(secret).toString("hex");
}

function bearerOf(req: IncomingMessage): string | undefined {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return m?.[1];
}

function cookieValue(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      const value = part.slice(eq + 1).trim();
      return value === "" ? undefined : value;
    }
  }
  return undefined;
}

// A name for the ledger: printable, short, and never taken for more than a name.
function cleanName(name: string | undefined): string {
  const cleaned = (name ?? "")
    .replace(/[^\p{L}\p{N}._@ -]/gu, "")
    .trim()
    .slice(0, MAX_NAME_CHARS);
  return cleaned === "" ? "operator" : cleaned;
}
