// What `mesh status` shows, built from what the controller serves and what the nodes last reported.
import type { Plan } from "@mesh/manifest";
import type {
  ModuleReport,
  NodeReport,
  ReportedCounts,
  ReportedMisbehaviour,
  ReportedProvider,
  ReportedWaiting,
} from "./node-reports.ts";
import type { FailingStanding } from "./standings-book.ts";
import type { LeaderStatus } from "./fleet-controller.ts";
import type { WaitingWrite } from "./pending-writes.ts";

/** One node as `mesh status` shows it. */
export interface NodeStatus {
  readonly name: string;
  readonly enrolled: boolean;
  /** ISO 8601, or null when the node has not reported since the controller started. */
  readonly lastReportAt: string | null;
  /** The generation of the delivery the node last reported acting on, or null. */
  readonly generation: number | null;
  readonly modules: readonly ModuleReport[];
  /** Users of the node's mesh whose module no longer runs there, as it last reported. */
  readonly goneModuleUsers?: readonly string[];
}

/** One consumer of one interface as `mesh status` shows it. */
export interface ConsumerStatus {
  readonly consumer: string;
  readonly interface: string;
  readonly login: string;
  readonly provider: string;
  /** The consumer's node. */
  readonly node: string;
}

/** One consumer its provider says is failing (DESIGN §3 rule 6), as `mesh status` shows it. */
export interface FailingStatus {
  /** The provider module. */
  readonly provider: string;
  readonly interface: string;
  /** The consumer module when the fleet being served has it, else its login. */
  readonly consumer: string;
  readonly login: string;
  /** The consumer's node (as the provider says, else as the fleet says), or null. */
  readonly node: string | null;
  readonly class: string;
  /** ISO 8601: when its run of failures began. */
  readonly since: string;
  readonly attempts: number;
  /** The last error, scrubbed of passwords by the provider. */
  readonly error: string;
  /** ISO 8601: when the provider said so. */
  readonly at: string;
  /**
   * Who said it: `report`, the provider's own status as its node reported it (from the first
   * failure); `announcement`, its `provisioner.failing` on the bus (after 5 minutes of failures).
   */
  readonly said?: "report" | "announcement";
}

/** One provider module as `mesh status` shows it: what it says of its consumers, as its node reports. */
export interface ProviderStatus {
  readonly provider: string;
  readonly node: string;
  readonly interfaces: readonly string[];
  /** Whether it answered its node's last ask; false also when its node has not reported on it. */
  readonly answered: boolean;
  /** Why it did not answer, or that its node has not reported on it; null when it answered. */
  readonly problem: string | null;
  /** ISO 8601: when its node last asked it, or null. */
  readonly askedAt: string | null;
  readonly lastPassAt: string | null;
  readonly contributionsProblem: string | null;
  /** How many of its consumers are in each state; null when it has not been heard. */
  readonly counts: ReportedCounts | null;
  /** The set of its consumers waiting for a person to approve their retirement. */
  readonly waiting: ReportedWaiting | null;
}

/**
 * One way a module misbehaves, as its node reports it: its answer to `answer` (a tool) was
 * malformed, too large, too slow or cut off, and nothing of it was used, since `since`.
 */
export interface MisbehavingStatus extends ReportedMisbehaviour {
  /** The module's node. */
  readonly node: string;
}

/** The controller's answer on `STATUS_SUBJECT`. */
export interface ControllerStatus {
  readonly nodes: readonly NodeStatus[];
  readonly consumers: readonly ConsumerStatus[];
  /** Every consumer a provider says is failing, by provider then login. */
  readonly failing: readonly FailingStatus[];
  /** Every provider module of the fleet, with its counts and the retirement waiting for a person. */
  readonly providers: readonly ProviderStatus[];
  /** Every module whose answers its node's agent does not use, by node, module and question. */
  readonly misbehaving?: readonly MisbehavingStatus[];
  readonly fleet: {
    readonly file: string;
    /** ISO 8601: when the fleet being served was read. */
    readonly readAt: string;
    /** Why the fleet file's latest version was refused (one line per problem), when it was. */
    readonly refused: readonly string[] | null;
  };
  /** Which controller leads (the lease's holder and term), as the controller answering saw it. */
  readonly controller?: LeaderStatus;
  /** What the controller accepted and the bus could not store yet: each is tried again until stored. */
  readonly waiting?: readonly WaitingWrite[];
}

/** What the status is built from. */
export interface StatusSources {
  readonly plan: Plan;
  readonly fleetFile: string;
  readonly readAt: string;
  readonly refused: readonly string[] | null;
  readonly fleetNodes: readonly string[];
  readonly enrolled: ReadonlySet<string>;
  readonly reports: ReadonlyMap<string, NodeReport>;
  /** What the providers last said is failing (`StandingsBook.failing()`). */
  readonly failing?: readonly FailingStanding[];
  /** Which controller leads, when the controller keeps a lease. */
  readonly leader?: LeaderStatus;
  /** What waits to be stored (`PendingWrites.waiting()`). */
  readonly waiting?: readonly WaitingWrite[];
}

