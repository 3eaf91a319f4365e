// Where a server listens, written HOST:PORT: read once here for every server of the mesh (the
// controller's HTTP server, a provider's /metrics) and for the fleet file that may name one.
import { isIP } from "node:net";

/** A `host:port` to listen on that cannot be used as written. */
export class ListenAddressError extends Error {
  override name = "ListenAddressError";
  constructor(
    readonly address: string,
    /** What is wrong with it, in words: "it is not HOST:PORT". */
    readonly reason: string,
  ) {
    super(
      `cannot listen on ${JSON.stringify(address)}: ${reason}; write it as HOST:PORT, e.g. 127.0.0.1:9464`,
    );
  }
}

/** Where to listen: a host (an IP address or localhost) and a port (0: any free one). */
export interface ListenAddress {
  readonly host: string;
  readonly port: number;
}

/**
 * Reads `HOST:PORT` (`[::1]:PORT` for IPv6); a bare `PORT` or `:PORT` means `defaultHost`.
 * @throws ListenAddressError naming what is wrong.
 */
export function parseListenAddress(text: string, defaultHost = "127.0.0.1"): ListenAddress {
  const m = /^(?:(?:\[([^\]]*)\]|([^:[\]]*)):)?(\d{1,5})$/.exec(text.trim());
  if (m === null) throw new ListenAddressError(text, "it is not HOST:PORT");
  const host = m[1] ?? (m[2] === undefined || m[2] === "" ? defaultHost : m[2]);
  const port = Number(m[3]);
  if (port > 65_535) throw new ListenAddressError(text, `port ${port} is past 65535`);
  if (host !== "localhost" && isIP(host) === 0) {
    throw new ListenAddressError(text, `${JSON.stringify(host)} is not an IP address or localhost`);
  }
  return { host, port };
}

/** Whether `host` is this machine only: 127.0.0.0/8, ::1, or localhost. */
export function isLoopbackHost(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, "");
  if (h === "localhost" || h === "::1") return true;
  const v4 = h.startsWith("::ffff:") ? h.slice("::ffff:".length) : h;
  return isIP(v4) === 4 && v4.startsWith("127.");
}
