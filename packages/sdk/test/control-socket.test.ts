import assert from "node:assert/strict";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { spawnSync } from "node:child_process";
import { type Socket, connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { CleanupEntry, ProvisionerTools, RetireList, StatusReport } from "@mesh/sdk";
import type { ControlServer } from "@mesh/sdk/provider";
import { ToolError } from "@mesh/sdk";
import {
  AnswerTooLargeError,
  ControlAnswerError,
  ControlHungUpError,
  ControlSocketInUseError,
  ControlTimeoutError,
  MalformedAnswerError,
  NoProviderListeningError,
  callControl,
  serveControl,
} from "@mesh/sdk/provider";
import { ControlSocketPathError, MAX_REQUEST_BYTES } from "../src/control-socket.ts";
import { okLine, serveScriptedControl } from "@mesh/testkit";

const STATUS: StatusReport = {
  interface: "postgres-database",
  instance: "test",
  receives: "/tmp/contributions.json",
  lastPassAt: "2025-01-02T03:04:05.000Z",
  contributionsProblem: null,
  consumers: [
    { login: "app_one", state: "active", class: null, since: "2025-01-02T03:04:05.000Z", why: "created" },
  ],
};

/** A ProvisionerTools that records every call and answers from fixed values. */
function fakeTools(): ProvisionerTools & { calls: unknown[][] } {
  const calls: unknown[][] = [];
  const list: RetireList = {
    id: "abc123",
    logins: ["a", "b", "c", "d"],
    held: 5,
    reason: "more than 3 at once",
  };
  const cleanup: CleanupEntry[] = [{ login: "old_one", retiredAt: null, why: "unasked", derived: {} }];
  return {
    calls,
    status: () => (calls.push(["status"]), STATUS),
    retireList: () => (calls.push(["retireList"]), list),
    async retireApprove(id, who) {
      calls.push(["retireApprove", id, who]);
      if (id !== undefined && id !== "abc123")
        throw new ToolError("set-changed", `set ${id} is not the one waiting`);
      return { id: "abc123", retired: ["a", "b", "c", "d"] };
    },
    cleanupList: () => (calls.push(["cleanupList"]), cleanup),
    async cleanupDelete(login, who) {
      calls.push(["cleanupDelete", login, who]);
      if (login === "still_here") throw new ToolError("still-asked", `${login} is still asked for`);
      if (login === "broken") throw new Error("connection reset by the backend");
      return { login, freedBytes: 7_864_320 };
    },
  };
}

/** Sends raw bytes and collects every response line until the server ends the connection or `count` arrive. */
function rawExchange(path: string, payload: string | Buffer, count: number): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(path);
    let text = "";
    const lines = (): unknown[] =>
      text
        .split("\n")
        .filter((l) => l !== "")
        .map((l) => JSON.parse(l) as unknown);
    socket.on("connect", () => socket.write(payload));
    socket.on("data", (chunk: Buffer) => {
      text += chunk.toString("utf8");
      if (lines().length >= count) {
        socket.destroy();
        resolve(lines());
      }
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(lines()));
  });
}

