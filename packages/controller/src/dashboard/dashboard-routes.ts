// The operator's dashboard: a plain page (HTML, CSS and a script from this directory, no build step)
// and a small JSON API under /api/. Reads are GETs; every action is a POST with a JSON body that
// goes through the same tool relay as `mesh tool`, so it lands in the module's ledger exactly as the
// CLI's does, as asked by the session's operator. The page holds no data of its own and is served
// to anyone; the API asks for the operator's credential (see `HttpAuth`): a session begun with a
// one-time login code, or the operator token. Cross-site requests are refused besides: a POST must
// come from the page's own origin with a JSON body.
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isValidLogin } from "@mesh/sdk";
import { isModuleName, READ_ONLY_TOOL_NAMES } from "@mesh/manifest";
import { whoOf, type HttpAuth, type HttpCaller } from "../http-auth.ts";
import type { HttpRoute } from "../http-server.ts";
import { DEFAULT_LEDGER_LIMIT, MAX_LEDGER_LIMIT } from "../ledger-reader.ts";
import { RELAY_UNANSWERED_CODES, type ToolReply } from "../tool-relay.ts";
import { maskDeep } from "@mesh/sdk/provider";
import { DashboardView, type DashboardSources, type DashboardViewOptions } from "./dashboard-state.ts";

/** How to serve the dashboard. */
export interface DashboardOptions extends DashboardViewOptions {
  /** What it reads and asks: the running controller. */
  readonly sources: DashboardSources;
  /** The HTTP server's credentials: the login routes mint codes and start sessions with them. */
  readonly auth: HttpAuth;
}

/** The largest body an action takes. */
export const MAX_ACTION_BYTES = 4 * 1024;

/** The id `retire approve` takes (see `setId` in @mesh/sdk/provider). */
const SET_ID = /^[0-9a-f]{12}$/;

// The package's static/, beside src/ and dist/: the page is served as written, by the sources and
// the build. Found through the package's own exports rather than from this file, which may also
// run from the CLI's bundle (scripts/bundle.mjs), elsewhere.
const STATIC_DIR = new URL("./", import.meta.resolve("@mesh/controller/static/index.html"));

const STATIC_FILES: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/dashboard.css": { file: "dashboard.css", type: "text/css; charset=utf-8" },
  "/dashboard.js": { file: "dashboard.js", type: "text/javascript; charset=utf-8" },
};

/** The largest login body read: `{"code": "…"}` or `{"name": "…"}`. */
const MAX_LOGIN_BYTES = 1024;

// The page loads only its own files and asks only its own origin; it may not be framed.
const PAGE_HEADERS = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
} as const;

/** A request the API refuses, with the status it answers and the words it says. */
class Refusal extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The dashboard's routes, for the controller's HTTP server (`startControllerHttp`):
 * - `GET /`, `/dashboard.css`, `/dashboard.js`: the page (open: it holds no data);
 * - `POST /api/login-code` `{name?}`, with the operator token only: a one-time login code
 *   `{ok, code, expiresAt, path}` (`mesh dashboard` asks it; `path` is `/?code=…`);
 * - `POST /api/login` `{code}` (open): uses the code up, sets the session cookie and answers
 *   `{ok, who, session, csrf, expiresAt}`; every later request sends `csrf` in `x-mesh-csrf`;
 * - `GET /api/session`: who the session is and when it ends; `POST /api/logout` ends it;
 * - `GET /api/state`: nodes, modules, providers and their consumers (`DashboardState`);
 * - `GET /api/ledger?module=M&limit=N`: a module's newest ledger entries, oldest first, and
 *   `readOnlyTools`, the tools whose calls the page hides unless asked;
 * - `GET /api/fleet-history`: the fleet's kept revisions, newest first (`{ok, revision, history}`);
 * - `POST /api/approve` `{module, id}`: `retire approve <id>` on the provider;
 * - `POST /api/delete` `{module, login, typed}`: `cleanup delete <login>`, refused unless `typed`
 *   is the login itself.
 * Actions answer the relay's reply (`{ok, answer}` or `{ok: false, error, code}`), and are asked as
 * the caller (`alice (dashboard session 3f9c)`).
 */
