// What each provider module of this node says of its consumers, read from its own control socket
// (`status`, and `retire list` while a set waits for a person) every few seconds, so the node's report
// names a failing consumer from its first failure (DESIGN §7, "status tells at once"); the 5-minute
// announcement on the bus is for the ledger and the alerts. The report stays small: the failing
// consumers (at most MAX_REPORTED_FAILING), the set waiting for a person, and counts, never every
// consumer.
import type { BusLogger } from "@mesh/bus";
import {
  toolAnswerBytes,
  type ReportedCounts,
  type ReportedFailure,
  type ReportedProvider,
  type ReportedWaiting,
  type ToolAnswers,
} from "@mesh/manifest";
import { ToolError, type ConsumerState } from "@mesh/sdk";
import { callControl, maskUrls, NoProviderListeningError } from "@mesh/sdk/provider";
import { MisbehavingModules, whatOf } from "./misbehaving-modules.ts";
import { moduleControlPath } from "./module-launch.ts";
import { checkModuleSocket, UnsafeModuleFileError } from "./safe-open.ts";
import { nodeSecrets, scrubValue } from "./tool-runner.ts";

/** The most failing consumers one provider's standing lists; `counts.failing` says how many there are. */
export const MAX_REPORTED_FAILING = 100;

/** The most logins of a waiting retirement set the standing lists; `waiting.count` says how many. */
export const MAX_REPORTED_WAITING = 20;

/** The longest error text kept for one failing consumer. */
export const MAX_REPORTED_ERROR = 500;

/** How often each provider is asked, at least; a provider slow to answer is asked less often. */
export const STANDINGS_EVERY_MS = 2_000;

/** How long one ask waits for a provider's control socket (its answer must be whole by then). */
export const STANDINGS_TIMEOUT_MS = 5_000;

/** What one provider module of this node says, as the node's report carries it. */
export type ProviderStanding = ReportedProvider;

/** What asks the providers: the node's state directory, where it says what it cannot ask, and the news. */
export interface ProviderStandingsOptions {
  readonly stateDir: string;
  readonly logger: BusLogger;
  /** Called when what a provider says changed (not merely when it was asked again). */
  readonly onChange: () => void;
  /** The environment the node's modules inherit: the passwords of its URLs are scrubbed too. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly everyMs?: number;
  readonly timeoutMs?: number;
  /**
   * Where a provider whose answer is malformed, too large, too slow or cut off is counted as
   * misbehaving (the node's one book); absent, a book of its own.
   */
  readonly misbehaving?: MisbehavingModules;
  /**
   * How many consumers the node's delivery gives `module`: its answers may be larger by so much
   * (`toolAnswerBytes`). Absent: none, so 1 MiB.
   */
  consumers?(module: string): number;
}

/** How a standing's problem begins when the provider's answer was bad (the book says it, not the standings). */
const BAD_ANSWER = "its answer to ";

/** How long the node's secrets, read for scrubbing, are reused. */
const SECRETS_FRESH_MS = 10_000;

const NO_COUNTS: ReportedCounts = { active: 0, failing: 0, unasked: 0, "awaiting-approval": 0, retired: 0 };

/**
 * Asks each provider module of the node for its `status` every `everyMs` (longer when a provider is
 * slow to answer), and keeps the small standing the node reports. Never throws.
 */
export class ProviderStandings {
  readonly #o: ProviderStandingsOptions;
  readonly #misbehaving: MisbehavingModules;
  readonly #standings = new Map<string, ProviderStanding>();
  readonly #said = new Map<string, string>();
  #modules: readonly string[] = [];
  #timer: NodeJS.Timeout | undefined;
  #asking: Promise<void> | undefined;
  #stopped = false;
  #secrets: { readonly at: number; readonly list: Promise<string[]> } | undefined;

  constructor(options: ProviderStandingsOptions) {
    this.#o = options;
    this.#misbehaving = options.misbehaving ?? new MisbehavingModules({ logger: options.logger });
  }