describe("the control socket", () => {
  let dir: string;
  let tools: ReturnType<typeof fakeTools>;
  let server: ControlServer;
  let path: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-control-"));
    tools = fakeTools();
    path = join(dir, "provider.sock");
    server = await serveControl(tools, path);
  });
  after(async () => {
    await server.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("creates the socket file with mode 0600", async () => {
    const info = await stat(path);
    assert.ok(info.isSocket());
    assert.equal(info.mode & 0o777, 0o600);
  });

  it("leaves no private directory behind beside the socket", async () => {
    assert.deepEqual(await readdir(dir), ["provider.sock"]);
  });

  it("routes status, retire list and cleanup list to the tools", async () => {
    assert.deepEqual(await callControl(path, { tool: "status" }), STATUS);
    assert.equal((await callControl(path, { tool: "retire list" })).id, "abc123");
    assert.equal((await callControl(path, { tool: "cleanup list" }))[0]?.login, "old_one");
  });

  it("passes retire approve its id and who asked", async () => {
    const approved = await callControl(path, { tool: "retire approve", args: ["abc123"], who: "alice" });
    assert.deepEqual(approved, { id: "abc123", retired: ["a", "b", "c", "d"] });
    assert.deepEqual(tools.calls.at(-1), ["retireApprove", "abc123", "alice"]);
    await callControl(path, { tool: "retire approve", who: "bob" });
    assert.deepEqual(tools.calls.at(-1), ["retireApprove", undefined, "bob"]);
  });

  it("passes cleanup delete its login and who asked, and returns the bytes freed", async () => {
    const deleted = await callControl(path, { tool: "cleanup delete", args: ["old_one"], who: "alice" });
    assert.deepEqual(deleted, { login: "old_one", freedBytes: 7_864_320 });
    assert.deepEqual(tools.calls.at(-1), ["cleanupDelete", "old_one", "alice"]);
  });

  it("carries a ToolError's code and message back to the caller", async () => {
    await assert.rejects(
      callControl(path, { tool: "retire approve", args: ["zzz"] }),
      (err: unknown) => err instanceof ToolError && err.code === "set-changed" && /zzz/.test(err.message),
    );
    await assert.rejects(
      callControl(path, { tool: "cleanup delete", args: ["still_here"] }),
      (err: unknown) => err instanceof ToolError && err.code === "still-asked",
    );
  });

  it("answers any other error as backend-failed with its message", async () => {
    await assert.rejects(
      callControl(path, { tool: "cleanup delete", args: ["broken"] }),
      (err: unknown) =>
        err instanceof ToolError && err.code === "backend-failed" && /connection reset/.test(err.message),
    );
  });

  it("answers malformed requests with bad-request, several on one connection, and keeps serving", async () => {
    const bad = [
      "not json",
      "[1,2]",
      JSON.stringify({ tool: "drop everything" }),
      JSON.stringify({ tool: "status", args: [1] }),
      JSON.stringify({ tool: "status", args: ["extra"] }),
      JSON.stringify({ tool: "cleanup delete", args: [] }),
      JSON.stringify({ tool: "cleanup delete", args: ["Robert'); DROP ROLE x;--"] }),
      JSON.stringify({ tool: "status", who: "a\u0000b" }),
    ];
    const answers = await rawExchange(path, bad.map((l) => `${l}\n`).join(""), bad.length);
    assert.equal(answers.length, bad.length);
    for (const answer of answers) {
      assert.deepEqual((answer as { ok: boolean; error: { code: string } }).ok, false);
      assert.equal((answer as { error: { code: string } }).error.code, "bad-request");
    }
    assert.ok(
      !tools.calls.some(
        (c) => c[0] === "cleanupDelete" && c[1] !== "old_one" && c[1] !== "still_here" && c[1] !== "broken",
      ),
    );
    assert.equal((await callControl(path, { tool: "status" })).instance, "test");
  });

  it("answers an oversized request with bad-request and keeps serving others", async () => {
    const huge = Buffer.alloc(MAX_REQUEST_BYTES + 10, "a");
    const [answer] = await rawExchange(path, huge, 1);
    assert.equal((answer as { error: { code: string } }).error.code, "bad-request");
    assert.match((answer as { error: { message: string } }).error.message, /larger than/);
    assert.equal((await callControl(path, { tool: "status" })).instance, "test");
  });

  it("answers an asker that sends its request and closes its side", async () => {
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(path);
      let text = "";
      socket.on("connect", () => socket.end(`${JSON.stringify({ tool: "status" })}\n`));
      socket.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
      socket.on("end", () => resolve(text));
      socket.on("error", reject);
    });
    assert.equal((JSON.parse(answer) as { ok: boolean }).ok, true);
  });

  it("refuses to serve where another provider already answers", async () => {
    await assert.rejects(serveControl(fakeTools(), path), (err: unknown) => {
      assert.ok(err instanceof ControlSocketInUseError);
      assert.equal(err.path, path);
      assert.match(err.message, /another provider already answers/);
      return true;
    });
    assert.equal((await callControl(path, { tool: "status" })).instance, "test");
  });
});

