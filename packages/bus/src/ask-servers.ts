// Asking the controller from a short-lived client (a person's CLI) through whichever bus server
// reaches it. A server that is up but cut off from the rest of its cluster accepts a connection
// and a request, and routes the request to a controller it can no longer reach: one connection
// given every server would wait out the whole ask there. So servers are asked one at a time, in the
// order given and then those the cluster names (its `connect_urls`); the request asks for a
// receipt, and a server that does not connect, or through which no controller takes the request
// within `receiptMs`, is left for the next. A request once taken is waited for, however long its
// answer takes, and never asked again; one not taken stays open, so a late answer still counts.
// When every server says at once that nothing listens, the asking goes on for a few seconds more,
// a little slower each time: a controller stands by while its lease is in doubt (a server of the
// cluster restarted under it) and answers again a moment later, so "nothing listens" for that long
// is an answer, and for less it is a blink.
import {
  createInbox,
  NoRespondersError,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import { sendRequest, type SentRequest } from "./answer-parts.ts";
import { BusCredentialsRefusedError, BusTlsError, connectBus } from "./connect-bus.ts";

/** How long one server is given to have a request taken before the next is asked. */
export const ASK_RECEIPT_MS = 2_000;

/** How long every server may say that nothing listens before the asking gives up on a listener. */
export const ASK_LISTENER_WAIT_MS = 5_000;

/** The first pause before every server is asked again when none has a listener; doubled each time. */
const LISTENER_PAUSE_MS = 250;

/** How to ask. */
export interface AskServersOptions {
  /** The servers to ask through, first to last (`nats://` or `tls://` URLs). */
  readonly servers: readonly string[];
  /** The creds file's contents. */
  readonly creds: Uint8Array;
  /** Who asks: shown in the servers' logs and in errors. */
  readonly name: string;
  readonly inboxPrefix?: string;
  /** The mesh's bus CA (PEM) when the bus uses TLS. */
  readonly ca?: string;
  readonly subject: string;
  readonly body: string;
  /**
   * How long the request may wait to be taken, through every server together, and then how long
   * each part of its answer may take (ms).
   */
  readonly timeoutMs: number;
  /** How long one server is given to have the request taken before the next is asked (`ASK_RECEIPT_MS`). */
  readonly receiptMs?: number;
  /**
   * How many times each server may be asked (default 3): a cluster gives up its route to a cut-off
   * server within seconds, after which a server that could not reach the controller can.
   */
  readonly rounds?: number;
  /**
   * How long the servers may all say that nothing listens before `NoRespondersError`
   * (`ASK_LISTENER_WAIT_MS`): they are asked again after a pause that doubles from 250 ms.
   */
  readonly listenerWaitMs?: number;
  /**
   * Also sends `subject` on the connection that answers, as the answer is awaited, and keeps the
   * replies that come within `withinMs` of sending it (a subject every controller answers): sooner
   * once the answer came and the replies have stopped coming for `GATHER_QUIET_MS`.
   */
  readonly gather?: { readonly subject: string; readonly body?: string; readonly withinMs: number };
  /** Told of each server left for the next, and why (once a server for nothing listening). */
  readonly onNext?: (server: string, why: string) => void;
  /** Told once, when every server has said that nothing listens and the asking pauses to go on. */
  readonly onWaitForListener?: (withinMs: number) => void;
  /** Opens a connection to one server (default: `connectBus` with the options above). */
  readonly connect?: (server: string) => Promise<NatsConnection>;
}

/** An answer, and where it came from. */
export interface AskedAnswer {
  readonly text: string;
  /** The server it came through. */
  readonly server: string;
  /** What `gather` heard, one text per reply. */
  readonly gathered: readonly string[];
}

/** No controller took the request through any server in time. */
export class AskUnansweredError extends Error {
  override name = "AskUnansweredError";
  constructor(
    readonly subject: string,
    readonly servers: readonly string[],
    readonly withinMs: number,
  ) {
    super(
      `nothing took the request on ${subject} through ${servers.join(", ")} within ${Math.round(withinMs / 1000)} s`,
    );
  }
}

interface Asked {
  readonly server: string;
  readonly request: SentRequest;
}

/**
 * Asks `subject` through the first server through which something takes the request, and answers
 * the reply's text (put back together when it comes in parts).
 * @throws BusCredentialsRefusedError when a server refuses the credentials; BusTlsError for a TLS
 * problem named before connecting (no CA); NoRespondersError when every server that connected says
 * nothing listens on `subject`; AskUnansweredError when nothing took it within `timeoutMs`; the last
 * connection's error when no server could be connected to; TimeoutError when a part of a taken
 * answer does not come within `timeoutMs`.
 */
export async function askThroughServers(options: AskServersOptions): Promise<AskedAnswer> {
  const receiptMs = options.receiptMs ?? ASK_RECEIPT_MS;
  const rounds = options.rounds ?? 3;
  const listenerWaitMs = options.listenerWaitMs ?? ASK_LISTENER_WAIT_MS;
  const deadline = Date.now() + options.timeoutMs;
  const known = [...new Set(options.servers)];
  const connect =
    options.connect ??
    ((server: string) =>
      connectBus({
        servers: [server],
        creds: options.creds,
        name: options.name,
        ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
        ...(options.ca !== undefined ? { ca: options.ca } : {}),
      }));
  const connections = new Map<string, NatsConnection>();
  const asked: Asked[] = [];
  /** What was asked and may still be taken (not refused for want of a listener). */
  const open = new Set<Asked>();
  const askedOf = new Map<string, number>();
  /** The servers that did not connect: asked no more. */
  const unreachable = new Set<string>();
  let lastFailure: unknown;
  let connectedOnce = false;
  /** When a server first said that nothing listens (undefined: none has), and how many pauses followed. */
  let nobodySince: number | undefined;
  let pauses = 0;

  // The first request something takes, whichever server it went through.
  let chosen: ((a: Asked) => void) | undefined;
  const taken = new Promise<Asked>((resolve) => (chosen = resolve));
  let winner: Asked | undefined;
  const watch = (a: Asked): void => {
    a.request.taken.then(
      () => {
        if (winner === undefined) {
          winner = a;
          chosen?.(a);
        }
      },
      () => undefined,
    );
  };

  const closeAll = (keep?: NatsConnection): void => {
    for (const a of asked) if (a !== winner) a.request.close();
    for (const nc of connections.values()) if (nc !== keep) void nc.close().catch(() => undefined);
  };

  try {
    for (let i = 0; winner === undefined && Date.now() < deadline; i++) {
      const server = known[i % known.length] as string;
      if (known.every((s) => (askedOf.get(s) ?? 0) >= rounds)) {
        // Every server asked as often as it may. When each that connected said that nothing
        // listens, a listener may be a moment away: pause, then ask them all once more.
        if (open.size > 0 || nobodySince === undefined) break;
        const waited = Date.now() - nobodySince;
        if (waited >= listenerWaitMs) break;
        const pauseMs = Math.min(
          LISTENER_PAUSE_MS * 2 ** pauses++,
          listenerWaitMs - waited,
          Math.max(0, deadline - Date.now()),
        );
        if (pauses === 1) options.onWaitForListener?.(listenerWaitMs);
        await new Promise((resolve) => setTimeout(resolve, pauseMs));
        for (const s of known) if (!unreachable.has(s)) askedOf.set(s, rounds - 1);
        i = -1;
        continue;
      }
      if ((askedOf.get(server) ?? 0) >= rounds) continue;
      askedOf.set(server, (askedOf.get(server) ?? 0) + 1);

      let nc = connections.get(server);
      if (nc === undefined || nc.isClosed()) {
        const opening = connect(server);
        const outcome = await Promise.race([
          opening.then(
            (c) => ({ kind: "connected" as const, nc: c }),
            (err: unknown) => ({ kind: "failed" as const, err }),
          ),
          taken.then(() => ({ kind: "taken" as const })),
        ]);
        if (outcome.kind === "taken") {
          // Something took an earlier request meanwhile: this connection is not needed.
          void opening.then((c) => c.close()).catch(() => undefined);
          break;
        }
        if (outcome.kind === "failed") {
          const err = outcome.err;
          if (err instanceof BusCredentialsRefusedError) throw err;
          if (err instanceof BusTlsError && err.problem === "no-ca") throw err;
          lastFailure = err;
          // Not tried again: the rounds are for a cluster's routes to settle, not for a server down.
          askedOf.set(server, rounds);
          unreachable.add(server);
          options.onNext?.(server, `it did not connect: ${err instanceof Error ? err.message : String(err)}`);
          continue;
        }
        nc = outcome.nc;
        connections.set(server, nc);
        connectedOnce = true;
        learn(nc, known, server);
      }

      const request = sendRequest(nc, options.subject, options.body, {
        receipt: true,
        ...(options.inboxPrefix !== undefined ? { inboxPrefix: options.inboxPrefix } : {}),
      });
      const a = { server, request };
      asked.push(a);
      open.add(a);
      watch(a);
      let timer: NodeJS.Timeout | undefined;
      const outcome = await Promise.race([
        taken.then(() => "taken" as const),
        request.taken.then(
          () => "taken" as const,
          () => "no-responders" as const,
        ),
        new Promise<"late">((resolve) => {
          timer = setTimeout(() => resolve("late"), Math.max(0, Math.min(receiptMs, deadline - Date.now())));
        }),
      ]).finally(() => clearTimeout(timer));
      if (outcome === "taken") break;
      if (outcome === "no-responders") {
        request.close();
        open.delete(a);
        nobodySince ??= Date.now();
        if (pauses === 0) options.onNext?.(server, `nothing listens on ${options.subject} through it`);
        continue;
      }
      options.onNext?.(server, `nothing took the request within ${receiptMs / 1000} s`);
    }

    // Every server asked: what is open may still be taken, until the deadline.
    if (winner === undefined && open.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        taken,
        new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, deadline - Date.now())))),
      ]).finally(() => clearTimeout(timer));
    }
    const answered = winner as Asked | undefined;
    if (answered === undefined) {
      if (nobodySince !== undefined && open.size === 0) throw new NoRespondersError(options.subject);
      if (!connectedOnce && lastFailure !== undefined) throw lastFailure;
      throw new AskUnansweredError(options.subject, known, options.timeoutMs);
    }

    const nc = connections.get(answered.server) as NatsConnection;
    closeAll(nc);
    const answer = answered.request.answer(options.timeoutMs);
    const gathering = options.gather !== undefined ? gather(nc, options, options.gather, answer) : undefined;
    try {
      const text = await answer;
      return { text, server: answered.server, gathered: (await gathering) ?? [] };
    } finally {
      answered.request.close();
    }
  } finally {
    closeAll();
    if (winner !== undefined)
      await connections
        .get(winner.server)
        ?.close()
        .catch(() => undefined);
  }
}

