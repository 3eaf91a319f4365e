// The redis-namespace adapter: one ACL user per consumer, named exactly as the mesh derived it, with
// the minted password, confined to the keys and channels under `<login>:`.
//
// Where the mark lives: beside each consumer's ACL user this adapter keeps a second, disabled ACL user
// `_mesh:<instance>:<login>` with no password and no commands, whose single key pattern carries the
// mark (state, when and why retired, what was derived) as base64url JSON. The mark thus lives exactly
// as long as the ACL user it describes: both are saved by ACL SAVE and both are lost together on a
// Redis without an ACL file, whereas a mark kept as a key would outlive or predecease the users
// depending on how the server persists data, leaving users that look made by someone else. No
// consumer can read it (ACL GETUSER/LIST are admin commands) and no login can collide with the name.

import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { consoleLogger, findInChain, isNetworkError, NotMadeHereError, NotRetiredError } from "@mesh/sdk";
import { markEntry, parseJsonOrUndefined, readMark, retiredMark, type ConsumerMark } from "@mesh/sdk";
import type { Adapter, Deleted, FailureClass, InventoryEntry, Logger, Provision, Retired } from "@mesh/sdk";
import type { RotationMark } from "@mesh/sdk";
import {
  CONSUMER_COMMAND_RULES,
  consumerCommandRules,
  resolveRedisConfig,
  type RedisAdapterConfig,
  type ResolvedRedisConfig,
} from "./config.ts";

/** One queued batch of commands (a pipeline or a MULTI), as the adapter uses it. */
export interface RedisBatch {
  call(command: string, ...args: (string | number)[]): RedisBatch;
  exec(): Promise<[error: Error | null, result: unknown][] | null>;
}

/** The slice of an ioredis client the adapter uses; a fake or a counting wrapper can stand in. */
export interface RedisClient {
  readonly status: string;
  connect(): Promise<void>;
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
  pipeline(): RedisBatch;
  multi(): RedisBatch;
  duplicate(): RedisClient;
  quit(): Promise<unknown>;
  disconnect(): void;
  on(event: "error", listener: (err: Error) => void): unknown;
  on(event: "ready" | "end", listener: () => void): unknown;
}

/** The server cannot be talked to right now: it is down, or it refused the admin's login. */
export class RedisConnectionError extends Error {
  override name = "RedisConnectionError";
  /** Whether the server answered but refused the admin's user or password. */
  readonly loginRefused: boolean;
  constructor(
    readonly endpoint: string,
    options: { cause: unknown },
  ) {
    const why = messageOf(options.cause);
    const loginRefused = /\b(WRONGPASS|NOAUTH)\b/.test(why);
    super(
      loginRefused
        ? `Redis at ${endpoint} refused the admin's login (${why}); check the user and password in the admin URL`
        : `Redis at ${endpoint} cannot be reached (${why}); calls fail until it answers again, and the ` +
            `connection is retried in the background`,
      options,
    );
    this.loginRefused = loginRefused;
  }
}

/** A command of a change failed; the message says which step, the cause says what Redis answered. */
export class RedisCommandError extends Error {
  override name = "RedisCommandError";
  constructor(
    readonly login: string,
    readonly step: string,
    options: { cause: unknown },
  ) {
    super(
      `Redis refused to ${step} for consumer ${JSON.stringify(login)}: ${messageOf(options.cause)}`,
      options,
    );
  }
}

/** An ACL user as ACL GETUSER or ACL LIST describes it, in one shape for both. */
interface AclUser {
  readonly enabled: boolean;
  readonly nopass: boolean;
  readonly passwords: readonly string[];
  readonly keys: readonly string[];
  readonly channels: readonly string[];
  /** The command rules, sorted: Redis writes them in an order that is not even stable between runs. */
  readonly commands: readonly string[];
  readonly selectors: number;
  /** A rule this parser does not know: never taken as held. */
  readonly unknown: boolean;
}

/** A transaction `transaction` queued, with the promise its `exec` answers. */
interface QueuedTransaction {
  readonly commands: readonly (readonly (string | number)[])[];
  readonly resolve: (replies: [error: Error | null, result: unknown][] | null) => void;
  readonly reject: (err: unknown) => void;
}

/** What is learnt from the server once, on the first call. */
interface ServerFacts {
  /** Whether the server has an ACL file, so each change is followed by ACL SAVE. */
  readonly savesAcl: boolean;
  /** CONSUMER_COMMAND_RULES as this server writes them back (it drops redundant rules), sorted. */
  readonly commands: readonly string[];
  /** The same with MONITORING_COMMAND_RULES, for a consumer that asked for `monitoring`. */
  readonly monitoringCommands: readonly string[];
}

const MARK_PREFIX = "_mesh";
const PROBE_PREFIX = "_mesh-probe";
const SCAN_COUNT = 500;
/**
 * The longest the inventory's ACL LIST is taken at its word that a user does not exist (it is only
 * trusted until the end of the pass that read it, see `listedAbsent`).
 */