  /** Asks these provider modules from now on (the node's delivery says which); asks them at once. */
  follow(modules: readonly string[]): void {
    this.#modules = [...new Set(modules)].sort();
    for (const m of [...this.#standings.keys()]) if (!this.#modules.includes(m)) this.#standings.delete(m);
    this.askSoon();
  }

  /** Asks every provider again now, unless an ask is under way (a module started or stopped). */
  askSoon(): void {
    if (this.#stopped || this.#asking !== undefined) return;
    clearTimeout(this.#timer);
    this.#asking = this.#askAll().finally(() => {
      this.#asking = undefined;
    });
  }

  /** Asks every followed provider now (or joins the ask under way) and resolves when it has ended. */
  refresh(): Promise<void> {
    this.askSoon();
    return this.#asking ?? Promise.resolve();
  }

  /**
   * What `module` says now, asked at once (not kept as its standing): for a decision that cannot
   * wait for the next ask. Never throws; a provider that cannot be asked is `answered: false`.
   */
  askNow(module: string): Promise<ProviderStanding> {
    return this.#ask(module);
  }

  /** What each followed provider said when last asked, by module; one that was not asked yet is absent. */
  standings(): ProviderStanding[] {
    return this.#modules.flatMap((m) => this.#standings.get(m) ?? []);
  }

  /**
   * Stops asking. An ask under way is not waited for: it ends with its provider, which the agent
   * stops next, or at its timeout, and nothing is kept of it.
   */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  async #askAll(): Promise<void> {
    const began = Date.now();
    let changed = false;
    for (const module of this.#modules) {
      if (this.#stopped) return;
      const standing = await this.#ask(module);
      const before = this.#standings.get(module);
      if (before === undefined || sameButWhen(before) !== sameButWhen(standing)) changed = true;
      this.#standings.set(module, standing);
      this.#sayProblem(module, standing.problem);
    }
    if (changed && !this.#stopped) this.#o.onChange();
    if (this.#stopped) return;
    // A provider with very many consumers takes a while to answer: ask it no more than a tenth of the time.
    const every = this.#o.everyMs ?? STANDINGS_EVERY_MS;
    const wait = Math.max(every, 10 * (Date.now() - began));
    this.#timer = setTimeout(() => this.askSoon(), wait);
    this.#timer.unref();
  }

  async #ask(module: string): Promise<ProviderStanding> {
    const askedAt = new Date().toISOString();
    const path = moduleControlPath(this.#o.stateDir, module);
    const timeoutMs = this.#o.timeoutMs ?? STANDINGS_TIMEOUT_MS;
    const unanswered = (problem: string): ProviderStanding => ({
      module,
      answered: false,
      problem,
      askedAt,
      lastPassAt: null,
      contributionsProblem: null,
      counts: NO_COUNTS,
      failing: [],
      waiting: null,
    });
    // A module may put anything at its own socket's path: only its own socket is asked, never what a
    // link names (the same check as a tool call's).
    try {
      if ((await checkModuleSocket(path)) === "missing") {
        return unanswered(`nothing listens at its control socket ${path} yet`);
      }
    } catch (err) {
      const why = err instanceof UnsafeModuleFileError ? err.message : String(err);
      return unanswered(why);
    }
    const book = this.#misbehaving;
    const consumers = this.#o.consumers?.(module) ?? 0;
    // What the provider says is parsed against the tool's schema by callControl, and bounded in size
    // and time: a malformed, huge, slow or cut-off answer is the provider misbehaving, and nothing
    // of it is used.
    const ask = async <T extends "status" | "retire list">(tool: T): Promise<ToolAnswers[T] | string> => {
      try {
        const answer = await callControl(
          path,
          { tool, who: "agent" },
          { timeoutMs, maxBytes: toolAnswerBytes(tool, consumers) },
        );
        book.good(module, tool);
        return answer;
      } catch (err) {
        if (err instanceof NoProviderListeningError)
          return `nothing listens at its control socket ${path} yet`;
        if (err instanceof ToolError) {
          book.good(module, tool);
          // The refusal's words are the provider's: scrubbed of the node's secrets like its errors.
          const why = scrubValue(clipLine(err.message), await this.#nodeSecrets()) as string;
          return `it refused ${tool} (${err.code}): ${maskUrls(why)}`;
        }
        if (book.failed(module, tool, err)) {
          const misbehaves = book.isMisbehaving(module) ? " (it misbehaves)" : "";
          return `${BAD_ANSWER}${tool} was not used${misbehaves}: ${whatOf(err)}`;
        }
        return err instanceof Error ? err.message : String(err);
      }
    };
    const status = await ask("status");
    if (typeof status === "string") return unanswered(status);
    const counts: Record<ConsumerState, number> = { ...NO_COUNTS };
    const failing: ReportedFailure[] = [];
    for (const c of status.consumers) {
      counts[c.state] += 1;
      if (c.state !== "failing" || failing.length >= MAX_REPORTED_FAILING) continue;
      failing.push({
        login: c.login,
        node: c.node ?? null,
        class: c.class ?? "refused",
        since: c.since,
        attempts: c.attempts ?? 1,
        error: clipLine(c.why),
      });
    }
    const unseen = status.consumers
      .filter((c) => c.state === "active" && c.seen === false && c.appliedAt !== undefined)
      .slice(0, MAX_REPORTED_FAILING)
      .map((c) => ({ login: c.login, since: c.appliedAt as string }));
    const rotating = status.consumers
      .flatMap((c) =>
        c.state === "active" && c.rotation !== undefined ? [{ login: c.login, ...c.rotation }] : [],
      )
      .slice(0, MAX_REPORTED_FAILING);
    let waiting: ReportedWaiting | null = null;
    if (counts["awaiting-approval"] > 0) {
      const awaiting = status.consumers.filter((c) => c.state === "awaiting-approval").map((c) => c.login);
      const said = await ask("retire list");
      // Not answered (or not well): the status said enough, and the set is shown without its id.
      const list = typeof said === "string" ? undefined : said;
      const logins = list?.id ? list.logins : awaiting;
      waiting = {
        id: list?.id ?? null,
        logins: logins.slice(0, MAX_REPORTED_WAITING),
        count: logins.length,
        held: list?.held ?? 0,
        reason: clipLine(list?.reason ?? ""),
      };
    }
    const secrets =
      failing.length > 0 || waiting !== null || status.contributionsProblem !== null
        ? await this.#nodeSecrets()
        : [];
    const scrubbed = scrubValue({ failing, waiting, problem: status.contributionsProblem }, secrets) as {
      failing: ReportedFailure[];
      waiting: ReportedWaiting | null;
      problem: string | null;
    };
    return {
      module,
      answered: true,
      problem: null,
      askedAt,
      lastPassAt: status.lastPassAt,
      contributionsProblem: scrubbed.problem === null ? null : clipLine(scrubbed.problem),
      counts,
      failing: scrubbed.failing.map((f) => ({ ...f, error: maskUrls(f.error) })),
      waiting: scrubbed.waiting,
      ...(unseen.length > 0 ? { unseen } : {}),
      ...(rotating.length > 0 ? { rotating } : {}),
      // Checked against its schema by callControl: a host name or address and a port, nothing more.
      ...(status.serves === undefined
        ? {}
        : { serves: { host: status.serves.host, port: status.serves.port } }),
    };
  }

  // Read again at most every SECRETS_FRESH_MS: a node may hold thousands of secret files, and the
  // provider has scrubbed its consumers' passwords already; this is the second net.
  #nodeSecrets(): Promise<string[]> {
    const now = Date.now();
    if (this.#secrets === undefined || now - this.#secrets.at > SECRETS_FRESH_MS) {
      const list = nodeSecrets(this.#o.stateDir, this.#o.env ?? {}).catch((): string[] => []);
      this.#secrets = { at: now, list };
    }
    return this.#secrets.list;
  }

  // Said when it changes, not on every ask: a provider starting is not listening for a second or two.
  // A bad answer is said by the book of misbehaving modules, once when it starts and once when it
  // ends: not again here.
  #sayProblem(module: string, problem: string | null): void {
    const before = this.#said.get(module);
    if (problem === null) {
      if (before !== undefined && !before.startsWith(BAD_ANSWER))
        this.#o.logger.info(`${module} answers its status again`);
      this.#said.delete(module);
      return;
    }
    if (before === problem) return;
    this.#said.set(module, problem);
    if (!problem.startsWith("nothing listens") && !problem.startsWith(BAD_ANSWER)) {
      this.#o.logger.warn(`the agent cannot read ${module}'s status: ${problem}`);
    }
  }
}

// What is news: a pass ending, or one more attempt of a failure already reported, is said at the next tick.
function sameButWhen(s: ProviderStanding): string {
  const failing = s.failing.map((f) => `${f.login} ${f.class}`);
  const unseen = (s.unseen ?? []).map((u) => u.login);
  const rotating = (s.rotating ?? []).map((r) => `${r.login} ${r.phase} ${r.until}`);
  return JSON.stringify([
    s.answered,
    s.problem,
    s.contributionsProblem,
    s.counts,
    failing,
    s.waiting,
    unseen,
    rotating,
    s.serves ?? null,
  ]);
}

function clipLine(text: string): string {
  const line = text.replace(/\s*[\r\n]+\s*/g, " ");
  return line.length <= MAX_REPORTED_ERROR ? line : `${line.slice(0, MAX_REPORTED_ERROR)}…`;
}
