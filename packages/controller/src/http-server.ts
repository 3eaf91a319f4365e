// The controller's HTTP server: the dashboard and /metrics, each a route in one table. Every route
// but the page itself asks for a credential (see `HttpAuth`), loopback included, because the page
// acts (approve, delete) and the metrics name every module of the mesh.
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { BusLogger } from "@mesh/bus";
import { ListenError, parseListenAddress } from "@mesh/sdk/provider";
import type { Registry } from "prom-client";
import type { HttpAccess, HttpAuth, HttpCaller } from "./http-auth.ts";

/** Where the controller's HTTP server listens when not told: loopback, on any free port. */
export const DEFAULT_HTTP_LISTEN = "127.0.0.1:0";

/** The methods a route may answer; a GET route also answers HEAD. */
export type HttpMethod = "GET" | "POST" | "PUT" | "DELETE";

/** One entry of the route table. */
export interface HttpRoute {
  readonly method: HttpMethod;
  /** An exact path (`/metrics`), or a prefix ending in `/*` (`/ledger/*` answers `/ledger/postgres`). */
  readonly path: string;
  /**
   * What it asks of a request (default "operator"). "open" only for what holds no data: the
   * dashboard's page itself, and the login that takes a one-time code.
   */
  readonly access?: HttpAccess;
  /**
   * Answers the request. `url` is the request's URL, parsed; `caller` is who asks, as checked. A
   * handler that throws answers 500 and is said on the logger, without the request's headers.
   */
  handle(
    request: IncomingMessage,
    response: ServerResponse,
    url: URL,
    caller: HttpCaller,
  ): void | Promise<void>;
}

/** How to start the controller's HTTP server. */
export interface ControllerHttpOptions {
  /** HOST:PORT to listen on (DEFAULT_HTTP_LISTEN); a bare port means 127.0.0.1. */
  readonly listen?: string;
  readonly routes?: readonly HttpRoute[];
  /** The credentials every request but an open route's must carry. */
  readonly auth: HttpAuth;
  /** Where a failing handler is said. */
  readonly logger?: BusLogger;
}

/** A running controller HTTP server. */
export interface ControllerHttpServer {
  /** `http://HOST:PORT`, with the port it was given. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** The credentials it checks: login codes are minted here. */
  readonly auth: HttpAuth;
  /** Adds a route to the table (a later one for the same method and path wins). */
  route(route: HttpRoute): void;
  /** Stops listening and ends open connections; says the refusals still counted. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts the controller's HTTP server with `routes`: a request without the credential its route
 * asks for (or for a path no route has: whether one exists is not said) answers 401, or 403 for a
 * credential that does not open it, and is said on the log at a bounded rate. GET and HEAD on an
 * unknown path answer 404, a known path asked with a method it does not take answers 405 with
 * `Allow`.
 * @throws ListenAddressError (from @mesh/sdk/provider) for an address that is not HOST:PORT;
 *   ListenError when it cannot listen.
 */
export async function startControllerHttp(options: ControllerHttpOptions): Promise<ControllerHttpServer> {
  const { host, port } = parseListenAddress(options.listen ?? DEFAULT_HTTP_LISTEN);
  const auth = options.auth;
  const routes = [...(options.routes ?? [])];

  const server = createServer((req, res) => {
    void answer(req, res).catch((err: unknown) => {
      options.logger?.error(
        `the controller's HTTP server could not answer ${req.method ?? "?"} ${pathOf(req)}: ${(err as Error).message}`,
      );
      if (!res.headersSent)
        res.writeHead(500, TEXT).end("the controller could not answer; its log says why\n");
      else res.destroy();
    });
  });

  const answer = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://controller");
    const method = req.method === "HEAD" ? "GET" : req.method;
    // The latest route for a path wins, so one added later replaces one given at the start.
    const matching = routes.filter((r) => matches(r.path, url.pathname)).reverse();
    const route = matching.find((r) => r.method === method);
    const checked = auth.check(req, route?.access ?? "operator");
    if (!checked.ok) {
      await auth.refused(req, checked.message);
      const headers = {
        "cache-control": "no-store",
        ...(checked.status === 401 ? { "www-authenticate": 'Bearer realm="mesh"' } : {}),
      };
      if (url.pathname.startsWith("/api/")) {
        res
          .writeHead(checked.status, { ...headers, "content-type": "application/json" })
          .end(JSON.stringify({ ok: false, code: checked.code, error: checked.message }));
      } else {
        res.writeHead(checked.status, { ...headers, ...TEXT }).end(`${checked.message}\n`);
      }
      return;
    }
    if (matching.length === 0) {
      res.writeHead(404, TEXT).end(`nothing at ${url.pathname}\n`);
      return;
    }
    if (route === undefined) {
      const allowed = [
        ...new Set(matching.flatMap((r) => (r.method === "GET" ? ["GET", "HEAD"] : [r.method]))),
      ];
      res
        .writeHead(405, { ...TEXT, allow: allowed.join(", ") })
        .end(`${url.pathname} takes ${allowed.join(", ")}\n`);
      return;
    }
    await route.handle(req, res, url, checked.caller);
  };

  await new Promise<void>((resolve, reject) => {
    server.once("error", (err) => reject(new ListenError("the controller's HTTP server", host, port, err)));
    server.listen(port, host, resolve);
  });
  const address = server.address();
  const bound = typeof address === "object" && address !== null ? address.port : port;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${bound}`,
    host,
    port: bound,
    auth,
    route(route) {
      routes.push(route);
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }).then(() => auth.flush());
      return closing;
    },
  };
}

/**
 * The address a browser on this machine opens for a server listening at `url`: a wildcard host
 * (`0.0.0.0`, `[::]`) is reached at loopback.
 */
export function browsableUrl(url: string): string {
  const u = new URL(url);
  if (u.hostname === "0.0.0.0") u.hostname = "127.0.0.1";
  else if (u.hostname === "[::]") u.hostname = "[::1]";
  return u.toString().replace(/\/$/, "");
}

/** GET /metrics: everything on `registry`, in the Prometheus text format. */
export function metricsRoute(registry: Registry): HttpRoute {
  return {
    method: "GET",
    path: "/metrics",
    access: "metrics",
    async handle(req, res) {
      const text = await registry.metrics();
      res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
      res.end(req.method === "HEAD" ? undefined : text);
    },
  };
}

const TEXT = { "content-type": "text/plain; charset=utf-8" } as const;

function matches(pattern: string, path: string): boolean {
  return pattern.endsWith("/*") ? path.startsWith(pattern.slice(0, -1)) : path === pattern;
}

function pathOf(req: IncomingMessage): string {
  return new URL(req.url ?? "/", "http://controller").pathname;
}
