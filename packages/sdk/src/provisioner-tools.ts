// The tools a person asks of a running harness (DESIGN §3 rules 7, 8, 10): `status`, `retire list`
// and `cleanup list` answer from a board made at the end of each pass; `retire approve` and
// `cleanup delete` run under the harness's lock, so they never interleave with a pass.

import type { GuardedAdapter } from "./adapter-guard.ts";
import { rememberJson } from "./cached-json.ts";
import type { ActionEntry, Logger } from "./collaborators.ts";
import { YieldTimer, yieldToEventLoop } from "./concurrency.ts";
import type { ConsumerBook, ConsumerRecord, Rotation } from "./consumer-book.ts";
import { readContributions } from "./contributions-file.ts";
import { isValidLogin } from "./login.ts";
import type { ProvisionerObserver } from "./metrics.ts";
import type { RetirementCounter } from "./retirement.ts";
import type { Standings } from "./standing.ts";
import {
  ToolError,
  type CleanupEntry,
  type ConsumerStatus,
  type RetireList,
  type StatusReport,
} from "./tools.ts";

/** What the tools are given by the harness they answer for. */
export interface ToolHost {
  readonly iface: string;
  readonly instance: string;
  readonly receives: string;
  readonly stablePasses: number;
  readonly book: ConsumerBook;
  readonly standings: Standings;
  readonly retirement: RetirementCounter;
  readonly adapter: GuardedAdapter;
  /** Where the provider serves its consumers, said in `status`; absent when it cannot say. */
  readonly serves?: { readonly host: string; readonly port: number } | undefined;
  readonly log: Logger;
  readonly metrics: ProvisionerObserver;
  record(entry: Omit<ActionEntry, "at" | "interface">): void;
  /** An error's text, scrubbed of the provider's secrets. */
  describe(err: unknown): string;
  /** Retires these active consumers for `why`, as `who`; returns those retired. */
  retire(logins: readonly string[], why: string, who: string): Promise<string[]>;
  /** Makes the board again from the book. */
  rebuild(): Promise<void>;
  /** The adapter's `afterChanges` when something changed (`changed`: this tool changed something). */
  afterChanges(changed: boolean): Promise<void>;
}

/**
 * What the read-only tools answer until the next rebuild: the status report, `cleanup list` and
 * `retire list`. Each consumer's entry (and its JSON) is kept in its record until the record
 * changes, so a rebuild after a pass that changed nothing only stamps the new pass's time.
 */
export class StatusBoard {
  #snapshot: StatusReport;
  #cleanup: readonly CleanupEntry[] = Object.freeze([]);
  #retireList: RetireList | undefined;
  #consumers: readonly ConsumerStatus[] = Object.freeze([]);
  #consumersJson = "[]";
  #madeFrom: string | undefined;

  constructor(
    private readonly host: Pick<ToolHost, "iface" | "instance" | "receives" | "adapter" | "serves">,
  ) {
    this.#snapshot = this.#stamp(null, null);
  }

  get status(): StatusReport {
    return this.#snapshot;
  }

  get cleanupList(): readonly CleanupEntry[] {
    return this.#cleanup;
  }

  retireList(host: ToolHost): RetireList {
    return this.#retireList ?? makeRetireList(host, 0, []);
  }

  /**
   * Makes the board from the book. It yields to the event loop as it goes, so over 100,000
   * consumers a tool asked meanwhile is answered from the previous board at once.
   */
  async rebuild(host: ToolHost, lastPassAt: number | null, problem: string | null): Promise<void> {
    const { book, retirement } = host;
    const from = `${book.version}/${retirement.count}/${retirement.waiting?.id ?? ""}`;
    if (from !== this.#madeFrom) {
      const turns = new YieldTimer();
      const consumers: ConsumerStatus[] = [];
      const texts: string[] = [];
      const cleanup: CleanupEntry[] = [];
      let held = 0;
      for (const login of book.sortedLogins()) {
        if (turns.due()) await yieldToEventLoop();
        const r = book.get(login);
        if (!r || r.state === undefined) continue;
        if (r.made === "active") held++;
        if (r.made === "retired") {
          cleanup.push({
            login,
            retiredAt: r.retiredAt === undefined ? null : new Date(r.retiredAt).toISOString(),
            why: r.retiredWhy ?? "",
            derived: r.derived,
          });
        }
        let entry = book.view(login);
        if (!entry) {
          entry = Object.freeze(statusOf(host, r));
          book.remember(login, entry);
        }
        consumers.push(entry);
        // Written out here, a little at a time, so no request has to write 100,000 at once.
        texts.push(JSON.stringify(entry));
      }
      this.#consumers = Object.freeze(consumers);
      this.#consumersJson = `[${texts.join(",")}]`;
      this.#cleanup = Object.freeze(cleanup);
      this.#retireList = Object.freeze(makeRetireList(host, held, consumers));
      // Read after the loop: a record changed while it yielded makes the next rebuild again.
      this.#madeFrom = book.version === Number(from.split("/")[0]) ? from : undefined;
    }
    this.#snapshot = this.#stamp(lastPassAt, problem);
  }

