// The rules of the controller's HTTP credentials under a fake clock: which token opens what, a login
// code used once and only in time, a session that ends when idle or old and is used only with its
// CSRF token, and refusals said at a bounded rate. Over real HTTP: http-server.test.ts and
// dashboard.test.ts.
import assert from "node:assert/strict";
import type { IncomingMessage } from "node:http";
import { describe, it } from "node:test";
import { FakeClock } from "@mesh/sdk";
import { HttpAuth, LOGIN_CODE_TTL_MS } from "@mesh/controller";
import {
  CSRF_HEADER,
  OPERATOR_TOKEN_WHO,
  SESSION_IDLE_MS,
  SESSION_MAX_MS,
  WeakTokenError,
  whoOf,
  type AuthCheck,
  type StartedSession,
} from "../src/http-auth.ts";
import { RefusalLog } from "../src/refusal-log.ts";
import { recordingLogger } from "./test-mesh.ts";

const OPERATOR = "operator-token-for-the-rules";
const SCRAPE = "scrape-token-for-the-rules";

/** The headers of a request, as the server hands them over: all HttpAuth reads. */
const request = (headers: Record<string, string> = {}): IncomingMessage =>
  ({ headers, method: "GET", url: "/api/state", socket: {} }) as unknown as IncomingMessage;

const bearer = (token: string) => request({ authorization: `Bearer ${token}` });

/** A request with `started`'s cookie and `csrf` (its own by default; null: none). */
const sessionRequest = (auth: HttpAuth, started: StartedSession, csrf: string | null = started.csrf) =>
  request({
    cookie: `other=1; ${auth.cookieName}=${started.cookie}`,
    ...(csrf === null ? {} : { [CSRF_HEADER]: csrf }),
  });

const refusedWith = (check: AuthCheck): number | undefined => (check.ok ? undefined : check.status);

