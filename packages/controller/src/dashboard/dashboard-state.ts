// What the dashboard shows, built from what the controller knows (nodes, their reports, the plan,
// the standings) and what each provider says of its consumers through the same tool relay as
// `mesh tool`. A provider that does not answer is shown as such, never as an error page: its
// consumers are then listed from the plan, with what the standings on the bus say of them.
import type { FleetRevision } from "../fleet-history.ts";
import { parseToolAnswer } from "@mesh/manifest";
import type { ConsumerState } from "@mesh/sdk";
import { maskDeep, metricsUrlOf } from "@mesh/sdk/provider";
import { DEFAULT_SILENT_AFTER_MS } from "../controller-metrics.ts";
import type {
  ConsumerStatus,
  ControllerStatus,
  EndpointStatus,
  FailingStatus,
} from "../controller-status.ts";
import type { FleetPlan } from "../fleet-plan.ts";
import { claimOf } from "@mesh/bus";
import type { LedgerReadReply } from "../ledger-reader.ts";
import type { ModuleReport } from "../node-reports.ts";
import type { ToolCall, ToolReply } from "../tool-relay.ts";

/** What the dashboard reads and asks; a running controller is one (`startController`'s answer). */
export interface DashboardSources {
  /** What `mesh status` shows. */
  status(): ControllerStatus;
  /** The fleet being served. */
  current(): FleetPlan;
  /** Relays a tool call to the module's node, exactly as `mesh tool` does; never throws. */
  tool(call: ToolCall): Promise<ToolReply>;
  /** A module's newest ledger entries, as `mesh ledger` reads them; never throws. */
  ledger(module: string, limit: number): Promise<LedgerReadReply>;
  /** The fleet's kept revisions, oldest first (as `mesh fleet history`); throws when the bus cannot answer. */
  history?(): Promise<readonly FleetRevision[]>;
  /** The revision served. */
  revision?(): number;
}

/** One node and its agent, as the page shows it. */
export interface NodeView {
  readonly name: string;
  readonly enrolled: boolean;
  /** ISO 8601 of its agent's last report, or null. */
  readonly lastReportAt: string | null;
  /** Whether its agent reported recently enough to count as connected. */
  readonly connected: boolean;
  readonly generation: number | null;
  readonly modules: readonly string[];
}

/** One module of the fleet and whether it runs. */
export interface ModuleView {
  readonly name: string;
  readonly node: string;
  /** As its node last reported it; `unknown` when the node has not reported it (or is silent). */
  readonly state: ModuleReport["state"] | "unknown";
  readonly restarts: number;
  /** The interfaces it provides (none for a module that only consumes). */
  readonly provides: readonly string[];
  /** Where it serves Prometheus metrics, as its node reported (an http(s) URL), or null. */
  readonly metrics: string | null;
  /**
   * What its node's agent did not use of its answers, one entry per question (`status`, …): what
   * was wrong and since when. Empty when it answers well.
   */
  readonly misbehaving: readonly MisbehavingView[];
}

/** One way a module misbehaves, on the page. */
export interface MisbehavingView {
  /** What it was asked (a tool). */
  readonly answer: string;
  /** `malformed`, `too-large`, `slow` or `hung-up`. */
  readonly fault: string;
  readonly what: string;
  /** ISO 8601. */
  readonly since: string;
}

/** A consumer's state on the page: the provider's own states, and `deleted` from its ledger. */
export type ConsumerViewState = ConsumerState | "deleted" | "unknown";

/** One consumer of one provider. */
export interface ConsumerView {
  readonly login: string;
  /** The consumer module when the fleet being served names it, else null (retired, deleted). */
  readonly consumer: string | null;
  readonly interface: string;
  readonly node: string | null;
  readonly state: ConsumerViewState;
  /** The failure class while failing, else null. */
  readonly class: string | null;
  /** ISO 8601: since when it is in this state, when known. */
  readonly since: string | null;
  /** Why it is in this state, in words (scrubbed). */
  readonly why: string;
  readonly attempts: number | null;
  /**
   * Who asked for its deletion, for a deleted consumer, as the mesh recorded the request; absent when
   * no relayed request bears out the provider's word that it deleted it.
   */
  readonly who?: string;
  /** True when its provider has not seen it connected past the bound (as in `mesh status`). */
  readonly neverSeenConnected?: true;
  /** ISO 8601: since when its current password stands unused, with `neverSeenConnected`. */
  readonly unusedSince?: string;
}