const LISTING_TRUSTED_MS = 10_000;

/**
 * Makes the `redis-namespace` adapter for one Redis server. Connects lazily; a server that is down
 * makes calls fail at once (class `unreachable`) and is reconnected to in the background.
 * @throws AdminSettingError when the admin URL or the instance name cannot be used.
 */
export function createRedisAdapter(config: RedisAdapterConfig): RedisNamespaceAdapter {
  const resolved = resolveRedisConfig(config);
  const client = new Redis(resolved.admin.text, {
    lazyConnect: true,
    // Fail fast while the server is away instead of queueing calls that would hang the harness's pass;
    // the harness retries, and ioredis reconnects in the background.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: resolved.connectTimeoutMs,
    commandTimeout: resolved.commandTimeoutMs,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2_000),
  });
  return new RedisNamespaceAdapter(client, resolved, config.logger ?? consoleLogger);
}

/** The `redis-namespace` adapter over a client the caller made. `close()` closes that client. */
export class RedisNamespaceAdapter implements Adapter {
  /** One ACL LIST answers for every consumer, so a verify pass asks once however many there are. */
  readonly verifyBatch = Infinity;
  private facts: Promise<ServerFacts> | undefined;
  /** How many times the connection has become ready: a change after a new one may be on a restarted server. */
  private readies = 0;
  /**
   * The connection (its count of readies) on which the first change not yet saved to the ACL file
   * was made; undefined when none is waiting.
   */
  private unsavedSince: number | undefined;
  /** A process starting cannot know whether the one before it saved: its first `afterChanges` saves. */
  private savedOnce = false;
  private connecting: Promise<void> | undefined;
  private warnedNoAclFile = false;
  /** Why the connection last failed; cleared when it is ready again. */
  private lastError: Error | undefined;
  /**
   * Every ACL user the inventory's ACL LIST showed, when it was read and on which connection, with
   * the logins created since added; dropped at the end of the pass (`afterChanges`). A login it does
   * not show is absent, so its create needs no read first (see `listedAbsent`).
   */
  private listing: { readonly names: Set<string>; readonly at: number; readonly readies: number } | undefined;
  /** Transactions waiting to leave together at the next `setImmediate` (see `transaction`). */
  private outgoing: QueuedTransaction[] | undefined;

  constructor(
    private readonly client: RedisClient,
    private readonly config: ResolvedRedisConfig,
    private readonly logger: Logger,
  ) {
    // An unhandled 'error' event would end the process; a connection error is said once per outage.
    client.on("error", (err) => {
      const first = this.lastError === undefined;
      this.lastError = err;
      if (first) this.logger.warn(new RedisConnectionError(config.admin.endpoint, { cause: err }).message);
    });
    client.on("ready", () => {
      this.readies++;
      if (this.lastError === undefined) return;
      this.lastError = undefined;
      this.logger.info(`Redis at ${config.admin.endpoint} answers again`);
    });
  }

  /**
   * Creates or repairs the consumer's ACL user, re-enabling a retired one and clearing its mark;
   * writes nothing when all is already in place. The change is live at once; it reaches the ACL file
   * with the pass's `afterChanges`, one ACL SAVE for all of the pass's creates.
   * @throws NotMadeHereError when a user of that name exists without this instance's mark (one made
   * after the adapter looked is put back as it was, see `writeConsumer`).
   */
  async create(p: Provision, signal: AbortSignal): Promise<void> {
    const login = p.as;
    const facts = await this.serverFacts();
    signal.throwIfAborted();
    // A login the last ACL LIST did not show has no user to be in place: it is written at once, in
    // one round trip, whose transaction still finds one someone made since. Any other is read first.
    if (!this.listedAbsent(login)) {
      const [user, mark] = await this.readUser(login);
      if (user !== undefined && mark === undefined) throw this.notMadeHere(login);
      // Nothing to write when all is in place: no ACL change, and no ACL SAVE rewriting the file.
      const inPlace =
        isHeld(user, mark, login, [p.password], commandsOf(facts, p)) &&
        JSON.stringify(mark?.derived) === JSON.stringify(p.derived) &&
        mark?.minted === p.minted;
      if (inPlace) return;
      signal.throwIfAborted();
    }
    // From now on the user exists (or may): a later create reads it first.
    this.listing?.names.add(login);
    await this.writeConsumer(
      login,
      markRules({ state: "active", derived: p.derived, minted: p.minted }),
      consumerRules(login, [p.password], monitors(p)),
      "write the consumer's ACL user and mark",
    );
  }