/** The status: every node of the fleet or enrolled, every consumer of the plan, and every failing one. */
export function controllerStatus(s: StatusSources): ControllerStatus {
  const names = [...new Set([...s.fleetNodes, ...s.enrolled])].sort();
  const nodes = names.map((name): NodeStatus => {
    const report = s.reports.get(name);
    return {
      name,
      enrolled: s.enrolled.has(name),
      lastReportAt: report?.receivedAt ?? null,
      generation: report?.generation ?? null,
      modules: report?.modules ?? [],
      ...(report?.goneModuleUsers === undefined ? {} : { goneModuleUsers: report.goneModuleUsers }),
    };
  });
  const consumers = s.plan.instances.flatMap((i) =>
    i.consumers.map((c) => ({
      consumer: c.consumer,
      interface: c.interface,
      login: c.login,
      provider: c.provider,
      node: c.consumerNode,
    })),
  );
  const byLogin = new Map(
    s.plan.instances.flatMap((i) => i.consumers.map((c) => [`${i.provider} ${c.login}`, c])),
  );
  // A node speaks only for the providers the fleet places on it.
  const reported = new Map<string, { provider: ReportedProvider; at: string; interface: string }>();
  const interfaces = new Map<string, { node: string; interfaces: string[] }>();
  for (const i of s.plan.instances) {
    const p = interfaces.get(i.provider) ?? { node: i.node, interfaces: [] };
    p.interfaces.push(i.interface);
    interfaces.set(i.provider, p);
    const report = s.reports.get(i.node);
    const said = report?.providers?.find((r) => r.module === i.provider);
    if (report === undefined || said === undefined || reported.has(i.provider)) continue;
    // The node's clock may be ahead: never later than the controller heard it.
    const at = said.askedAt < report.receivedAt ? said.askedAt : report.receivedAt;
    reported.set(i.provider, { provider: said, at, interface: i.interface });
  }
  const failing: FailingStatus[] = [];
  const fromReport = new Map<string, FailingStatus>();
  for (const [provider, r] of reported) {
    if (!r.provider.answered) continue;
    for (const f of r.provider.failing) {
      const entry = byLogin.get(`${provider} ${f.login}`);
      fromReport.set(`${provider} ${f.login}`, {
        provider,
        interface: entry?.interface ?? r.interface,
        consumer: entry?.consumer ?? f.login,
        login: f.login,
        node: f.node ?? entry?.consumerNode ?? null,
        class: f.class,
        since: f.since,
        attempts: f.attempts,
        error: f.error,
        at: r.at,
        said: "report",
      });
    }
  }
  for (const f of s.failing ?? []) {
    const key = `${f.provider} ${f.login}`;
    const mine = fromReport.get(key);
    if (mine !== undefined && mine.at >= f.at) continue;
    const r = reported.get(f.provider);
    // The provider's own word, newer than the announcement and complete, says it fails no more.
    const whole =
      r !== undefined && r.provider.answered && r.provider.counts.failing <= r.provider.failing.length;
    if (mine === undefined && whole && r.at >= f.at) continue;
    fromReport.delete(key);
    const entry = byLogin.get(key);
    failing.push({
      provider: f.provider,
      interface: f.interface,
      consumer: entry?.consumer ?? f.login,
      login: f.login,
      node: f.node ?? entry?.consumerNode ?? null,
      class: f.class,
      since: f.since,
      attempts: f.attempts,
      error: f.error,
      at: f.at,
      said: "announcement",
    });
  }
  failing.push(...fromReport.values());
  failing.sort((a, b) => compare(a.provider, b.provider) || compare(a.login, b.login));
  const providers = [...interfaces].map(([provider, p]): ProviderStatus => {
    const r = reported.get(provider);
    return {
      provider,
      node: p.node,
      interfaces: p.interfaces,
      answered: r?.provider.answered ?? false,
      problem: r === undefined ? `node ${p.node} has not reported on ${provider} yet` : r.provider.problem,
      askedAt: r?.at ?? null,
      lastPassAt: r?.provider.lastPassAt ?? null,
      contributionsProblem: r?.provider.contributionsProblem ?? null,
      counts: r?.provider.answered ? r.provider.counts : null,
      waiting: r?.provider.answered ? r.provider.waiting : null,
    };
  });
  providers.sort((a, b) => compare(a.provider, b.provider));
  const misbehaving = names.flatMap((node) =>
    (s.reports.get(node)?.misbehaving ?? []).map((m): MisbehavingStatus => ({ node, ...m })),
  );
  return {
    nodes,
    consumers,
    failing,
    providers,
    misbehaving,
    fleet: { file: s.fleetFile, readAt: s.readAt, refused: s.refused },
    ...(s.leader !== undefined ? { controller: s.leader } : {}),
    waiting: s.waiting ?? [],
  };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
