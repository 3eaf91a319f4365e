// The redis provider as the conformance kit sees it: a private Redis with an ACL file, and the ways to
// look at it from outside the adapter (as the consumer, as the admin, as someone changing things by hand).
import { readFile, writeFile } from "node:fs/promises";
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import type { Provision } from "@mesh/sdk";
import { providerTarget, startRedis, type ConformanceTarget, type RedisServer } from "@mesh/testkit";
import { provider } from "../src/index.ts";

/** Where the key `writeData` stores its marker: inside the consumer's own namespace. */
export function dataKey(login: string): string {
  return `${login}:conformance`;
}

/**
 * Connects to `server` as `username` with `password`; rejects (WRONGPASS) when the server refuses.
 * The client never reconnects, so a connection the server ends stays ended.
 */
export async function connectAs(server: RedisServer, username: string, password: string): Promise<Redis> {
  const client = new Redis({
    host: server.host,
    port: server.port,
    username,
    password,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableReadyCheck: false,
  });
  // ioredis reports a refused AUTH as an 'error' event and rejects connect() only with "Connection is
  // closed": keep the first so a caller sees why.
  let refused: Error | undefined;
  client.on("error", (err: Error) => (refused ??= err));
  try {
    await client.connect();
    // Without the ready check connect() resolves before AUTH is answered: a PING waits for it.
    await client.ping();
  } catch (err) {
    client.disconnect();
    throw refused ?? err;
  }
  return client;
}

/**
 * Whether `username` logs in with `password`: false when Redis refuses it (WRONGPASS, NOAUTH).
 * @throws anything else, so a test never reads a server that is away as a refused login.
 */
export async function canLoginAs(server: RedisServer, username: string, password: string): Promise<boolean> {
  try {
    (await connectAs(server, username, password)).disconnect();
    return true;
  } catch (err) {
    if (err instanceof Error && /WRONGPASS|NOAUTH/.test(err.message)) return false;
    throw err;
  }
}

/** The admin's password, from the server's admin URL. */
export function adminPasswordOf(server: RedisServer): string {
  return decodeURIComponent(new URL(server.adminUrl).password);
}

/** Connects as the server's admin. */
export function connectAdmin(server: RedisServer): Promise<Redis> {
  return connectAs(server, "admin", adminPasswordOf(server));
}

/** Runs `fn` with a consumer connection and closes it after. */
async function asConsumer<T>(server: RedisServer, p: Provision, fn: (c: Redis) => Promise<T>): Promise<T> {
  const client = await connectAs(server, p.as, p.password);
  try {
    return await fn(client);
  } finally {
    client.disconnect();
  }
}

async function allowed(attempt: Promise<unknown>): Promise<boolean> {
  try {
    await attempt;
    return true;
  } catch (err) {
    if (err instanceof Error && /^NOPERM\b/.test(err.message)) return false;
    throw err;
  }
}

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

/** This provider's conformance target. */
export const target: ConformanceTarget = providerTarget(provider, async () => {
  const server = await startRedis({ aclFile: true });
  const admin = await connectAdmin(server);
  let resume: (() => void) | undefined;
  let restarting: Promise<void> | undefined;
  return {
    adminUrl: server.adminUrl,
    canLogin: (p, password = p.password) => canLoginAs(server, p.as, password),
    async writeData(p, marker) {
      await asConsumer(server, p, (c) => c.set(dataKey(p.as), marker));
    },
    async readData(p) {
      return (await admin.get(dataKey(p.as))) ?? undefined;
    },
    async canReachOther(p, other) {
      return asConsumer(server, p, async (c) => {
        const reached = [
          await allowed(c.get(dataKey(other.as))),
          await allowed(c.set(`${other.as}:intruder`, "1")),
          await allowed(c.publish(`${other.as}:events`, "1")),
          // The marks are ACL users: reading or changing them is an admin command.
          await allowed(c.call("ACL", "LIST")),
          await allowed(c.call("ACL", "GETUSER", other.as)),
          await allowed(c.call("ACL", "SETUSER", other.as, "on", "nopass")),
        ];
        return reached.some((r) => r);
      });
    },
    async changePassword(as, password) {
      await admin.call("ACL", "SETUSER", as, "resetpass", `#${sha256(password)}`);
    },
    async dropLogin(as) {
      await admin.call("ACL", "DELUSER", as);
    },
    async createForeign(as, password) {
      await admin.call("ACL", "SETUSER", as, "on", `#${sha256(password)}`, `~${as}:*`, `&${as}:*`, "+@all");
      await admin.set(`${as}:foreign`, "made by hand");
    },
    // The provider takes no values: whatever a consumer sends is never put into a command.
    hostileValues: [
      { prefix: "*" },
      { keys: "~* &* +@all" },
      { name: "x\r\nFLUSHALL\r\n" },
      { name: "nopass on allkeys" },
    ],
    plainValues: {},
    // Down and back: the server stays stopped from halt() until resume().
    halt() {
      let stopped!: () => void;
      const down = new Promise<void>((resolve) => (stopped = resolve));
      const back = new Promise<void>((resolve) => (resume = resolve));
      restarting = server.restart({ whileDown: () => (stopped(), back) });
      return down;
    },
    async resume() {
      resume?.();
      await restarting;
    },
    // Restarted and emptied: every user but the admin is gone from the ACL file, as from a Redis
    // that keeps its users nowhere.
    async restartEmpty() {
      const aclFile = server.aclFile;
      if (aclFile === undefined) throw new Error("the conformance Redis runs with an ACL file");
      await server.restart({
        async whileDown() {
          const lines = (await readFile(aclFile, "utf8")).split("\n");
          await writeFile(aclFile, lines.filter((l) => /^user (admin|default) /.test(l)).join("\n"));
        },
      });
    },
    async stop() {
      admin.disconnect();
      await server.stop();
    },
  };
});