/** The retirement set that waits for a person (`retire list`), with the id Approve sends. */
export interface WaitingView {
  readonly id: string;
  readonly logins: readonly string[];
  readonly held: number;
  readonly reason: string;
}

/** One provider module and its consumers. */
export interface ProviderView {
  readonly module: string;
  readonly node: string;
  readonly interfaces: readonly string[];
  /** Where it serves Prometheus metrics, as its node reported (an http(s) URL), or null. */
  readonly metrics: string | null;
  /** Whether the provider answered `status` through the relay. */
  readonly answered: boolean;
  /** Why it did not answer, in words; null when it did. */
  readonly problem: string | null;
  /** ISO 8601: when it was last asked. */
  readonly askedAt: string;
  /** ISO 8601 of its last finished pass, when it answered. */
  readonly lastPassAt: string | null;
  readonly contributionsProblem: string | null;
  readonly consumers: readonly ConsumerView[];
  readonly waiting: WaitingView | null;
  /** What people asked of it through the mesh (tools, rotations, approvals, deletions), newest first. */
  readonly actions: readonly ActionView[];
  /** Where its consumers are sent, per interface, as `mesh status` says (a disagreement names both). */
  readonly endpoints?: readonly EndpointStatus[];
}

/** One thing a person asked of a module through the mesh, as the mesh recorded it in its ledger. */
export interface ActionView {
  readonly module: string;
  /** ISO 8601: when the bus stored the record. */
  readonly at: string;
  readonly who: string;
  /** `mesh tool`, `dashboard`, `mesh rotate`, … */
  readonly via: string;
  /** What was asked, in words: the tool and its arguments, or the record's kind. */
  readonly what: string;
  /** False when the module refused or failed it; null when the record does not say. */
  readonly ok: boolean | null;
}

/** The most recent operator actions the first page lists. */
export const RECENT_ACTIONS = 10;

/** What `GET /api/state` answers. */
export interface DashboardState {
  /** ISO 8601: when it was built. */
  readonly at: string;
  readonly fleet: ControllerStatus["fleet"];
  readonly nodes: readonly NodeView[];
  readonly modules: readonly ModuleView[];
  readonly providers: readonly ProviderView[];
  /** How many retirement sets wait for a person, over every provider. */
  readonly waiting: number;
  /** How many consumers are failing, over every provider. */
  readonly failing: number;
  /** How many modules misbehave. */
  readonly misbehaving: number;
  /** The newest things people asked through the mesh, over every provider (at most `RECENT_ACTIONS`). */
  readonly actions: readonly ActionView[];
}

/** How the dashboard's view is built. */
export interface DashboardViewOptions {
  /** How long a provider's answer is reused (default `PROVIDER_CACHE_MS`). */
  readonly cacheMs?: number;
  /**
   * How long a state waits for a provider that is slow to answer (default `PROVIDER_WAIT_MS`); then
   * its previous answer is shown, or that it has not answered yet.
   */
  readonly waitMs?: number;
  /** A node whose last report is older than this is not connected (default DEFAULT_SILENT_AFTER_MS). */
  readonly silentAfterMs?: number;
  /** Who the tool calls are asked as, kept in the provider's ledger (default "dashboard"). */
  readonly who?: string;
  /** How many ledger entries are read to find deleted consumers (default 200). */
  readonly deletedLookback?: number;
  readonly now?: () => number;
}

/**
 * How long a provider's answers are reused. Each tool call through the relay is kept in the
 * provider's ledger, reads included, so a page polling every two seconds asks a provider at most
 * once in this long, and only while a page is open.
 */
export const PROVIDER_CACHE_MS = 5_000;

/** Who the dashboard's tool calls are asked as, when not told. */
export const DASHBOARD_WHO = "dashboard";

/** How long a state waits for a slow provider, when not told. */
export const PROVIDER_WAIT_MS = 3_000;

type ProviderSaid = Omit<ProviderView, "module" | "node" | "interfaces" | "metrics">;

interface ProviderAnswer {
  readonly at: number;
  readonly view: Promise<ProviderSaid>;
  settled?: ProviderSaid;
  /** The answer before this one, shown while this one is awaited. */
  readonly previous: ProviderSaid | undefined;
}