describe("the controller's HTTP credentials", () => {
  const make = (clock = new FakeClock()) => ({
    clock,
    auth: new HttpAuth({ operatorToken: OPERATOR, scrapeToken: SCRAPE, clock }),
  });

  it("the operator token opens the API and /metrics; the scrape token opens /metrics alone", () => {
    const { auth } = make();
    assert.deepEqual(auth.check(bearer(OPERATOR), "operator"), {
      ok: true,
      caller: { kind: "operator-token" },
    });
    assert.deepEqual(auth.check(bearer(OPERATOR), "metrics"), {
      ok: true,
      caller: { kind: "operator-token" },
    });
    assert.deepEqual(auth.check(bearer(SCRAPE), "metrics"), { ok: true, caller: { kind: "scrape-token" } });
    const scrapeOnApi = auth.check(bearer(SCRAPE), "operator");
    assert.equal(refusedWith(scrapeOnApi), 403);
    assert.match(scrapeOnApi.ok ? "" : scrapeOnApi.message, /\/metrics alone/);
    for (const access of ["operator", "metrics"] as const) {
      assert.equal(refusedWith(auth.check(request(), access)), 401, `nothing, on ${access}`);
      assert.equal(
        refusedWith(auth.check(bearer(`${OPERATOR}x`), access)),
        401,
        `a wrong token, on ${access}`,
      );
      assert.equal(refusedWith(auth.check(bearer(OPERATOR.slice(0, -1)), access)), 401);
      assert.equal(refusedWith(auth.check(request({ authorization: OPERATOR }), access)), 401, "not Bearer");
    }
    assert.deepEqual(auth.check(request(), "open"), { ok: true, caller: { kind: "nobody" } });
    assert.equal(whoOf({ kind: "operator-token" }), OPERATOR_TOKEN_WHO);
  });

  it("refuses a token too short to be a secret", () => {
    assert.throws(() => new HttpAuth({ operatorToken: "" }), WeakTokenError);
    assert.throws(() => new HttpAuth({ operatorToken: "short" }), WeakTokenError);
    assert.throws(() => new HttpAuth({ operatorToken: OPERATOR, scrapeToken: "x" }), WeakTokenError);
  });

  it("a login code starts one session, and a second use of it starts none", () => {
    const { auth } = make();
    const { code } = auth.mintLoginCode("alice");
    const started = auth.startSession(code);
    assert.ok(started, "the first use starts a session");
    assert.equal(auth.startSession(code), undefined, "the second use starts none");
    assert.equal(auth.startSession("not-a-code-at-all"), undefined);
    assert.match(started.session.who, /^alice \(dashboard session [0-9a-f]{4}\)$/);
    assert.notEqual(started.cookie, started.csrf);
    const checked = auth.check(sessionRequest(auth, started), "operator");
    assert.ok(checked.ok && checked.caller.kind === "session");
    assert.equal(whoOf(checked.caller), started.session.who);
    assert.equal(auth.sessions(), 1);
  });

  it("a login code not used within two minutes starts no session", () => {
    const { auth, clock } = make();
    const late = auth.mintLoginCode();
    const inTime = auth.mintLoginCode();
    clock.advance(LOGIN_CODE_TTL_MS - 1);
    assert.ok(auth.startSession(inTime.code), "a moment before it expires");
    clock.advance(1);
    assert.equal(auth.startSession(late.code), undefined, "at two minutes");
  });

  it("a session's request without its CSRF token, or with another's, is refused and does not keep it alive", () => {
    const { auth, clock } = make();
    const one = auth.startSession(auth.mintLoginCode().code);
    const two = auth.startSession(auth.mintLoginCode().code);
    assert.ok(one && two);
    for (const csrf of [null, "", two.csrf, `${one.csrf}x`]) {
      const checked = auth.check(sessionRequest(auth, one, csrf), "operator");
      assert.equal(refusedWith(checked), 403, `CSRF token ${JSON.stringify(csrf)}`);
      assert.equal(checked.ok ? "" : checked.code, "csrf");
    }
    assert.equal(
      refusedWith(auth.check(sessionRequest(auth, one), "metrics")),
      401,
      "a session is not a scraper",
    );
    // Only requests with the token count as use: the one without it let the session expire.
    clock.advance(SESSION_IDLE_MS - 1_000);
    for (let i = 0; i < 5; i++) auth.check(sessionRequest(auth, one, null), "operator");
    clock.advance(1_000);
    assert.equal(refusedWith(auth.check(sessionRequest(auth, one), "operator")), 401);
  });

  it("a session ends after 12 hours without a request, and never lasts past its maximum", () => {
    const { auth, clock } = make();
    const idle = auth.startSession(auth.mintLoginCode().code);
    const busy = auth.startSession(auth.mintLoginCode().code);
    assert.ok(idle && busy);
    clock.advance(SESSION_IDLE_MS - 1);
    assert.ok(auth.check(sessionRequest(auth, busy), "operator").ok);
    clock.advance(1);
    assert.equal(refusedWith(auth.check(sessionRequest(auth, idle), "operator")), 401, "idle for 12 h");
    // Used every 11 hours, it still ends at its maximum.
    let used = 0;
    while (clock.now() + 11 * 3_600_000 < busyStart(busy) + SESSION_MAX_MS) {
      clock.advance(11 * 3_600_000);
      assert.ok(auth.check(sessionRequest(auth, busy), "operator").ok, `use ${++used}`);
    }
    clock.advance(busyStart(busy) + SESSION_MAX_MS - clock.now());
    assert.equal(refusedWith(auth.check(sessionRequest(auth, busy), "operator")), 401, "past its maximum");
    assert.ok(used >= 10);
    assert.equal(auth.sessions(), 0);
  });

  it("ends a session whose cookie asks to log out, and keeps the others", () => {
    const { auth } = make();
    const a = auth.startSession(auth.mintLoginCode().code);
    const b = auth.startSession(auth.mintLoginCode().code);
    assert.ok(a && b);
    auth.endSession(sessionRequest(auth, a));
    assert.equal(refusedWith(auth.check(sessionRequest(auth, a), "operator")), 401);
    assert.ok(auth.check(sessionRequest(auth, b), "operator").ok);
    assert.match(
      auth.sessionCookie(a),
      /^mesh-session-[0-9a-f]{8}=[^;]+; HttpOnly; SameSite=Strict; Path=\/$/,
    );
    assert.match(auth.clearedCookie(), /Max-Age=0/);
  });

  it("keeps a name for the ledger printable and short, and calls a session without one the operator's", () => {
    const { auth } = make();
    const named = (name: string | undefined) => auth.startSession(auth.mintLoginCode(name).code)?.session.who;
    assert.match(named(undefined) ?? "", /^operator \(dashboard session/);
    assert.match(named("\u0000\n\u001b\t") ?? "", /^operator \(dashboard session/);
    assert.match(
      named("\u001b[31malice") ?? "",
      /^31malice \(dashboard session/,
      "no escape reaches a terminal",
    );
    assert.match(named("bob\nforged line") ?? "", /^bobforged line \(dashboard/);
    assert.ok((named("x".repeat(500)) ?? "").length < 128);
  });
});

const busyStart = (s: StartedSession): number => s.session.startedAt;

describe("the refusal log", () => {
  const refusal = (path: string) => ({ method: "GET", path, why: "no credential", from: "127.0.0.1" });

  it("says the first refusal at once and the rest at most once a minute, counted", () => {
    const clock = new FakeClock();
    const log = recordingLogger();
    const refusals = new RefusalLog({ logger: log, clock });
    refusals.refused(refusal("/api/state"));
    assert.equal(log.lines.length, 1);
    assert.match(log.lines[0] ?? "", /^warn: .*refused GET \/api\/state from 127\.0\.0\.1: no credential/);
    for (let i = 0; i < 1_000; i++) refusals.refused(refusal(`/api/${i}`));
    assert.equal(log.lines.length, 1, "a thousand more within the minute: nothing said yet");
    clock.advance(60_000);
    assert.equal(log.lines.length, 2);
    assert.match(
      log.lines[1] ?? "",
      /refused 1000 more request\(s\) in the last 60 s \(the last: GET \/api\/999/,
    );
    clock.advance(10 * 60_000);
    assert.equal(log.lines.length, 2, "nothing refused, nothing said");
    refusals.refused(refusal("/api/ledger"));
    assert.equal(log.lines.length, 3, "a refusal after a quiet minute is said at once");
    refusals.refused(refusal("/api/approve"));
    refusals.flush();
    assert.equal(log.lines.length, 4, "flush says what is counted");
    assert.match(log.lines[3] ?? "", /refused 1 more/);
  });
});
