import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { findNatsServer, NatsNotFoundError } from "@mesh/bus";
import { startNats, type NatsServer } from "@mesh/testkit";

// testkit does not depend on a NATS client, so these tests speak the text protocol directly.

const USER = "tester";
const PASSWORD = randomBytes(18).toString("hex");
// A plain users block (no accounts), which is safe; the mesh itself uses decentralized JWT auth.
const CONFIG = `authorization { users = [ { user: "${USER}", password: "${PASSWORD}" } ] }\n`;

/** Connects, sends `lines` after the INFO greeting, and returns everything said until `done` or 10 s. */
function talk(port: number, lines: string[], done: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port });
    let text = "";
    let greeted = false;
    const timer = setTimeout(() => socket.destroy(), 10_000);
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      if (!greeted && text.includes("\r\n")) {
        greeted = true;
        socket.write(lines.map((l) => `${l}\r\n`).join(""));
      }
      if (greeted && done(text)) socket.destroy();
    });
    socket.on("error", reject);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

function connectLine(user: string, pass: string): string {
  return `CONNECT ${JSON.stringify({ user, pass, verbose: false, pedantic: false, protocol: 1 })}`;
}

/** A JetStream API request over the text protocol; returns the JSON reply. */
async function jsApi(server: NatsServer, subject: string, body: object): Promise<Record<string, unknown>> {
  const payload = JSON.stringify(body);
  const text = await talk(
    server.port,
    [
      connectLine(USER, PASSWORD),
      "SUB _INBOX.reply 1",
      `PUB ${subject} _INBOX.reply ${Buffer.byteLength(payload)}`,
      payload,
    ],
    (t) => /MSG _INBOX\.reply 1 \d+\r\n.*\r\n/.test(t) || t.includes("-ERR"),
  );
  const match = /MSG _INBOX\.reply 1 \d+\r\n(.*)\r\n/.exec(text);
  assert.ok(match?.[1], `a reply to ${subject}, got: ${text}`);
  return JSON.parse(match[1]) as Record<string, unknown>;
}

void describe("startNats", () => {
  const servers: NatsServer[] = [];
  after(async () => {
    await Promise.all(servers.map((s) => s.stop()));
  });

  void it("starts a server on a loopback port with JetStream and the caller's authentication", async () => {
    const server = await startNats({ config: CONFIG });
    servers.push(server);
    assert.equal(server.host, "127.0.0.1");
    assert.notEqual(server.port, 4222);
    assert.equal(server.url, `nats://127.0.0.1:${server.port}`);

    const greeting = await talk(server.port, [], () => true);
    const info = JSON.parse(greeting.replace(/^INFO /, "").trim()) as Record<string, unknown>;
    assert.equal(info["auth_required"], true);
    assert.equal(info["jetstream"], true);

    const refused = await talk(server.port, [connectLine(USER, "wrong"), "PING"], (t) => t.includes("-ERR"));
    assert.match(refused, /-ERR 'Authorization Violation'/);
    const welcomed = await talk(server.port, [connectLine(USER, PASSWORD), "PING"], (t) =>
      t.includes("PONG"),
    );
    assert.match(welcomed, /PONG/);
  });

  void it("hands a config function the port and the JetStream store it will use", async () => {
    let seen: { port: number; storeDir: string } | undefined;
    const server = await startNats({
      config: (place) => {
        seen = { port: place.port, storeDir: place.storeDir };
        return CONFIG;
      },
    });
    servers.push(server);
    assert.deepEqual(seen, { port: server.port, storeDir: server.storeDir });
  });

  void it("restarts on the same port with the same JetStream store", async () => {
    const server = await startNats({ config: CONFIG });
    servers.push(server);
    const created = await jsApi(server, "$JS.API.STREAM.CREATE.KEPT", {
      name: "KEPT",
      subjects: ["kept.>"],
      storage: "file",
    });
    assert.equal(created["error"], undefined, JSON.stringify(created));
    const port = server.port;

    let downSeen = false;
    await server.restart({
      whileDown: async () => {
        downSeen = (await talk(port, [], () => true).catch(() => "refused")) === "refused";
      },
    });
    assert.ok(downSeen, "the server was down while whileDown ran");
    assert.equal(server.port, port);
    const info = await jsApi(server, "$JS.API.STREAM.INFO.KEPT", {});
    assert.equal(info["error"], undefined, JSON.stringify(info));
    assert.equal((info["config"] as { name: string }).name, "KEPT");
  });

  void it("reloads a changed config without a restart", async () => {
    const server = await startNats({ config: CONFIG });
    servers.push(server);
    const other = randomBytes(18).toString("hex");
    const refused = await talk(server.port, [connectLine("second", other), "PING"], (t) =>
      t.includes("-ERR"),
    );
    assert.match(refused, /Authorization Violation/);
    await server.reload(
      `authorization { users = [ { user: "${USER}", password: "${PASSWORD}" }, { user: "second", password: "${other}" } ] }\n`,
    );
    const deadline = Date.now() + 20_000;
    let reply = "";
    while (!reply.includes("PONG") && Date.now() < deadline) {
      reply = await talk(server.port, [connectLine("second", other), "PING"], (t) => /PONG|-ERR/.test(t));
      if (!reply.includes("PONG")) await new Promise((r) => setTimeout(r, 100));
    }
    assert.match(reply, /PONG/);
    const info = await jsApi(server, "$JS.API.INFO", {});
    assert.equal(info["error"], undefined, "JetStream still runs after the reload");
  });

  void it("stop is idempotent and restart after stop is refused", async () => {
    const server = await startNats({ config: CONFIG });
    await Promise.all([server.stop(), server.stop()]);
    await assert.rejects(server.restart(), /was stopped/);
  });

  void it("says which Debian package to install when nats-server is missing", async () => {
    const empty = await mkdtemp(join(tmpdir(), "mesh-no-nats-"));
    try {
      await assert.rejects(findNatsServer([empty]), (err: unknown) => {
        assert.ok(err instanceof NatsNotFoundError);
        assert.equal(err.message, "nats-server not found on PATH; install the Debian package nats-server");
        return true;
      });
    } finally {
      await rm(empty, { recursive: true, force: true });
    }
  });
});
