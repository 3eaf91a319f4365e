// The controller's HTTP server: /metrics now, the dashboard later, each a route in one table. It
// listens on loopback unless it is given an operator token; with one, every request must carry it,
// because the page will act (approve, delete) and the metrics name every module of the mesh.
import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { BusLogger } from "@mesh/bus";
import { ListenError, isLoopbackHost, parseListenAddress } from "@mesh/sdk/provider";
import type { Registry } from "prom-client";

/** Where the controller's HTTP server listens when not told: loopback, on any free port. */
export const DEFAULT_HTTP_LISTEN = "127.0.0.1:0";

/** The methods a route may answer; a GET route also answers HEAD. */
export type HttpMethod = "GET" | "POST" | "PUT" | "DELETE";

/** One entry of the route table. */
export interface HttpRoute {
  readonly method: HttpMethod;
  /** An exact path (`/metrics`), or a prefix ending in `/*` (`/ledger/*` answers `/ledger/postgres`). */
  readonly path: string;
  /** Served without the operator token: only for what holds no data (the dashboard's page itself). */
  readonly open?: boolean;
  /**
   * Answers the request. `url` is the request's URL, parsed. A handler that throws answers 500 and
   * is said on the logger, without the request's headers.
   */
  handle(request: IncomingMessage, response: ServerResponse, url: URL): void | Promise<void>;
}

/** How to start the controller's HTTP server. */
export interface ControllerHttpOptions {
  /** HOST:PORT to listen on (DEFAULT_HTTP_LISTEN); a bare port means 127.0.0.1. */
  readonly listen?: string;
  readonly routes?: readonly HttpRoute[];
  /**
   * The operator token. Without it the server refuses any address but loopback; with it, every
   * request must send `Authorization: Bearer <token>`.
   */
  readonly operatorToken?: string;
  /** Where a failing handler is said. */
  readonly logger?: BusLogger;
}

/** A running controller HTTP server. */
export interface ControllerHttpServer {
  /** `http://HOST:PORT`, with the port it was given. */
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** Adds a route to the table (a later one for the same method and path wins). */
  route(route: HttpRoute): void;
  /** Stops listening and ends open connections. Idempotent. */
  close(): Promise<void>;
}

/** The server was asked to listen where other machines reach it, with no operator token to check. */
export class HttpExposedError extends Error {
  override name = "HttpExposedError";
  constructor(
    readonly host: string,
    readonly port: number,
  ) {
    super(
      `the controller's HTTP server would listen on ${host}:${port}, which other machines reach, and it has no ` +
        "operator token to check who asks: listen on loopback (127.0.0.1) and reach it from elsewhere through an " +
        `SSH tunnel (ssh -L ${port || 8080}:127.0.0.1:${port || 8080} this-host), or configure an operator token`,
    );
  }
}

/**
 * Starts the controller's HTTP server with `routes`: GET and HEAD on an unknown path answer 404, a
 * known path asked with a method it does not take answers 405 with `Allow`.
 * @throws ListenAddressError (from @mesh/sdk/provider) for an address that is not HOST:PORT; HttpExposedError
 *   for an address other than loopback without an operator token; ListenError when it cannot listen.
 */
export async function startControllerHttp(
  options: ControllerHttpOptions = {},
): Promise<ControllerHttpServer> {
  const { host, port } = parseListenAddress(options.listen ?? DEFAULT_HTTP_LISTEN);
  const token = options.operatorToken === "" ? undefined : options.operatorToken;
  if (token === undefined && !isLoopbackHost(host)) throw new HttpExposedError(host, port);
  const tokenDigest = token === undefined ? undefined : digest(token);
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
    const open = matching.find((r) => r.method === method)?.open === true;
    if (tokenDigest !== undefined && !open && !carriesToken(req, tokenDigest)) {
      res.writeHead(401, { ...TEXT, "www-authenticate": 'Bearer realm="mesh"' });
      res.end("send the operator token: Authorization: Bearer <token>\n");
      return;
    }
    if (matching.length === 0) {
      res.writeHead(404, TEXT).end(`nothing at ${url.pathname}\n`);
      return;
    }
    const route = matching.find((r) => r.method === method);
    if (route === undefined) {
      const allowed = [
        ...new Set(matching.flatMap((r) => (r.method === "GET" ? ["GET", "HEAD"] : [r.method]))),
      ];
      res
        .writeHead(405, { ...TEXT, allow: allowed.join(", ") })
        .end(`${url.pathname} takes ${allowed.join(", ")}\n`);
      return;
    }
    await route.handle(req, res, url);
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
    route(route) {
      routes.push(route);
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/** GET /metrics: everything on `registry`, in the Prometheus text format. */
export function metricsRoute(registry: Registry): HttpRoute {
  return {
    method: "GET",
    path: "/metrics",
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

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/** Whether `req` carries the token, compared in constant time (digests, so lengths never differ). */
function carriesToken(req: IncomingMessage, want: Buffer): boolean {
  const m = /^Bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
  return m?.[1] !== undefined && timingSafeEqual(digest(m[1]), want);
}
