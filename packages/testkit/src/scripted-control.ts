// A control socket that answers whatever a test scripts: a malformed line, a huge one, half a line
// and a hang-up, or nothing at all. For testing the side that asks a provider, which must survive a
// provider that lies; a real provider's socket is `serveControl` in @mesh/sdk/provider.
import { chmod, unlink } from "node:fs/promises";
import { createServer, type Socket } from "node:net";

/** A scripted control socket at work. */
export interface ScriptedControl {
  readonly path: string;
  /** How many request lines it has read so far. */
  readonly asked: number;
  /** Stops listening, ends every open connection and removes the socket file. */
  close(): Promise<void>;
}

/**
 * Serves a Unix socket at `path` (mode 0600, replacing what is there) that hands each request line
 * to `answer` with the connection: `answer` writes what it likes, ends or destroys the connection,
 * or leaves it open for ever (closed by `close()`).
 */
export async function serveScriptedControl(
  path: string,
  answer: (line: string, socket: Socket) => void,
): Promise<ScriptedControl> {
  const sockets = new Set<Socket>();
  let asked = 0;
  const server = createServer({ allowHalfOpen: true }, (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined);
    let buffered = "";
    socket.on("data", (chunk: Buffer) => {
      buffered += chunk.toString("utf8");
      let newline: number;
      while ((newline = buffered.indexOf("\n")) !== -1) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        asked += 1;
        answer(line, socket);
      }
    });
  });
  await unlink(path).catch(() => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => {
      server.off("error", reject);
      resolve();
    });
  });
  await chmod(path, 0o600);
  return {
    path,
    get asked() {
      return asked;
    },
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      await closed;
      await unlink(path).catch(() => undefined);
    },
  };
}

/** An answer line for a scripted socket: `{"ok":true,"result":…}` and a newline. */
export function okLine(result: unknown): string {
  return `${JSON.stringify({ ok: true, result })}\n`;
}