  /**
   * Makes the new password valid beside the one being retired (a user holds several), with
   * everything else as `create` makes it, and records the rotation in the mark, in one transaction:
   * nobody sees the mark say `drain` before both passwords log in.
   * @throws NotMadeHereError when a user of that name exists without this instance's mark.
   */
  async overlap(
    p: Provision & { readonly retiring: string },
    rotation: RotationMark,
    signal: AbortSignal,
  ): Promise<void> {
    const login = p.as;
    const facts = await this.serverFacts();
    signal.throwIfAborted();
    const [user, mark] = await this.readUser(login);
    if (user !== undefined && mark === undefined) throw this.notMadeHere(login);
    const inPlace =
      isHeld(user, mark, login, [p.password, p.retiring], commandsOf(facts, p)) &&
      JSON.stringify(mark?.derived) === JSON.stringify(p.derived) &&
      JSON.stringify(mark?.rotation) === JSON.stringify(rotation) &&
      mark?.minted === p.minted;
    if (inPlace) return;
    signal.throwIfAborted();
    await this.writeConsumer(
      login,
      markRules({ state: "active", derived: p.derived, rotation, minted: p.minted }),
      consumerRules(login, [p.password, p.retiring], monitors(p)),
      "add the new password beside the old one and mark the rotation",
    );
  }

  /**
   * Saves the pass's creates to the ACL file with one ACL SAVE (nothing to do when the server has
   * no ACL file or nothing changed). Retirements and deletions are saved as they are made.
   * @throws RedisCommandError when the save fails, or when the connection was lost since the first
   * change it saves: the server may have restarted from its ACL file without those changes, so the
   * harness applies them again.
   */
  async afterChanges(): Promise<void> {
    this.listing = undefined;
    if (this.unsavedSince === undefined && this.savedOnce) return;
    const facts = await this.serverFacts();
    const since = this.unsavedSince;
    await this.save(facts, "(this pass's consumers)");
    this.unsavedSince = undefined;
    this.savedOnce = true;
    if (since !== undefined && since !== this.readies) {
      throw new RedisCommandError(
        "(this pass's consumers)",
        "keep this pass's changes (the connection to Redis was lost after they were made, and a server " +
          "that restarted from its ACL file has lost them)",
        { cause: new Error(`connected ${this.readies - since} more time(s) since the first change`) },
      );
    }
  }

  /**
   * Whether the consumer's ACL user is on, with exactly its password (both, while a rotation
   * overlaps), patterns, commands and an active mark (recording no rotation, unless one overlaps).
   */
  async holds(p: Provision, signal: AbortSignal): Promise<boolean> {
    const facts = await this.serverFacts();
    signal.throwIfAborted();
    const [user, mark] = await this.readUser(p.as);
    return isHeld(user, mark, p.as, passwordsOf(p), commandsOf(facts, p));
  }

  /** `holds` for many consumers with one ACL LIST, however many they are. */
  async holdsMany(ps: readonly Provision[], signal: AbortSignal): Promise<Map<string, boolean | Error>> {
    const facts = await this.serverFacts();
    signal.throwIfAborted();
    const users = await this.listUsers();
    const answers = new Map<string, boolean | Error>();
    for (const p of ps) {
      const markUser = users.get(this.markName(p.as));
      const mark = markUser === undefined ? undefined : decodeMark(markUser);
      answers.set(p.as, isHeld(users.get(p.as), mark, p.as, passwordsOf(p), commandsOf(facts, p)));
    }
    return answers;
  }

  /**
   * Which of these logins have a connection open now, from one CLIENT LIST (its `user=` field) for
   * all of them: sampled at each verify pass. Read-only. The adapter itself never logs in as a
   * consumer, so nothing of its own is counted.
   */
  async seenConnected(logins: readonly string[], signal: AbortSignal): Promise<ReadonlySet<string>> {
    await this.connected();
    signal.throwIfAborted();
    const asked = new Set(logins);
    const seen = new Set<string>();
    const reply = await this.client.call("CLIENT", "LIST");
    const text = Buffer.isBuffer(reply) ? reply.toString("utf8") : typeof reply === "string" ? reply : "";
    for (const line of text.split("\n")) {
      const user = / user=(\S+)/.exec(` ${line}`)?.[1];
      if (user !== undefined && asked.has(user)) seen.add(user);
    }
    return seen;
  }

  /** Turns the consumer's ACL user off, ends its connections and marks it retired. Keys stay. */
  async retire(login: string, derived: Retired["derived"], why: string, at: Date): Promise<void> {
    const facts = await this.serverFacts();
    const [user, mark] = await this.readUser(login);
    if (user !== undefined && mark === undefined) throw this.notMadeHere(login);
    // With no user left (a Redis restarted without an ACL file) the mark is still written: it is
    // what lets a person find and delete the keys the consumer left behind.
    const retired = retiredMark(derived, mark, why, at);
    const batch = this.client.multi().call("ACL", "SETUSER", this.markName(login), ...markRules(retired));
    if (user !== undefined) batch.call("ACL", "SETUSER", login, "off");
    await execChecked(batch, login, "turn the consumer's ACL user off and mark it retired");
    if (user !== undefined) {
      // Turning a user off does not end the connections it already has.
      try {
        await this.client.call("CLIENT", "KILL", "USER", login);
      } catch (err) {
        if (!/no such user/i.test(messageOf(err)))
          throw new RedisCommandError(login, "end its connections", { cause: err });
      }
    }
    await this.save(facts, login);
  }