export function dashboardRoutes(options: DashboardOptions): HttpRoute[] {
  const view = new DashboardView(options.sources, options);
  const files = new Map<string, Promise<Buffer>>();
  const auth = options.auth;
  const page = (path: string): HttpRoute => ({
    method: "GET",
    path,
    access: "open",
    async handle(req, res) {
      const { file, type } = STATIC_FILES[path] ?? { file: "index.html", type: "text/html" };
      let body = files.get(file);
      if (body === undefined) {
        body = readFile(new URL(file, STATIC_DIR));
        files.set(file, body);
        body.catch(() => files.delete(file));
      }
      res.writeHead(200, { ...PAGE_HEADERS, "content-type": type, "cache-control": "no-cache" });
      res.end(req.method === "HEAD" ? undefined : await body);
    },
  });

  const api = (
    method: "GET" | "POST",
    path: string,
    answer: (
      req: IncomingMessage,
      url: URL,
      caller: HttpCaller,
    ) => Promise<{ status: number; body: unknown; headers?: Record<string, string> }>,
    access: "operator" | "open" = "operator",
  ): HttpRoute => ({
    method,
    path,
    access,
    async handle(req, res, url, caller) {
      let status: number;
      let body: unknown;
      let headers: Record<string, string> | undefined;
      try {
        if (method === "POST") checkSameOrigin(req);
        ({ status, body, headers } = await answer(req, url, caller));
      } catch (err) {
        if (!(err instanceof Refusal)) throw err;
        status = err.status;
        body = { ok: false, code: err.code, error: err.message };
        if (status === 401) await auth.refused(req, err.message);
      }
      sendJson(res, status, body, headers);
    },
  });

  const isProvider = (module: string): boolean => view.providers().some((p) => p.module === module);
  const act = async (module: string, reply: Promise<ToolReply>) => {
    const answered = await reply;
    view.forget(module);
    return { status: replyStatus(answered), body: answered };
  };

  return [
    page("/"),
    page("/dashboard.css"),
    page("/dashboard.js"),
    api("POST", "/api/login-code", async (req, _url, caller) => {
      // Only the token mints codes: a session cannot renew itself past its end.
      if (caller.kind !== "operator-token")
        throw new Refusal(
          403,
          "token-only",
          "a login code is asked with the operator token (mesh dashboard)",
        );
      const body = await readJson(req, MAX_LOGIN_BYTES);
      const name = body["name"];
      if (name !== undefined && typeof name !== "string")
        throw new Refusal(400, "bad-request", "name is who the session acts as: a string");
      const { code, expiresAt } = auth.mintLoginCode(name);
      return {
        status: 200,
        body: { ok: true, code, expiresAt: new Date(expiresAt).toISOString(), path: `/?code=${code}` },
      };
    }),
    api(
      "POST",
      "/api/login",
      async (req) => {
        const body = await readJson(req, MAX_LOGIN_BYTES);
        const code = body["code"];
        const started = typeof code === "string" && code.length <= 64 ? auth.startSession(code) : undefined;
        if (started === undefined)
          throw new Refusal(
            401,
            "bad-code",
            "that login code is not one the controller gave, was used already, or expired: " +
              "run mesh dashboard for a new one",
          );
        return {
          status: 200,
          headers: { "set-cookie": auth.sessionCookie(started) },
          body: {
            ok: true,
            who: started.session.who,
            session: started.session.id,
            csrf: started.csrf,
            expiresAt: new Date(started.session.expiresAt).toISOString(),
          },
        };
      },
      "open",
    ),
    api("GET", "/api/session", async (_req, _url, caller) => ({
      status: 200,
      body: {
        ok: true,
        who: whoOf(caller),
        ...(caller.kind === "session"
          ? { session: caller.session.id, expiresAt: new Date(caller.session.expiresAt).toISOString() }
          : {}),
      },
    })),
    api("POST", "/api/logout", async (req) => {
      auth.endSession(req);
      return { status: 200, headers: { "set-cookie": auth.clearedCookie() }, body: { ok: true } };
    }),
    api("GET", "/api/state", async () => ({ status: 200, body: await view.state() })),
    api("GET", "/api/fleet-history", async () => {
      const history = options.sources.history;
      if (history === undefined) return { status: 200, body: { ok: true, revision: 0, history: [] } };
      try {
        const kept = await history.call(options.sources);
        return {
          status: 200,
          body: { ok: true, revision: options.sources.revision?.() ?? 0, history: [...kept].reverse() },
        };
      } catch (err) {
        return { status: 503, body: { ok: false, code: "unavailable", error: (err as Error).message } };
      }
    }),
    api("GET", "/api/ledger", async (_req, url) => {
      const module = url.searchParams.get("module") ?? "";
      if (!isModuleName(module))
        throw new Refusal(400, "bad-request", "name a module: /api/ledger?module=NAME&limit=N");
      const limitText = url.searchParams.get("limit");
      const limit = limitText === null ? DEFAULT_LEDGER_LIMIT : Number(limitText);
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LEDGER_LIMIT)
        throw new Refusal(400, "bad-request", `limit is a whole number from 1 to ${MAX_LEDGER_LIMIT}`);
      const read = await options.sources.ledger(module, limit);
      // The page hides read-only tool calls unless asked; which they are comes from the tool table.
      return { status: read.ok ? 200 : 404, body: { ...read, readOnlyTools: [...READ_ONLY_TOOL_NAMES] } };
    }),
    api("POST", "/api/approve", async (req, _url, caller) => {
      const body = await readJson(req, MAX_ACTION_BYTES);
      const module = body["module"];
      const id = body["id"];
      if (typeof module !== "string" || !isProvider(module))
        throw new Refusal(
          400,
          "bad-request",
          `${JSON.stringify(module)} is not a provider of the fleet being served`,
        );
      if (typeof id !== "string" || !SET_ID.test(id))
        throw new Refusal(400, "bad-request", "name the waiting set by its id, as the page lists it");
      return act(
        module,
        options.sources.tool({ module, tool: "retire approve", args: [id], who: whoOf(caller) }),
      );
    }),
    api("POST", "/api/delete", async (req, _url, caller) => {
      const body = await readJson(req, MAX_ACTION_BYTES);
      const { module, login, typed } = body;
      if (typeof module !== "string" || !isProvider(module))
        throw new Refusal(
          400,
          "bad-request",
          `${JSON.stringify(module)} is not a provider of the fleet being served`,
        );
      if (typeof login !== "string" || !isValidLogin(login))
        throw new Refusal(
          400,
          "bad-request",
          `${JSON.stringify(login)} is not a login the mesh could have made`,
        );
      if (typed !== login) {
        throw new Refusal(
          400,
          "login-mismatch",
          `the login typed (${JSON.stringify(typed ?? "")}) is not ${login}: nothing was deleted; ` +
            `type the login exactly to delete it`,
        );
      }
      return act(
        module,
        options.sources.tool({ module, tool: "cleanup delete", args: [login], who: whoOf(caller) }),
      );
    }),
  ];
}