describe("serving and closing a control socket", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-control-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("replaces a stale socket nobody answers on", async () => {
    const path = join(dir, "stale.sock");
    // A provider killed with SIGKILL leaves its socket file behind with nobody listening on it.
    const script = `require("net").createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, "SIGKILL"))`;
    spawnSync(process.execPath, ["-e", script]);
    assert.ok((await stat(path)).isSocket(), "the killed server's socket file is left behind");

    const server = await serveControl(fakeTools(), path);
    try {
      assert.equal((await callControl(path, { tool: "status" })).instance, "test");
      assert.equal((await stat(path)).mode & 0o777, 0o600);
    } finally {
      await server.close();
    }
  });

  it("removes the socket file on close, and a second close is harmless", async () => {
    const path = join(dir, "closing.sock");
    const server = await serveControl(fakeTools(), path);
    await server.close();
    await server.close();
    await assert.rejects(stat(path), { code: "ENOENT" });
  });

  it("does not remove a socket another provider has put in its place", async () => {
    const path = join(dir, "replaced.sock");
    const first = await serveControl(fakeTools(), path);
    await rm(path);
    const second = await serveControl(fakeTools(), path);
    try {
      await first.close();
      assert.ok((await stat(path)).isSocket());
      assert.equal((await callControl(path, { tool: "status" })).instance, "test");
    } finally {
      await second.close();
    }
  });

  it("refuses to replace a file that is not a socket", async () => {
    const path = join(dir, "precious.txt");
    await writeFile(path, "keep me");
    await assert.rejects(serveControl(fakeTools(), path), ControlSocketPathError);
    assert.equal((await stat(path)).isFile(), true);
  });

  it("says plainly when the socket's directory does not exist", async () => {
    const path = join(dir, "missing", "p.sock");
    await assert.rejects(serveControl(fakeTools(), path), (err: unknown) => {
      assert.ok(err instanceof ControlSocketPathError);
      assert.match(err.message, /directory does not exist/);
      return true;
    });
  });

  it("refuses a path too long for a Unix socket", async () => {
    const path = join(dir, `${"x".repeat(120)}.sock`);
    await assert.rejects(serveControl(fakeTools(), path), /at most 107/);
  });

  it("binds in place with mode 0600 when the private directory would make the path too long", async () => {
    const name = "y".repeat(107 - dir.length - 1);
    const path = join(dir, name);
    assert.equal(Buffer.byteLength(path), 107);
    const server = await serveControl(fakeTools(), path);
    try {
      assert.equal((await stat(path)).mode & 0o777, 0o600);
      assert.equal((await callControl(path, { tool: "status" })).instance, "test");
    } finally {
      await server.close();
    }
  });
});