  /**
   * Ends every connection of `login` (`CLIENT KILL USER`), after `mesh rotate --now` replaced its
   * password. Counts those ended.
   * @throws NotMadeHereError for a user this instance did not make; RedisCommandError.
   */
  async endSessions(login: string): Promise<number> {
    const [user, mark] = await this.readUser(login);
    if (user === undefined) return 0;
    if (mark === undefined) throw this.notMadeHere(login);
    try {
      return Number(await this.client.call("CLIENT", "KILL", "USER", login));
    } catch (err) {
      if (/no such user/i.test(messageOf(err))) return 0;
      throw new RedisCommandError(login, "end its connections", { cause: err });
    }
  }

  /** The consumers this instance made, read from its marks with one ACL LIST. */
  async inventory(): Promise<InventoryEntry[]> {
    await this.serverFacts();
    const prefix = `${MARK_PREFIX}:${this.config.instance}:`;
    const entries: InventoryEntry[] = [];
    // The harness reads the inventory at the start of its first pass, then creates what is missing.
    for (const [name, user] of await this.listUsers(true)) {
      if (!name.startsWith(prefix)) continue;
      const login = name.slice(prefix.length);
      const mark = decodeMark(user);
      if (mark === undefined) {
        this.logger.warn(
          `the mark ${name} on Redis at ${this.config.admin.endpoint} cannot be read; ${login} is left out`,
        );
        continue;
      }
      entries.push(markEntry(login, mark));
    }
    return entries.sort((a, b) => a.as.localeCompare(b.as));
  }

  /**
   * Deletes a retired consumer: its keys in every database (scanned, never KEYS; unlinked in
   * batches, never blocking), then its ACL user and mark. Reports the memory its keys used.
   * @throws NotRetiredError when its ACL user was turned on again, having deleted nothing.
   */
  async delete(r: Retired): Promise<Deleted> {
    const login = r.as;
    const facts = await this.serverFacts();
    const [user] = await this.readUser(login);
    if (user?.enabled === true) throw new NotRetiredError(login, "its ACL user was turned on again");
    const freedBytes = await this.unlinkKeys(login);
    const batch = this.client.multi();
    if (user !== undefined) batch.call("ACL", "DELUSER", login);
    batch.call("ACL", "DELUSER", this.markName(login));
    await execChecked(batch, login, "delete the consumer's ACL user and mark");
    await this.save(facts, login);
    return { freedBytes };
  }

  /** Whether an ACL user of this name exists at all, made by anyone. */
  async exists(login: string): Promise<boolean> {
    await this.connected();
    return (await this.client.call("ACL", "GETUSER", login)) !== null;
  }

  /** Classes Redis's own answers and this adapter's errors. */
  classify(err: unknown): FailureClass | undefined {
    return classifyRedisError(err);
  }

  /** Closes the connection. */
  async close(): Promise<void> {
    if (this.client.status === "wait" || this.client.status === "end") {
      this.client.disconnect();
      return;
    }
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }

  private notMadeHere(login: string): NotMadeHereError {
    return new NotMadeHereError(login, this.config.instance, {
      resource: `Redis ACL user ${JSON.stringify(login)}`,
      fix: "give the consumer another name, or remove the user by hand (ACL DELUSER) if nobody needs it",
    });
  }

  private markName(login: string): string {
    return `${MARK_PREFIX}:${this.config.instance}:${login}`;
  }

  /**
   * Connects on first use. While the connection is down, fails at once with why it is down rather
   * than with ioredis's "Stream isn't writeable", which would not tell a wrong admin password from a
   * server that is gone.
   */
  private async connected(): Promise<void> {
    if (this.client.status === "wait") {
      this.connecting ??= this.client.connect().finally(() => {
        this.connecting = undefined;
      });
    }
    if (this.connecting !== undefined) {
      try {
        await this.connecting;
      } catch (err) {
        throw new RedisConnectionError(this.config.admin.endpoint, { cause: this.lastError ?? err });
      }
    }
    if (this.client.status !== "ready" && this.lastError !== undefined) {
      throw new RedisConnectionError(this.config.admin.endpoint, { cause: this.lastError });
    }
  }

  private serverFacts(): Promise<ServerFacts> {
    this.facts ??= this.learnServerFacts().catch((err: unknown) => {
      this.facts = undefined; // asked again on the next call: the server may be back
      throw err;
    });
    return this.facts;
  }