/** The dashboard's view of the mesh: builds the state the page polls, asking providers sparingly. */
export class DashboardView {
  readonly #cache = new Map<string, ProviderAnswer>();
  readonly #now: () => number;
  readonly #cacheMs: number;
  readonly #waitMs: number;
  readonly #silentAfterMs: number;
  readonly #lookback: number;
  /** Who the tool calls are asked as. */
  readonly who: string;

  constructor(
    readonly sources: DashboardSources,
    options: DashboardViewOptions = {},
  ) {
    this.#now = options.now ?? Date.now;
    this.#cacheMs = options.cacheMs ?? PROVIDER_CACHE_MS;
    this.#waitMs = options.waitMs ?? PROVIDER_WAIT_MS;
    this.#silentAfterMs = options.silentAfterMs ?? DEFAULT_SILENT_AFTER_MS;
    this.#lookback = options.deletedLookback ?? 200;
    this.who = options.who ?? DASHBOARD_WHO;
  }

  /** Forgets what `module` said, so the next state asks it again (after an action). */
  forget(module: string): void {
    this.#cache.delete(module);
  }

  /** The provider modules of the fleet being served, with their node and interfaces. */
  providers(): { module: string; node: string; interfaces: string[] }[] {
    const byModule = new Map<string, { module: string; node: string; interfaces: string[] }>();
    for (const i of this.sources.current().plan.instances) {
      const p = byModule.get(i.provider) ?? { module: i.provider, node: i.node, interfaces: [] };
      p.interfaces.push(i.interface);
      byModule.set(i.provider, p);
    }
    return [...byModule.values()];
  }

  /** Builds the whole state: the controller's own knowledge now, each provider's at most `cacheMs` old. */
  async state(): Promise<DashboardState> {
    const status = this.sources.status();
    const fleet = this.sources.current();
    const now = this.#now();
    const connected = (at: string | null): boolean =>
      at !== null && now - Date.parse(at) <= this.#silentAfterMs;
    const nodes: NodeView[] = status.nodes.map((n) => ({
      name: n.name,
      enrolled: n.enrolled,
      lastReportAt: n.lastReportAt,
      connected: connected(n.lastReportAt),
      generation: n.generation,
      modules: fleet.modules.filter((m) => m.node === n.name).map((m) => m.name),
    }));
    const provides = new Map<string, string[]>();
    for (const i of fleet.plan.instances)
      provides.set(i.provider, [...(provides.get(i.provider) ?? []), i.interface]);
    const modules: ModuleView[] = fleet.modules.map((m) => {
      const node = status.nodes.find((n) => n.name === m.node);
      const report =
        node !== undefined && connected(node.lastReportAt)
          ? node.modules.find((r) => r.name === m.name)
          : undefined;
      return {
        name: m.name,
        node: m.node,
        state: report?.state ?? "unknown",
        restarts: report?.restarts ?? 0,
        provides: provides.get(m.name) ?? [],
        // Checked again where it becomes a link: whatever a node reported, the page gets a web address.
        metrics: metricsUrlOf(report?.metrics) ?? null,
        misbehaving: (status.misbehaving ?? [])
          .filter((b) => b.node === m.node && b.module === m.name)
          .map(({ answer, fault, what, since }) => ({ answer, fault, what, since })),
      };
    });
    const providers = await Promise.all(
      this.providers().map(async (p): Promise<ProviderView> => {
        const said = await this.#ask(p.module, now);
        const metrics = modules.find((m) => m.name === p.module)?.metrics ?? null;
        const endpoints = status.providers.find((s) => s.provider === p.module)?.endpoints;
        return {
          module: p.module,
          node: p.node,
          interfaces: p.interfaces,
          metrics,
          ...said,
          ...(endpoints === undefined ? {} : { endpoints }),
        };
      }),
    );
    const withPlan = providers.map((p) => withPlanAndStandings(p, fleet, status.failing, status.consumers));
    return maskDeep({
      at: new Date(now).toISOString(),
      fleet: status.fleet,
      nodes,
      modules,
      providers: withPlan,
      waiting: withPlan.filter((p) => p.waiting !== null).length,
      failing: withPlan.reduce((n, p) => n + p.consumers.filter((c) => c.state === "failing").length, 0),
      misbehaving: modules.filter((m) => m.misbehaving.length > 0).length,
      actions: withPlan
        .flatMap((p) => p.actions)
        .sort((a, b) => b.at.localeCompare(a.at))
        .slice(0, RECENT_ACTIONS),
    });
  }

