// The operator's dashboard: a plain page (HTML, CSS and a script from this directory, no build step)
// and a small JSON API under /api/. Reads are GETs; every action is a POST with a JSON body that
// goes through the same tool relay as `mesh tool`, so it lands in the module's ledger exactly as the
// CLI's does. The page holds no data of its own and is served without the operator token; the API
// is not. Cross-site requests are refused: a POST must come from the page's own origin with a JSON
// body, and without a token only a loopback Host is answered (a DNS-rebound name is not).
import { readFile } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isValidLogin } from "@mesh/sdk";
import { isLoopbackHost } from "@mesh/sdk/provider";
import { isModuleName, READ_ONLY_TOOL_NAMES } from "@mesh/manifest";
import type { HttpRoute } from "../http-server.ts";
import { DEFAULT_LEDGER_LIMIT, MAX_LEDGER_LIMIT } from "../ledger-reader.ts";
import { RELAY_UNANSWERED_CODES, type ToolReply } from "../tool-relay.ts";
import { maskDeep } from "@mesh/sdk/provider";
import { DashboardView, type DashboardSources, type DashboardViewOptions } from "./dashboard-state.ts";

/** How to serve the dashboard. */
export interface DashboardOptions extends DashboardViewOptions {
  /** What it reads and asks: the running controller. */
  readonly sources: DashboardSources;
  /**
   * Whether the HTTP server checks an operator token on the API. Without one, only requests whose
   * Host is a loopback name are answered, so a page on another site cannot reach the API through
   * a name it points at 127.0.0.1.
   */
  readonly tokenRequired: boolean;
}

/** The largest body an action takes. */
export const MAX_ACTION_BYTES = 4 * 1024;

/** The id `retire approve` takes (see `setId` in @mesh/sdk/provider). */
const SET_ID = /^[0-9a-f]{12}$/;

// Beside src/ and dist/ alike: the page is served as written, by the sources and the build.
const STATIC_DIR = new URL("../../static/", import.meta.url);

const STATIC_FILES: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/dashboard.css": { file: "dashboard.css", type: "text/css; charset=utf-8" },
  "/dashboard.js": { file: "dashboard.js", type: "text/javascript; charset=utf-8" },
};

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
 * - `GET /api/state`: nodes, modules, providers and their consumers (`DashboardState`);
 * - `GET /api/ledger?module=M&limit=N`: a module's newest ledger entries, oldest first, and
 *   `readOnlyTools`, the tools whose calls the page hides unless asked;
 * - `POST /api/approve` `{module, id}`: `retire approve <id>` on the provider;
 * - `POST /api/delete` `{module, login, typed}`: `cleanup delete <login>`, refused unless `typed`
 *   is the login itself.
 * Actions answer the relay's reply (`{ok, answer}` or `{ok: false, error, code}`).
 */
export function dashboardRoutes(options: DashboardOptions): HttpRoute[] {
  const view = new DashboardView(options.sources, options);
  const files = new Map<string, Promise<Buffer>>();
  const guard = (req: IncomingMessage): void => {
    if (!options.tokenRequired) checkLoopbackHost(req);
  };
  const page = (path: string): HttpRoute => ({
    method: "GET",
    path,
    open: true,
    async handle(req, res) {
      try {
        guard(req);
      } catch (err) {
        if (!(err instanceof Refusal)) throw err;
        res.writeHead(err.status, { "content-type": "text/plain; charset=utf-8" }).end(`${err.message}\n`);
        return;
      }
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
    answer: (req: IncomingMessage, url: URL) => Promise<{ status: number; body: unknown }>,
  ): HttpRoute => ({
    method,
    path,
    async handle(req, res, url) {
      let status: number;
      let body: unknown;
      try {
        guard(req);
        if (method === "POST") checkSameOrigin(req);
        ({ status, body } = await answer(req, url));
      } catch (err) {
        if (!(err instanceof Refusal)) throw err;
        status = err.status;
        body = { ok: false, code: err.code, error: err.message };
      }
      sendJson(res, status, body);
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
    api("GET", "/api/state", async () => ({ status: 200, body: await view.state() })),
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
    api("POST", "/api/approve", async (req) => {
      const body = await readAction(req);
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
      return act(module, options.sources.tool({ module, tool: "retire approve", args: [id], who: view.who }));
    }),
    api("POST", "/api/delete", async (req) => {
      const body = await readAction(req);
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
        options.sources.tool({ module, tool: "cleanup delete", args: [login], who: view.who }),
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

// Without a token, a Host that is not a loopback name is a page elsewhere reaching in through a
// name it points at this machine (DNS rebinding): it is answered nothing.
function checkLoopbackHost(req: IncomingMessage): void {
  const host = hostnameOf(req.headers.host);
  if (host === undefined || !isLoopbackHost(host)) {
    throw new Refusal(
      421,
      "wrong-host",
      `this dashboard answers only as 127.0.0.1 or localhost (it was asked as ${JSON.stringify(req.headers.host ?? "")}); ` +
        "to reach it from elsewhere, give mesh up an operator token",
    );
  }
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
    throw new Refusal(415, "bad-request", "an action's body is JSON (content-type: application/json)");
  }
}

async function readAction(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_ACTION_BYTES)
      throw new Refusal(413, "bad-request", `an action's body is at most ${MAX_ACTION_BYTES} bytes`);
    chunks.push(chunk);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new Refusal(400, "bad-request", "an action's body is a JSON object");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new Refusal(400, "bad-request", "an action's body is a JSON object");
  return body as Record<string, unknown>;
}

function hostnameOf(host: string | undefined): string | undefined {
  if (host === undefined || host === "") return undefined;
  try {
    return new URL(`http://${host}`).hostname;
  } catch {
    return undefined;
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { ...PAGE_HEADERS, "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(maskDeep(body)));
}