  private async learnServerFacts(): Promise<ServerFacts> {
    await this.connected();
    let aclFile: string | undefined;
    let unknownWhy: string | undefined;
    try {
      const reply = await this.client.call("CONFIG", "GET", "aclfile");
      aclFile = Array.isArray(reply) && typeof reply[1] === "string" ? reply[1] : "";
    } catch (err) {
      if (isConnectionError(err)) throw err;
      unknownWhy = messageOf(err);
    }
    if (aclFile === undefined || aclFile === "") this.warnNoAclFile(unknownWhy);

    // Redis writes a user's command rules back in its own order, dropping what another rule already
    // covers, and versions differ in which it drops. A throwaway user, made and removed in one transaction so
    // nobody ever sees it, shows this server's form of the rules every consumer gets.
    const probe = `${PROBE_PREFIX}:${this.config.instance}`;
    const replies = await execChecked(
      this.client
        .multi()
        .call("ACL", "SETUSER", probe, "reset", ...CONSUMER_COMMAND_RULES)
        .call("ACL", "GETUSER", probe)
        .call("ACL", "SETUSER", probe, "reset", ...consumerCommandRules(true))
        .call("ACL", "GETUSER", probe)
        .call("ACL", "DELUSER", probe),
      probe,
      "try the consumers' command rules on a throwaway user",
    );
    const described = fromGetUser(replies[1]);
    const monitoring = fromGetUser(replies[3]);
    if (described === undefined || monitoring === undefined)
      throw new Error(`Redis at ${this.config.admin.endpoint} did not describe ACL user ${probe}`);
    return {
      savesAcl: aclFile !== undefined && aclFile !== "",
      commands: described.commands,
      monitoringCommands: monitoring.commands,
    };
  }

  private warnNoAclFile(unknownWhy: string | undefined): void {
    if (this.warnedNoAclFile) return;
    this.warnedNoAclFile = true;
    const seen =
      unknownWhy === undefined
        ? `Redis at ${this.config.admin.endpoint} has no ACL file (CONFIG GET aclfile is empty)`
        : `cannot tell whether Redis at ${this.config.admin.endpoint} has an ACL file (CONFIG GET aclfile: ${unknownWhy}); assuming not`;
    this.logger.warn(
      `${seen}: the consumers' ACL users and marks live only in memory and are lost when Redis ` +
        `restarts (active consumers are made again on the next check; retired ones are forgotten). ` +
        `To keep them, set \`aclfile /etc/redis/users.acl\` in redis.conf (create the file, owned by ` +
        `the redis user) and restart Redis; this provider then saves every change with ACL SAVE.`,
    );
  }

  private async save(facts: ServerFacts, login: string): Promise<void> {
    if (!facts.savesAcl) return;
    try {
      await this.client.call("ACL", "SAVE");
    } catch (err) {
      throw new RedisCommandError(
        login,
        "save the ACL file (the change is live but would not survive a restart)",
        {
          cause: err,
        },
      );
    }
  }

  /**
   * Writes the consumer's mark and ACL user in one transaction, so nobody sees one without the
   * other, which first reads both as they were. Redis has no conditional ACL write (ACL SETUSER
   * creates or changes, takes no NX, cannot run in a script, and WATCH sees keys, not users), so a
   * user someone made after the adapter looked (its read, or the inventory's ACL LIST) cannot be
   * spared the write; but the transaction tells exactly, not a round trip late, whether it was there
   * and without this instance's mark. Such a user is put back at once as it was (its passwords as
   * hashes, flags, patterns, commands, selectors) and its mark as it was, and the create refused.
   * What cannot be put back: for one round trip the user had this consumer's rules, and Redis ended
   * its Pub/Sub connections subscribed outside `&<login>:*`.
   * @throws NotMadeHereError when it had to put such a user back; RedisCommandError.
   */
  private async writeConsumer(
    login: string,
    markRules: readonly string[],
    userRules: readonly string[],
    step: string,
  ): Promise<void> {
    const markName = this.markName(login);
    this.unsavedSince ??= this.readies;
    const [userBefore, markBefore] = await execChecked(
      this.transaction()
        .call("ACL", "GETUSER", login)
        .call("ACL", "GETUSER", markName)
        .call("ACL", "SETUSER", markName, ...markRules)
        .call("ACL", "SETUSER", login, ...userRules),
      login,
      step,
    );
    const markUser = fromGetUser(markBefore);
    if (
      fromGetUser(userBefore) === undefined ||
      (markUser !== undefined && decodeMark(markUser) !== undefined)
    )
      return;
    const undo = this.client.multi().call("ACL", "SETUSER", login, ...rulesToRemake(userBefore));
    if (markBefore === null || markBefore === undefined) undo.call("ACL", "DELUSER", markName);
    else undo.call("ACL", "SETUSER", markName, ...rulesToRemake(markBefore));
    await execChecked(undo, login, "put back an ACL user someone else made while the adapter was writing");
    this.logger.warn(
      `Redis ACL user ${JSON.stringify(login)} on ${this.config.admin.endpoint} was made by someone else ` +
        `after this instance looked and before it wrote; it was put back as it was and is left to them`,
    );
    throw this.notMadeHere(login);
  }