describe("callControl", () => {
  it("says no provider is listening, and how to start one, when the socket is missing", async () => {
    const path = join(tmpdir(), `mesh-nothing-${process.pid}.sock`);
    await assert.rejects(callControl(path, { tool: "status" }), (err: unknown) => {
      assert.ok(err instanceof NoProviderListeningError);
      assert.match(
        err.message,
        new RegExp(`no provider is listening at ${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
      );
      assert.match(err.message, /mesh provider/);
      return true;
    });
  });

  it("says no provider is listening when a socket file is left but nobody answers on it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-control-"));
    try {
      const path = join(dir, "left.sock");
      const script = `require("net").createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, "SIGKILL"))`;
      spawnSync(process.execPath, ["-e", script]);
      await assert.rejects(callControl(path, { tool: "status" }), NoProviderListeningError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("callControl against a provider that does not answer as one", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-control-bad-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** Asks `status` of a socket that answers each request with `answer`, and returns what was thrown. */
  const thrownBy = async (
    name: string,
    answer: (socket: Socket) => void,
    options: { timeoutMs?: number; maxBytes?: number } = {},
  ): Promise<unknown> => {
    const server = await serveScriptedControl(join(dir, `${name}.sock`), (_line, socket) => answer(socket));
    try {
      await callControl(server.path, { tool: "status" }, options);
    } catch (err) {
      return err;
    } finally {
      await server.close();
    }
    assert.fail("it answered");
  };

  it("returns the result checked against the tool's schema, without the fields it does not know", async () => {
    const server = await serveScriptedControl(join(dir, "extra.sock"), (_line, socket) =>
      socket.end(
        okLine({ ...STATUS, extra: "dropped", consumers: [{ ...STATUS.consumers[0], colour: "red" }] }),
      ),
    );
    try {
      assert.deepEqual(await callControl(server.path, { tool: "status" }), STATUS);
    } finally {
      await server.close();
    }
  });

  it("names a result of the wrong shape by where it is wrong, quoting nothing of it", async () => {
    const err = await thrownBy("nulls", (s) =>
      s.end(
        okLine({ ...STATUS, consumers: [null, { ...STATUS.consumers[0], why: 7, login: "p4ssw0rd-like" }] }),
      ),
    );
    assert.ok(err instanceof MalformedAnswerError);
    assert.equal(err.fault, "malformed");
    assert.match(err.problem, /^consumers\[0\]: .*expected object.*; consumers\[1\]\.why: .*expected string/);
    assert.doesNotMatch(err.message, /p4ssw0rd/);
  });

  it("refuses garbage, a line that is not UTF-8 and a refusal without its message as malformed", async () => {
    for (const [name, line] of [
      ["garbage", "HTTP/1.1 400 Bad Request\r\n\r\n"],
      ["latin1", Buffer.from([0x7b, 0xe9, 0x7d, 0x0a])],
      ["refusal", '{"ok":false,"error":{"code":"nope"}}\n'],
    ] as const) {
      const err = await thrownBy(name, (s) => s.end(line));
      assert.ok(err instanceof MalformedAnswerError, `${name}: ${String(err)}`);
    }
  });

  it("stops reading at the bound: an answer larger than it, or one that never ends, is too large", async () => {
    const huge = await thrownBy("huge", (s) => s.end(`${"x".repeat(300_000)}\n`), { maxBytes: 100_000 });
    assert.ok(huge instanceof AnswerTooLargeError);
    assert.equal(huge.maxBytes, 100_000);
    const endless = await thrownBy("endless", (s) => {
      const pump = (): void => {
        while (!s.destroyed && s.write(Buffer.alloc(16 * 1024, 0x61)));
        if (!s.destroyed) s.once("drain", pump);
      };
      pump();
    });
    assert.ok(endless instanceof AnswerTooLargeError, String(endless));
  });

  it("gives up on an answer that does not come whole in time", async () => {
    const silent = await thrownBy("silent", () => undefined, { timeoutMs: 200 });
    assert.ok(silent instanceof ControlTimeoutError);
    assert.equal(silent.fault, "slow");
    const trickle = await thrownBy(
      "trickle",
      (s) => {
        const timer = setInterval(() => (s.destroyed ? clearInterval(timer) : s.write("{")), 20);
      },
      { timeoutMs: 300 },
    );
    assert.ok(trickle instanceof ControlTimeoutError);
  });

  it("says a provider hung up, or half-closed its end, before a whole answer", async () => {
    const closed = await thrownBy("closed", (s) => s.destroy());
    assert.ok(closed instanceof ControlHungUpError);
    assert.equal(closed.received, 0);
    const half = await thrownBy("half", (s) => s.end('{"ok":true,"res'));
    assert.ok(half instanceof ControlHungUpError);
    assert.equal(half.received, 15);
    assert.ok(half instanceof ControlAnswerError);
  });
});

/** Sends `payload` and parses the first `count` whole lines answered (a big line comes in many chunks). */
function wholeLines(path: string, payload: string, count: number): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    const chunks: Buffer[] = [];
    let newlines = 0;
    socket.on("connect", () => socket.write(payload));
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      for (const byte of chunk) if (byte === 0x0a) newlines++;
      if (newlines < count) return;
      socket.destroy();
      const lines = Buffer.concat(chunks).toString("utf8").split("\n").slice(0, count);
      resolve(lines.map((l) => JSON.parse(l) as unknown));
    });
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`the connection closed after ${newlines} of ${count} lines`)));
  });
}

describe("the control socket's big answers", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "mesh-control-big-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("answers a big frozen status whole each time, several on one connection", async () => {
    // Some 3 MB: more than a socket buffer takes at once, so most of it waits in the socket.
    const consumers = Array.from({ length: 20_000 }, (_, i) =>
      Object.freeze({
        login: `app_${i}`,
        state: "active" as const,
        class: null,
        since: "2025-01-02T03:04:05.000Z",
        why: "held as asked",
      }),
    );
    const big: StatusReport = Object.freeze({ ...STATUS, consumers: Object.freeze(consumers) });
    const tools = { ...fakeTools(), status: () => big };
    const server = await serveControl(tools, join(dir, "big.sock"));
    try {
      const ask = `${JSON.stringify({ tool: "status", args: [], who: "t" })}\n`;
      const answers = await wholeLines(server.path, ask + ask, 2);
      assert.equal(answers.length, 2);
      for (const a of answers) assert.deepEqual(a, { ok: true, result: big });
      // More than callControl reads unless told: the asker says how much it takes.
      await assert.rejects(callControl(server.path, { tool: "status" }), AnswerTooLargeError);
      assert.deepEqual(
        await callControl(server.path, { tool: "status" }, { maxBytes: 8 * 1024 * 1024 }),
        big,
      );
      assert.equal((await callControl(server.path, { tool: "retire list" })).id, "abc123");
    } finally {
      await server.close();
    }
  });

  it("answers what a result that is not frozen holds at each ask, not what it held before", async () => {
    const status = { ...STATUS, consumers: [...STATUS.consumers] };
    const tools = { ...fakeTools(), status: () => status };
    const server = await serveControl(tools, join(dir, "changing.sock"));
    try {
      assert.equal((await callControl(server.path, { tool: "status" })).consumers.length, 1);
      status.consumers.push({ ...STATUS.consumers[0]!, login: "app_two" });
      assert.deepEqual(
        (await callControl(server.path, { tool: "status" })).consumers.map((c) => c.login),
        ["app_one", "app_two"],
      );
    } finally {
      await server.close();
    }
  });
});