  #stamp(lastPassAt: number | null, problem: string | null): StatusReport {
    const head = {
      interface: this.host.iface,
      instance: this.host.instance,
      receives: this.host.receives,
      lastPassAt: lastPassAt === null ? null : new Date(lastPassAt).toISOString(),
      contributionsProblem: problem,
      overlaps: this.host.adapter.overlaps,
      ...(this.host.serves === undefined ? {} : { serves: this.host.serves }),
    };
    const snapshot: StatusReport = Object.freeze({ ...head, consumers: this.#consumers });
    rememberJson(snapshot, `${JSON.stringify(head).slice(0, -1)},"consumers":${this.#consumersJson}}`);
    return snapshot;
  }
}

/** What `status` says of a rotation under way. */
function rotationWhy(rotation: Rotation): string {
  const until = new Date(rotation.until).toISOString();
  return rotation.phase === "add"
    ? `rotating: add (the new password is being made valid beside the old one, which goes at ${until})`
    : `rotating: drain (both passwords log in; the old one goes at ${until})`;
}

/** One consumer's entry in `status`, from its record and its standing. */
function statusOf(host: ToolHost, r: ConsumerRecord): ConsumerStatus {
  const { login } = r;
  const trouble = host.standings.get(login);
  if (r.asked && trouble) {
    return {
      login,
      state: "failing",
      class: trouble.class,
      since: new Date(trouble.since).toISOString(),
      why: trouble.text,
      node: r.asked.node,
      attempts: trouble.attempts,
    };
  }
  const since = new Date(r.since).toISOString();
  if (r.asked) {
    return {
      login,
      state: "active",
      class: null,
      since,
      why:
        r.rotation !== undefined
          ? rotationWhy(r.rotation)
          : r.applied !== undefined
            ? "held as asked"
            : "being created",
      node: r.asked.node,
      ...(r.appliedTag !== undefined ? { applied: r.appliedTag } : {}),
      ...(r.appliedTag !== undefined && r.seen !== undefined && r.taggedAt !== undefined
        ? { seen: r.seen, appliedAt: new Date(r.taggedAt).toISOString() }
        : {}),
      ...(r.rotation === undefined
        ? {}
        : {
            rotation: {
              phase: r.rotation.phase,
              since: new Date(r.rotation.since).toISOString(),
              until: new Date(r.rotation.until).toISOString(),
            },
          }),
    };
  }
  if (r.made === "retired") {
    return {
      login,
      state: "retired",
      class: null,
      since: r.retiredAt === undefined ? since : new Date(r.retiredAt).toISOString(),
      why: r.retiredWhy ?? "retired",
    };
  }
  if (r.awaiting) {
    return {
      login,
      state: "awaiting-approval",
      class: null,
      since,
      why: `no longer asked for; waits for a person: retire approve ${host.retirement.waiting?.id ?? ""}`,
    };
  }
  return {
    login,
    state: "unasked",
    class: null,
    since,
    why: `no longer asked for; seen in ${host.retirement.count} of ${host.stablePasses} periodic passes`,
  };
}

function makeRetireList(host: ToolHost, held: number, consumers: readonly ConsumerStatus[]): RetireList {
  const waiting = host.retirement.waiting;
  if (waiting) return { id: waiting.id, logins: waiting.logins, held: waiting.held, reason: waiting.reason };
  const unasked = consumers.filter((c) => c.state === "unasked").map((c) => c.login);
  return {
    id: null,
    logins: [],
    held,
    reason:
      unasked.length === 0
        ? "nothing waits for approval and nothing is counting towards retirement"
        : `nothing waits for approval; ${unasked.join(", ")} seen unasked in ${host.retirement.count} of ${host.stablePasses} passes`,
  };
}

/** `retire approve [ID]`: retires exactly the waiting set. Run under the harness's lock. */
export async function approveRetirement(
  host: ToolHost,
  id: string | undefined,
  who: string,
): Promise<{ id: string; retired: string[] }> {
  const waiting = host.retirement.waiting;
  if (!waiting) {
    throw new ToolError(
      "nothing-waiting",
      "no retirement waits for approval; `retire list` shows what is counting",
    );
  }
  if (id !== undefined && id !== waiting.id) {
    throw new ToolError(
      "set-changed",
      `the set waiting is ${waiting.id}, not ${id}: it changed since it was listed; run \`retire list\` again`,
    );
  }
  // The set is confirmed against the file as it is now, not as the last pass saw it.
  const read = await readContributions(host.receives, host.iface);
  if (!read.ok) {
    throw new ToolError(
      "contributions-unreadable",
      `${read.problem}: cannot confirm the set; nothing retired`,
    );
  }
  const asked = new Set(read.given.map((g) => g.as));
  const now: string[] = [];
  for (const r of host.book.records()) if (r.made === "active" && !asked.has(r.login)) now.push(r.login);
  now.sort();
  if (now.join("\n") !== waiting.logins.join("\n")) {
    host.retirement.reset();
    host.book.awaiting([]);
    await host.rebuild();
    throw new ToolError(
      "set-changed",
      `the set no longer asked for is now ${now.join(", ") || "empty"}, not the one approved (${waiting.id}); nothing retired`,
    );
  }
  for (const login of waiting.logins) {
    host.record({ action: "approved", login, who, why: `retirement of set ${waiting.id} approved` });
  }
  const why = `no longer asked for in ${host.receives}; retirement of ${waiting.logins.length} approved by ${who}`;
  const retired = await host.retire(waiting.logins, why, who);
  await host.afterChanges(false);
  await host.rebuild();
  return { id: waiting.id, retired };
}

/** `cleanup delete LOGIN`: deletes one retired, unasked consumer this provider made. Run under the lock. */
export async function deleteRetired(
  host: ToolHost,
  login: string,
  who: string,
): Promise<{ login: string; freedBytes: number }> {
  if (!isValidLogin(login)) {
    throw new ToolError("unknown-login", `${JSON.stringify(login)} is not a login the mesh could have made`);
  }
  const known = host.book.get(login);
  if (!known || known.made === undefined) {
    let exists = false;
    try {
      exists = (await host.adapter.exists?.(login)) ?? false;
    } catch (err) {
      throw new ToolError("backend-failed", `cannot ask the backend about ${login}: ${host.describe(err)}`);
    }
    if (exists) {
      throw new ToolError(
        "not-made-here",
        `${login} exists in the backend but was not made by this provider (instance ${host.instance}); the mesh never deletes it`,
      );
    }
    throw new ToolError(
      "unknown-login",
      `${login} is not known to this provider; \`cleanup list\` shows what can be deleted`,
    );
  }
  const read = await readContributions(host.receives, host.iface);
  if (!read.ok) {
    throw new ToolError(
      "contributions-unreadable",
      `${read.problem}: cannot confirm ${login} is unasked; nothing deleted`,
    );
  }
  if (read.given.some((g) => g.as === login)) {
    throw new ToolError("still-asked", `${login} is still asked for in ${host.receives}; it is not deleted`);
  }
  if (known.made !== "retired") {
    throw new ToolError(
      "not-retired",
      `${login} is not retired (it is active); only a retired consumer can be deleted — it retires after ` +
        `${host.stablePasses} passes unasked, or with \`retire approve\``,
    );
  }
  let freedBytes: number;
  try {
    ({ freedBytes } = await host.adapter.delete({
      as: login,
      derived: known.derived,
      retiredAt: known.retiredAt === undefined ? undefined : new Date(known.retiredAt),
      why: known.retiredWhy,
    }));
  } catch (err) {
    throw new ToolError("backend-failed", `could not delete ${login}: ${host.describe(err)}`, { cause: err });
  }
  host.book.deleted(login);
  host.log.info(`${login}: deleted by ${who}, login and data (${freedBytes} bytes freed)`);
  host.record({ action: "deleted", login, who, why: `cleanup delete by ${who}`, freedBytes });
  host.metrics.deleted();
  await host.afterChanges(true);
  await host.rebuild();
  return { login, freedBytes };
}