  /**
   * A MULTI/EXEC that leaves with every other one queued in the same turn of the event loop, in one
   * pipeline: the harness runs several creates at once, and each sent alone cost its own write and
   * its own wait for Redis. Each is still its own transaction, answered as `multi().exec()` answers.
   */
  private transaction(): RedisBatch {
    const commands: (string | number)[][] = [];
    const batch: RedisBatch = {
      call: (command, ...args) => {
        commands.push([command, ...args]);
        return batch;
      },
      exec: () =>
        new Promise((resolve, reject) => {
          const queued = (this.outgoing ??= []);
          queued.push({ commands, resolve, reject });
          if (queued.length === 1) setImmediate(() => this.sendTransactions());
        }),
    };
    return batch;
  }

  private sendTransactions(): void {
    const queued = this.outgoing ?? [];
    this.outgoing = undefined;
    const pipeline = this.client.pipeline();
    for (const { commands } of queued) {
      pipeline.call("multi");
      for (const [command, ...args] of commands) pipeline.call(String(command), ...args);
      pipeline.call("exec");
    }
    pipeline.exec().then(
      (replies) => {
        let at = 0;
        for (const { commands, resolve, reject } of queued) {
          const own = (replies ?? []).slice(at, at + commands.length + 2);
          at += commands.length + 2;
          // A command refused as queued (or MULTI itself) makes EXEC abort: the first refusal says why.
          const refused = own.find(([err]) => err !== null)?.[0];
          const [, answers] = own.at(-1) ?? [null, undefined];
          if (refused) reject(refused);
          else if (answers === null) resolve(null);
          else if (!Array.isArray(answers) || answers.length !== commands.length)
            reject(new Error(`EXEC answered ${JSON.stringify(answers)} for ${commands.length} commands`));
          else resolve(answers.map((a: unknown) => (a instanceof Error ? [a, null] : [null, a])));
        }
      },
      (err: unknown) => {
        for (const { reject } of queued) reject(err);
      },
    );
  }

  /** The consumer's ACL user and this instance's mark for it, in one round trip. */
  private async readUser(login: string): Promise<[AclUser | undefined, ConsumerMark | undefined]> {
    await this.connected();
    const replies = await this.client
      .pipeline()
      .call("ACL", "GETUSER", login)
      .call("ACL", "GETUSER", this.markName(login))
      .exec();
    const [userReply, markReply] = replies ?? [];
    if (userReply?.[0]) throw userReply[0];
    if (markReply?.[0]) throw markReply[0];
    const markUser = fromGetUser(markReply?.[1]);
    return [fromGetUser(userReply?.[1]), markUser === undefined ? undefined : decodeMark(markUser)];
  }

  /** Every ACL user, by name; with `remember`, also kept as the listing `listedAbsent` trusts. */
  private async listUsers(remember = false): Promise<Map<string, AclUser>> {
    await this.connected();
    const readies = this.readies;
    const at = Date.now();
    const reply = await this.client.call("ACL", "LIST");
    const users = new Map<string, AclUser>();
    if (!Array.isArray(reply)) return users;
    const names = new Set<string>();
    for (const line of reply) {
      if (typeof line !== "string") continue;
      // Every user's name, even one whose rules this parser cannot read: it exists.
      const name = /^user (\S+)/.exec(line)?.[1];
      if (name !== undefined) names.add(name);
      const parsed = fromAclListLine(line);
      if (parsed !== undefined) users.set(parsed[0], parsed[1]);
    }
    if (remember) this.listing = { names, at, readies };
    return users;
  }

  /**
   * Whether the inventory's ACL LIST, read in this same pass (until `afterChanges`), on this same
   * connection (a server that restarted since may have loaded other users from its ACL file) and
   * within `LISTING_TRUSTED_MS`, showed no user `login`, and this adapter has not created it since.
   * A user someone else makes in between is found by the write's own transaction, which reads it as
   * it was before writing, and put back (see `writeConsumer`).
   */
  private listedAbsent(login: string): boolean {
    const listing = this.listing;
    return (
      listing !== undefined &&
      listing.readies === this.readies &&
      this.client.status === "ready" &&
      Date.now() - listing.at <= LISTING_TRUSTED_MS &&
      !listing.names.has(login)
    );
  }