// The servers the cluster names for clients (bare host:port), with the scheme of the one reached.
function learn(nc: NatsConnection, known: string[], reached: string): void {
  const scheme = /^tls:\/\//i.test(reached) ? "tls" : "nats";
  for (const url of nc.info?.connect_urls ?? []) {
    const full = url.includes("://") ? url : `${scheme}://${url}`;
    if (!known.includes(full)) known.push(full);
  }
}

/**
 * How long a gathering stays open after the answer came and no reply has come for this long. Every
 * controller answers the gathering's subject at once, while the one that took the request is still
 * composing its answer, so their replies are in by the time the answer is: a short quiet is enough
 * (a longer one was most of `mesh status`'s time).
 */
const GATHER_QUIET_MS = 20;
/** How often a gathering that has heard nothing yet looks again. */
const GATHER_STEP_MS = 5;

// Every reply to `what.subject` on `nc` until `withinMs` after it was sent, or sooner: once
// `answered` has settled and no reply has come for `GATHER_QUIET_MS` (replies come together).
async function gather(
  nc: NatsConnection,
  options: AskServersOptions,
  what: NonNullable<AskServersOptions["gather"]>,
  answered: Promise<unknown>,
): Promise<string[]> {
  const heard: string[] = [];
  const until = Date.now() + what.withinMs;
  let lastAt = Date.now();
  let sub: Subscription | undefined;
  try {
    const inbox = createInbox(options.inboxPrefix);
    sub = nc.subscribe(inbox, {
      callback: (err, msg) => {
        if (err !== null || msg.headers?.hasError === true) return;
        heard.push(msg.string());
        lastAt = Date.now();
      },
    });
    nc.publish(what.subject, what.body ?? "{}", { reply: inbox });
    await answered.catch(() => undefined);
    // Asleep until the quiet would be over (or the window is): a reply meanwhile moves `lastAt`, and
    // the quiet is waited again. Looking every few ms instead overshot the quiet by half a step.
    while (Date.now() < until && (heard.length === 0 || Date.now() - lastAt < GATHER_QUIET_MS)) {
      const next = heard.length === 0 ? Date.now() + GATHER_STEP_MS : lastAt + GATHER_QUIET_MS;
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(next, until) - Date.now())));
    }
  } catch {
    // A gathering that fails leaves what it heard: the answer itself does not depend on it.
  } finally {
    // The connection may be closed by now (the answer failed): nothing to unsubscribe from then.
    if (!nc.isClosed()) sub?.unsubscribe();
  }
  return heard;
}