  // One call in flight per provider at most: a provider slow to answer is asked again only once it
  // has, and meanwhile a state shows what it said before (or that it has not answered yet).
  async #ask(module: string, now: number): Promise<ProviderSaid> {
    let kept = this.#cache.get(module);
    if (kept === undefined || (kept.settled !== undefined && now - kept.at >= this.#cacheMs)) {
      const view = this.#askNow(module, now).catch((err: unknown): ProviderSaid => ({
        ...unanswered(now),
        problem: `${module} could not be asked: ${err instanceof Error ? err.message : String(err)}`,
      }));
      const entry: ProviderAnswer = { at: now, view, previous: kept?.settled };
      void entry.view.then((said) => (entry.settled = said));
      this.#cache.set(module, entry);
      kept = entry;
    }
    if (kept.settled !== undefined) return kept.settled;
    const asked = kept;
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<ProviderSaid>((resolve) => {
      timer = setTimeout(
        () =>
          resolve(
            asked.previous ?? {
              ...unanswered(asked.at),
              problem: `${module} was asked ${Math.round((this.#now() - asked.at) / 1000)} s ago and has not answered yet`,
            },
          ),
        this.#waitMs,
      );
      timer.unref();
    });
    try {
      return await Promise.race([asked.view, waited]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #askNow(module: string, now: number): Promise<ProviderSaid> {
    const askedAt = new Date(now).toISOString();
    const [reply, history] = await Promise.all([
      // The page refreshes itself every few seconds: its reads are not recorded, its actions are.
      this.sources.tool({ module, tool: "status", args: [], who: this.who, record: false }),
      this.sources.ledger(module, this.#lookback),
    ]);
    const deleted = deletedOf(module, history);
    const actions = actionsOf(module, history);
    // The relay checked the answer already; checked again here, as the page is owed what it reads.
    const parsed = reply.ok ? parseToolAnswer("status", reply.answer) : undefined;
    const report = parsed?.ok === true ? parsed.answer : undefined;
    if (report === undefined) {
      return {
        answered: false,
        problem: reply.ok
          ? `${module} answered status with something that is not a provider's status`
          : reply.error,
        askedAt,
        lastPassAt: null,
        contributionsProblem: null,
        consumers: deleted,
        waiting: null,
        actions,
      };
    }
    const consumers: ConsumerView[] = report.consumers.map((c) => ({
      login: c.login,
      consumer: null,
      interface: report.interface,
      node: c.node ?? null,
      state: c.state,
      class: c.class,
      since: c.since ?? null,
      why: c.why,
      attempts: c.attempts ?? null,
    }));
    let waiting: WaitingView | null = null;
    if (consumers.some((c) => c.state === "awaiting-approval")) {
      const list = await this.sources.tool({
        module,
        tool: "retire list",
        args: [],
        who: this.who,
        record: false,
      });
      const parsedList = list.ok ? parseToolAnswer("retire list", list.answer) : undefined;
      const set = parsedList?.ok === true ? parsedList.answer : undefined;
      if (set?.id !== undefined && set.id !== null)
        waiting = { id: set.id, logins: set.logins, held: set.held, reason: set.reason };
    }
    const shown = new Set(consumers.map((c) => c.login));
    return {
      answered: true,
      problem: null,
      askedAt,
      lastPassAt: report.lastPassAt,
      contributionsProblem: report.contributionsProblem,
      consumers: [...consumers, ...deleted.filter((d) => !shown.has(d.login))],
      waiting,
      actions,
    };
  }
}

// What people asked of `module` through the mesh: the records the mesh itself wrote (who and how),
// newest first. A module's own claims are not among them: who asked is never the module's word.
function actionsOf(module: string, read: LedgerReadReply): ActionView[] {
  if (!read.ok) return [];
  const actions: ActionView[] = [];
  for (const record of read.entries) {
    if (record.recorded === undefined) continue;
    const e = record.entry;
    const kind = typeof e.kind === "string" ? e.kind : "";
    const args = Array.isArray(e.args) ? e.args.filter((a): a is string => typeof a === "string") : [];
    const what =
      typeof e.tool === "string"
        ? [e.tool, ...args].join(" ")
        : [
            kind,
            typeof e.login === "string" ? e.login : "",
            typeof e.interface === "string" ? e.interface : "",
          ]
            .filter((w) => w !== "")
            .join(" ");
    actions.push({
      module,
      at: record.at,
      who: record.recorded.who,
      via: record.recorded.via,
      what: what || "(a record of the mesh)",
      ok: typeof e.ok === "boolean" ? e.ok : null,
    });
  }
  return actions.sort((a, b) => b.at.localeCompare(a.at)).slice(0, RECENT_ACTIONS);
}

// Deleted consumers are gone from the provider's status; its ledger remembers them. What the
// provider says it deleted is its claim: who asked comes only from the request the mesh relayed.
function deletedOf(module: string, read: LedgerReadReply): ConsumerView[] {
  if (!read.ok) return [];
  const latest = new Map<string, ConsumerView>();
  for (const record of read.entries) {
    const claim = record.claim ?? claimOf(module, record.entry);
    if (claim === undefined || claim.login === "") continue;
    if (claim.action !== "deleted") {
      latest.delete(claim.login);
      continue;
    }
    const asked = read.entries.find((r) => r.seq === record.matches)?.recorded;
    latest.set(claim.login, {
      login: claim.login,
      consumer: null,
      interface: claim.interface,
      node: null,
      state: "deleted",
      class: null,
      since: record.at,
      why:
        record.flagged === undefined
          ? claim.why || "deleted"
          : `${module} says it deleted it; flagged: ${record.flagged}`,
      attempts: null,
      ...(asked === undefined ? {} : { who: asked.who }),
    });
  }
  return [...latest.values()];
}

function unanswered(at: number): ProviderSaid {
  return {
    answered: false,
    problem: null,
    askedAt: new Date(at).toISOString(),
    lastPassAt: null,
    contributionsProblem: null,
    consumers: [],
    waiting: null,
    actions: [],
  };
}

// Names each consumer by its module from the plan; a provider that did not answer lists the
// plan's consumers, failing where the standings on the bus say so.
function withPlanAndStandings(
  p: ProviderView,
  fleet: FleetPlan,
  failing: readonly FailingStatus[],
  statuses: readonly ConsumerStatus[],
): ProviderView {
  const planned = fleet.plan.instances.filter((i) => i.provider === p.module).flatMap((i) => i.consumers);
  const byLogin = new Map(planned.map((c) => [c.login, c]));
  let consumers = p.consumers.map((c) => {
    const entry = byLogin.get(c.login);
    return entry === undefined
      ? c
      : { ...c, consumer: entry.consumer, interface: entry.interface, node: c.node ?? entry.consumerNode };
  });
  if (!p.answered) {
    const listed = new Set(consumers.map((c) => c.login));
    const fromPlan = planned
      .filter((c) => !listed.has(c.login))
      .map((c): ConsumerView => {
        const f = failing.find((s) => s.provider === p.module && s.login === c.login);
        return {
          login: c.login,
          consumer: c.consumer,
          interface: c.interface,
          node: c.consumerNode,
          state: f === undefined ? "unknown" : "failing",
          class: f?.class ?? null,
          since: f?.since ?? null,
          why: f?.error ?? "the provider did not answer; its state is not known",
          attempts: f?.attempts ?? null,
        };
      });
    consumers = [...fromPlan, ...consumers];
  }
  const order: Record<ConsumerViewState, number> = {
    failing: 0,
    "awaiting-approval": 1,
    unasked: 2,
    active: 3,
    unknown: 4,
    retired: 5,
    deleted: 6,
  };
  // Never seen connected: the controller's judgement, from each provider's sampling of sessions.
  const unused = new Map(
    statuses
      .filter((c) => c.provider === p.module && c.neverSeenConnected === true)
      .map((c) => [c.login, c.unusedSince]),
  );
  consumers = consumers.map((c) =>
    unused.has(c.login)
      ? { ...c, neverSeenConnected: true as const, unusedSince: unused.get(c.login) ?? c.since ?? "" }
      : c,
  );
  consumers.sort((a, b) => order[a.state] - order[b.state] || a.login.localeCompare(b.login));
  return { ...p, consumers };
}