  /** Unlinks every `<login>:*` key in every database that has keys; returns the bytes they used. */
  private async unlinkKeys(login: string): Promise<number> {
    const info = await this.client.call("INFO", "keyspace");
    const databases = [...String(info).matchAll(/^db(\d+):keys=/gm)].map((m) => Number(m[1]));
    if (databases.length === 0) return 0;
    // A connection of its own, since SELECT would move every other call onto another database.
    const scanner = this.client.duplicate();
    scanner.on("error", () => {});
    let freed = 0;
    try {
      await scanner.connect();
      for (const db of databases) {
        await scanner.call("SELECT", db);
        let cursor = "0";
        do {
          const reply = await scanner.call("SCAN", cursor, "MATCH", `${login}:*`, "COUNT", SCAN_COUNT);
          const [next, keys] = reply as [string, string[]];
          cursor = next;
          if (keys.length === 0) continue;
          const sizes = scanner.pipeline();
          for (const key of keys) sizes.call("MEMORY", "USAGE", key);
          for (const [err, size] of (await sizes.exec()) ?? []) {
            if (err === null && typeof size === "number") freed += size;
          }
          await scanner.call("UNLINK", ...keys);
        } while (cursor !== "0");
      }
    } finally {
      scanner.disconnect();
    }
    return freed;
  }
}

/**
 * The failure class of an error from Redis or from this adapter: a rejected admin login is
 * `credentials-rejected`, a server that cannot be reached or answer in time is `unreachable`, and a
 * command the admin may not run is `refused`. The kit's refusals are classed by the harness.
 */
export function classifyRedisError(err: unknown): FailureClass | undefined {
  const down = findInChain(err, (e): e is RedisConnectionError => e instanceof RedisConnectionError);
  if (down !== undefined) return down.loginRefused ? "credentials-rejected" : "unreachable";
  if (findInChain(err, (e) => /\b(WRONGPASS|NOAUTH)\b/.test(messageOf(e)))) return "credentials-rejected";
  if (findInChain(err, isConnectionError)) return "unreachable";
  if (findInChain(err, (e) => /^NOPERM\b/.test(messageOf(e)))) return "refused";
  return undefined;
}

function isConnectionError(err: unknown): boolean {
  if (isNetworkError(err)) return true;
  return /Connection is closed|Stream isn't writeable|Command timed out|max retries per request|connect ETIMEDOUT|ECONNREFUSED|ECONNRESET/i.test(
    messageOf(err),
  );
}

