// What the controller's HTTP server says when it refuses a request without the right credential: the
// first refusal at once, with who asked as far as the machine knows (the peer's address and, on
// loopback, the Unix user that owns the connection), then at most one line a minute counting the
// rest. A script knocking a thousand times a second fills nobody's disk.
import { readFile } from "node:fs/promises";
import type { IncomingMessage } from "node:http";
import type { BusLogger } from "@mesh/bus";
import { systemClock, type Clock } from "@mesh/sdk";

/** How often, at most, the refusals are said after the first (default). */
export const REFUSALS_SAID_EVERY_MS = 60_000;

/** One refused request, in words that hold no secret (the path, never its query). */
export interface Refused {
  readonly method: string;
  readonly path: string;
  /** Why, e.g. "no credential", "a scrape token, which opens /metrics alone". */
  readonly why: string;
  /** The peer, as `describePeer` says it. */
  readonly from: string;
}

/** How to make a `RefusalLog`. */
export interface RefusalLogOptions {
  readonly logger: BusLogger;
  /** At most one line per this many ms after the first (REFUSALS_SAID_EVERY_MS). */
  readonly everyMs?: number;
  /** Its time and timer (the system's by default; `FakeClock` in tests). */
  readonly clock?: Clock;
}

/** Says refusals: the first at once, the rest counted and said at most once per `everyMs`. */
export class RefusalLog {
  readonly #log: BusLogger;
  readonly #everyMs: number;
  readonly #clock: Clock;
  #saidAt: number | undefined;
  #counted = 0;
  #last: Refused | undefined;
  #timer: unknown;

  constructor(options: RefusalLogOptions) {
    this.#log = options.logger;
    this.#everyMs = options.everyMs ?? REFUSALS_SAID_EVERY_MS;
    this.#clock = options.clock ?? systemClock;
  }

  /** Whether the next refusal is said at once (so it is worth finding out who sent it). */
  saysNext(): boolean {
    return (
      this.#saidAt === undefined || (this.#clock.now() - this.#saidAt >= this.#everyMs && this.#counted === 0)
    );
  }

  /** Takes one refusal: said now when nothing was said within `everyMs`, else counted. */
  refused(what: Refused): void {
    const now = this.#clock.now();
    if (this.saysNext()) {
      this.#saidAt = now;
      this.#log.warn(
        `the controller's HTTP server refused ${describe(what)}; further refusals are counted and said at ` +
          `most once every ${Math.round(this.#everyMs / 1000)} s`,
      );
      return;
    }
    this.#counted++;
    this.#last = what;
    if (this.#timer === undefined) {
      const due = (this.#saidAt ?? now) + this.#everyMs - now;
      this.#timer = this.#clock.setTimeout(() => this.flush(), Math.max(0, due));
      // A timer of the system's must not keep a stopping process alive: close() says what is left.
      (this.#timer as { unref?: () => void }).unref?.();
    }
  }

  /** Says the refusals counted since the last line, if any. */
  flush(): void {
    if (this.#timer !== undefined) this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#counted === 0 || this.#last === undefined) return;
    const since = this.#saidAt === undefined ? 0 : Math.round((this.#clock.now() - this.#saidAt) / 1000);
    this.#log.warn(
      `the controller's HTTP server refused ${this.#counted} more request(s) in the last ${since} s ` +
        `(the last: ${describe(this.#last)})`,
    );
    this.#saidAt = this.#clock.now();
    this.#counted = 0;
    this.#last = undefined;
  }
}

function describe(r: Refused): string {
  return `${r.method} ${r.path} from ${r.from}: ${r.why}`;
}

/**
 * Who sent `req`, as far as this machine can tell: its address, and for a loopback peer the Unix
 * user that owns the other end of the connection (read from /proc/net/tcp and /etc/passwd), so a
 * line says `127.0.0.1 (uid 998, mesh-notes)`. Asked before the request is answered, while the
 * connection is still open. Never throws: what cannot be found is left out.
 */
export async function describePeer(req: IncomingMessage): Promise<string> {
  const address = req.socket.remoteAddress ?? "an unknown address";
  const remotePort = req.socket.remotePort;
  const localPort = req.socket.localPort;
  if (remotePort === undefined || localPort === undefined || !isLoopbackAddress(address)) return address;
  const uid = await loopbackPeerUid(remotePort, localPort).catch(() => undefined);
  if (uid === undefined) return address;
  const name = await userName(uid).catch(() => undefined);
  return `${address} (uid ${uid}${name === undefined ? "" : `, ${name}`})`;
}

function isLoopbackAddress(address: string): boolean {
  return address === "::1" || address.startsWith("127.") || address.startsWith("::ffff:127.");
}

/**
 * The uid owning the client end of a loopback TCP connection from `clientPort` to `serverPort`:
 * the line of /proc/net/tcp (or tcp6) whose local port is the client's and remote port the server's.
 */
async function loopbackPeerUid(clientPort: number, serverPort: number): Promise<number | undefined> {
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const text = await readFile(table, "utf8").catch(() => "");
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      const local = fields[1];
      const remote = fields[2];
      const state = fields[3];
      const uid = fields[7];
      if (local === undefined || remote === undefined || uid === undefined) continue;
      // Established only: a closed connection's leftover (TIME_WAIT) is listed as uid 0's.
      if (state === ESTABLISHED && portOf(local) === clientPort && portOf(remote) === serverPort)
        return Number(uid);
    }
  }
  return undefined;
}

/** The state column of /proc/net/tcp for an established connection. */
const ESTABLISHED = "01";

function portOf(hexAddress: string): number {
  return parseInt(hexAddress.slice(hexAddress.lastIndexOf(":") + 1), 16);
}

async function userName(uid: number): Promise<string | undefined> {
  const passwd = await readFile("/etc/passwd", "utf8");
  for (const line of passwd.split("\n")) {
    const [name, , id] = line.split(":");
    if (name !== undefined && id !== undefined && Number(id) === uid && id !== "") return name;
  }
  return undefined;
}