// A provider's refusal is a conflict; nobody answering is a service unavailable; a bad call is a 400.
function replyStatus(reply: ToolReply): number {
  if (reply.ok) return 200;
  const code = reply.code ?? "";
  if (code === "bad-request") return 400;
  if (
    RELAY_UNANSWERED_CODES.has(code) ||
    [
      "node-not-enrolled",
      "busy",
      "module-not-here",
      "provider-not-listening",
      "provider-unreachable",
    ].includes(code)
  )
    return 503;
  return 409;
}

// A POST must come from the page itself: the browser's Origin (when it sends one) is this Host, it
// is not a cross-site request, and its body is JSON (which a form on another site cannot send).
function checkSameOrigin(req: IncomingMessage): void {
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let originHost: string | undefined;
    try {
      originHost = new URL(origin).host;
    } catch {
      originHost = undefined;
    }
    if (originHost === undefined || originHost !== req.headers.host) {
      throw new Refusal(
        403,
        "cross-site",
        `a request from ${origin} is refused: actions come from the dashboard's own page`,
      );
    }
  }
  const site = req.headers["sec-fetch-site"];
  if (site !== undefined && site !== "same-origin" && site !== "none") {
    throw new Refusal(
      403,
      "cross-site",
      `a ${String(site)} request is refused: actions come from the dashboard's own page`,
    );
  }
  const type = (req.headers["content-type"] ?? "").split(";")[0]?.trim().toLowerCase();
  if (type !== "application/json") {
    throw new Refusal(415, "bad-request", "the body is JSON (content-type: application/json)");
  }
}

async function readJson(req: IncomingMessage, max: number): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > max) throw new Refusal(413, "bad-request", `this request's body is at most ${max} bytes`);
    chunks.push(chunk);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new Refusal(400, "bad-request", "the body is a JSON object");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new Refusal(400, "bad-request", "the body is a JSON object");
  return body as Record<string, unknown>;
}

function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    ...PAGE_HEADERS,
    ...headers,
    "content-type": "application/json",
    "cache-control": "no-store",
  });
  res.end(JSON.stringify(maskDeep(body)));
}