/** Runs a batch; the first command that failed becomes a RedisCommandError naming `step`. */
async function execChecked(batch: RedisBatch, login: string, step: string): Promise<unknown[]> {
  let replies: [Error | null, unknown][] | null;
  try {
    replies = await batch.exec();
  } catch (err) {
    if (isConnectionError(err)) throw err;
    throw new RedisCommandError(login, step, { cause: err });
  }
  if (replies === null) throw new RedisCommandError(login, step, { cause: new Error("transaction aborted") });
  for (const [err] of replies) {
    if (err !== null) throw new RedisCommandError(login, step, { cause: err });
  }
  return replies.map(([, reply]) => reply);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function sha256(password: string): string {
  return createHash("sha256").update(password, "utf8").digest("hex");
}

/**
 * The whole ACL of a consumer, from nothing: `reset` drops any password, pattern, selector or
 * command someone added by hand, and `resetchannels` undoes `allchannels` on a server whose
 * acl-pubsub-default grants every channel. The password goes as its SHA-256, so the plaintext never
 * reaches the server, its ACL file or its logs.
 */
function consumerRules(login: string, passwords: readonly string[], monitoring: boolean): string[] {
  return [
    "reset",
    "resetchannels",
    "on",
    ...passwords.map((password) => `#${sha256(password)}`),
    `~${login}:*`,
    `&${login}:*`,
    ...consumerCommandRules(monitoring),
  ];
}

/** The passwords `p` logs in with: the new one, and the one being retired while a rotation overlaps. */
function passwordsOf(p: Provision): string[] {
  return p.retiring === undefined ? [p.password] : [p.password, p.retiring];
}

/** Whether the consumer asked for `monitoring` (INFO, for a metrics exporter). */
function monitors(p: Provision): boolean {
  return p.values["monitoring"] === true;
}

/** The command rules `p` holds on this server, as it writes them back. */
function commandsOf(facts: ServerFacts, p: Provision): readonly string[] {
  return monitors(p) ? facts.monitoringCommands : facts.commands;
}

/** A mark user: off, no password, no commands; its one key pattern is the mark itself. */
function markRules(mark: ConsumerMark): string[] {
  const body = JSON.stringify({ v: 1, ...mark });
  return ["reset", "resetchannels", `~${Buffer.from(body, "utf8").toString("base64url")}`];
}

function decodeMark(user: AclUser): ConsumerMark | undefined {
  const [pattern] = user.keys;
  if (user.keys.length !== 1 || pattern === undefined || !pattern.startsWith("~")) return undefined;
  return readMark(parseJsonOrUndefined(Buffer.from(pattern.slice(1), "base64url").toString("utf8")));
}

function isHeld(
  user: AclUser | undefined,
  mark: ConsumerMark | undefined,
  login: string,
  passwords: readonly string[],
  commands: readonly string[],
): boolean {
  if (user === undefined || mark?.state !== "active") return false;
  // A mark still recording a rotation is not held once the rotation is over: create clears it.
  if (passwords.length === 1 && mark.rotation !== undefined) return false;
  return (
    user.enabled &&
    !user.nopass &&
    !user.unknown &&
    user.selectors === 0 &&
    sameList([...user.passwords].sort(), passwords.map(sha256).sort()) &&
    sameList(user.keys, [`~${login}:*`]) &&
    sameList(user.channels, [`&${login}:*`]) &&
    sameList(user.commands, commands)
  );
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function words(text: unknown): string[] {
  return typeof text === "string" ? text.split(" ").filter((w) => w !== "") : [];
}

/** Reads ACL GETUSER's reply (field name, value, field name, value...); undefined for no such user. */
function fromGetUser(reply: unknown): AclUser | undefined {
  if (!Array.isArray(reply)) return undefined;
  const fields = fieldsOf(reply);
  const flags = Array.isArray(fields.get("flags")) ? (fields.get("flags") as unknown[]).map(String) : [];
  const passwords = fields.get("passwords");
  const selectors = fields.get("selectors");
  return {
    enabled: flags.includes("on"),
    nopass: flags.includes("nopass"),
    passwords: Array.isArray(passwords) ? passwords.map(String) : [],
    keys: words(fields.get("keys")),
    channels: words(fields.get("channels")),
    commands: words(fields.get("commands")).sort(),
    selectors: Array.isArray(selectors) ? selectors.length : 0,
    // Flags that widen a user beyond its patterns; Redis writes them as patterns in ACL LIST.
    unknown: flags.includes("allkeys") || flags.includes("allchannels") || flags.includes("allcommands"),
  };
}

/**
 * The rules that make an ACL user again as ACL GETUSER described it (flags, passwords as their
 * hashes, key, channel and command rules, selectors), from nothing. One difference no rule can
 * undo: a user that had neither sanitize-payload flag gets `sanitize-payload` from `reset`, which
 * Redis treats the same (only `skip-sanitize-payload` changes what RESTORE checks).
 */
function rulesToRemake(reply: unknown): string[] {
  const fields = fieldsOf(reply);
  const text = (name: string): string[] => words(fields.get(name));
  const rules = ["reset", "resetchannels"];
  const passwords = fields.get("passwords");
  if (Array.isArray(passwords)) rules.push(...passwords.map((hash) => `#${String(hash)}`));
  const flags = fields.get("flags");
  if (Array.isArray(flags)) rules.push(...flags.map(String));
  rules.push(...text("keys"), ...text("channels"), ...text("commands"));
  const selectors = fields.get("selectors");
  for (const selector of Array.isArray(selectors) ? selectors : []) {
    const own = fieldsOf(selector);
    const parts = ["keys", "channels", "commands"].flatMap((name) => words(own.get(name)));
    rules.push(`(${parts.join(" ")})`);
  }
  return rules;
}

/** An ACL GETUSER reply (field name, value, field name, value...) as a map. */
function fieldsOf(reply: unknown): Map<string, unknown> {
  const fields = new Map<string, unknown>();
  if (!Array.isArray(reply)) return fields;
  for (let i = 0; i + 1 < reply.length; i += 2) fields.set(String(reply[i]), reply[i + 1]);
  return fields;
}

/** Reads one line of ACL LIST (`user <name> <rule> <rule>...`) into the same shape as GETUSER's. */
function fromAclListLine(line: string): [string, AclUser] | undefined {
  const tokens = words(line);
  const [user, name] = tokens;
  if (user !== "user" || name === undefined) return undefined;
  let enabled = false;
  let nopass = false;
  let unknown = false;
  let selectors = 0;
  let inSelector = false;
  const passwords: string[] = [];
  const keys: string[] = [];
  const channels: string[] = [];
  const commands: string[] = [];
  for (const token of tokens.slice(2)) {
    if (inSelector || token.startsWith("(")) {
      if (!inSelector) selectors++;
      inSelector = !token.endsWith(")");
      continue;
    }
    if (token === "on") enabled = true;
    else if (token === "off") enabled = false;
    else if (token === "nopass") nopass = true;
    else if (token.startsWith("#")) passwords.push(token.slice(1));
    else if (token.startsWith("~") || token.startsWith("%")) keys.push(token);
    else if (token.startsWith("&")) channels.push(token);
    else if (token.startsWith("+") || token.startsWith("-")) commands.push(token);
    else if (token === "resetchannels" || token === "sanitize-payload" || token === "skip-sanitize-payload")
      continue;
    else unknown = true;
  }
  return [
    name,
    { enabled, nopass, passwords, keys, channels, commands: commands.sort(), selectors, unknown },
  ];
}
