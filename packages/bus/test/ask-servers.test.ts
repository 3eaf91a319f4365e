// Asking through whichever server reaches an answerer, on real nats-servers trusting one authority:
// a server through which nothing takes the request within the receipt's time is left for the next,
// one that never speaks NATS too; a request taken is waited for and never asked twice.
import assert from "node:assert/strict";
import { createServer, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { NoRespondersError, type NatsConnection } from "@nats-io/transport-node";
import {
  createAuthority,
  credsFor,
  connectBus,
  newUserKeys,
  respondInParts,
  sendReceipt,
  type BusAuthority,
} from "@mesh/bus";
import { askThroughServers, AskUnansweredError, type AskServersOptions } from "../src/ask-servers.ts";
import { startNats, type NatsServer } from "@mesh/testkit";
import { EVERYTHING } from "./bus-server.ts";

const SUBJECT = "ask.test";
const RECEIPT_MS = 1_000;

describe("asking through the servers that reach an answerer", () => {
  let authority: BusAuthority;
  let a: NatsServer;
  let b: NatsServer;
  let creds: Uint8Array;
  let silent: Server;
  let silentUrl: string;
  const sockets: Socket[] = [];
  const connections: NatsConnection[] = [];

  const connect = async (url: string): Promise<NatsConnection> => {
    const nc = await connectBus({ servers: url, creds, name: "answerer" });
    connections.push(nc);
    return nc;
  };

  /** Asks through `servers` as the CLI does (`mesh status` on `SUBJECT`), with `more` on top. */
  const ask = (servers: string[], more: Partial<AskServersOptions> = {}) =>
    askThroughServers({
      servers,
      creds,
      name: "mesh status",
      subject: SUBJECT,
      body: "{}",
      timeoutMs: 30_000,
      receiptMs: RECEIPT_MS,
      ...more,
    });

  /** Answers `SUBJECT` on `url` after `delayMs`, with a receipt at once unless `receipt` is false. */
  const answerer = async (
    url: string,
    options: { text: string; delayMs?: number; receipt?: boolean; reply?: boolean },
  ): Promise<{ count: number; stop(): void }> => {
    const nc = await connect(url);
    const seen = { count: 0 };
    const sub = nc.subscribe(SUBJECT, {
      callback: (_err, msg) => {
        seen.count++;
        if (options.receipt !== false) sendReceipt(nc, msg);
        if (options.reply === false) return;
        setTimeout(() => respondInParts(nc, msg, options.text), options.delayMs ?? 0);
      },
    });
    await nc.flush();
    return {
      get count() {
        return seen.count;
      },
      stop: () => sub.unsubscribe(),
    };
  };

  before(async () => {
    authority = await createAuthority();
    a = await startNats({ config: authority.serverConfig() });
    b = await startNats({ config: authority.serverConfig() });
    const keys = newUserKeys();
    const jwt = await authority.issueUser({
      name: "asker",
      publicKey: keys.publicKey,
      permissions: EVERYTHING,
    });
    creds = credsFor(jwt, keys.seed);
    // A server that takes the connection and never says anything: a nats-server stopped (SIGSTOP).
    silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    silentUrl = `nats://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
  });

  after(async () => {
    for (const nc of connections) await nc.close();
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
    await a.stop();
    await b.stop();
  });

  it("asks through the next server when nothing takes the request through the first within the receipt's time", async () => {
    // Through a, the request reaches something that never answers: a route to a cut-off controller.
    const void_ = await answerer(a.url, { text: "never", receipt: false, reply: false });
    const live = await answerer(b.url, { text: '{"from":"b"}' });
    const left: string[] = [];
    try {
      const began = Date.now();
      const answer = await ask([a.url, b.url], {
        onNext: (server, why) => left.push(`${server}: ${why}`),
      });
      assert.equal(answer.text, '{"from":"b"}');
      assert.equal(answer.server, b.url);
      assert.deepEqual(left, [`${a.url}: nothing took the request within ${RECEIPT_MS / 1000} s`]);
      assert.ok(Date.now() - began >= RECEIPT_MS, "a was given its time first");
      assert.equal(void_.count, 1);
      assert.equal(live.count, 1);
    } finally {
      void_.stop();
      live.stop();
    }
  });

  it("waits for a request once it is taken, however long its answer takes, and asks no other server", async () => {
    const slow = await answerer(a.url, { text: '{"from":"a"}', delayMs: 3 * RECEIPT_MS });
    const other = await answerer(b.url, { text: '{"from":"b"}' });
    const left: string[] = [];
    try {
      const answer = await ask([a.url, b.url], {
        name: "mesh rotate",
        onNext: (server, why) => left.push(`${server}: ${why}`),
      });
      assert.equal(answer.text, '{"from":"a"}');
      assert.deepEqual(left, []);
      assert.equal(slow.count, 1);
      assert.equal(other.count, 0, "a request taken is never asked twice");
    } finally {
      slow.stop();
      other.stop();
    }
  });

  it("leaves a server that takes the connection and never speaks for the next, and gathers every reply", async () => {
    const live = await answerer(b.url, { text: '{"from":"b"}' });
    const peers = await connect(b.url);
    for (const name of ["one", "two"])
      peers.subscribe("ask.peers", {
        callback: (_e, msg) => {
          msg.respond(JSON.stringify({ name }));
        },
      });
    await peers.flush();
    const left: string[] = [];
    try {
      const answer = await ask([silentUrl, b.url], {
        gather: { subject: "ask.peers", withinMs: 300 },
        onNext: (server) => left.push(server),
      });
      assert.equal(answer.server, b.url);
      assert.deepEqual(left, [silentUrl]);
      assert.deepEqual(answer.gathered.map((t) => (JSON.parse(t) as { name: string }).name).sort(), [
        "one",
        "two",
      ]);
    } finally {
      live.stop();
    }
  });

  it("finds a listener that comes a moment after every server said that nothing listens (a controller between terms)", async () => {
    let late: { count: number; stop(): void } | undefined;
    const waits: number[] = [];
    const began = Date.now();
    // Nothing listens when the asking begins; the answerer comes 1.2 s later, as a controller that
    // stood by while its lease was in doubt leads again.
    const coming = new Promise<void>((resolve) =>
      setTimeout(
        () => void answerer(b.url, { text: "leading again" }).then((x) => ((late = x), resolve())),
        1_200,
      ),
    );
    try {
      const got = await ask([a.url, b.url], {
        name: "mesh join-token",
        onWaitForListener: (ms) => waits.push(ms),
      });
      assert.equal(got.text, "leading again");
      assert.equal(late?.count, 1, "asked once it listened, and once only");
      assert.deepEqual(waits, [5_000], "the wait is told once");
      assert.ok(Date.now() - began < 5_000, "answered within the wait for a listener");
    } finally {
      await coming;
      late?.stop();
    }
  });

  it("says that nothing listens after a few seconds when no server has a listener, and names the wait when nothing answers", async () => {
    const began = Date.now();
    await assert.rejects(
      ask([a.url, b.url], {
        subject: "ask.nobody",
      }),
      NoRespondersError,
    );
    const waited = Date.now() - began;
    assert.ok(waited >= 5_000, `asked again for the wait for a listener (${waited} ms)`);
    assert.ok(waited < 10_000, "no wait for a receipt nobody can send");

    const void_ = await answerer(a.url, { text: "never", receipt: false, reply: false });
    try {
      await assert.rejects(
        ask([a.url], { timeoutMs: 2_500 }),
        (err: unknown) =>
          err instanceof AskUnansweredError &&
          /nothing took the request on ask\.test through nats:/.test(err.message),
      );
    } finally {
      void_.stop();
    }
  });
});
