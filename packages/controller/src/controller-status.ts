// What `mesh status` shows, built from what the controller serves and what the nodes last reported.
import type { Plan } from "@mesh/manifest";
import type { ModuleReport, NodeReport } from "./node-reports.ts";
import type { FailingStanding } from "./standings-book.ts";

/** One node as `mesh status` shows it. */
export interface NodeStatus {
  readonly name: string;
  readonly enrolled: boolean;
  /** ISO 8601, or null when the node has not reported since the controller started. */
  readonly lastReportAt: string | null;
  /** The generation of the delivery the node last reported acting on, or null. */
  readonly generation: number | null;
  readonly modules: readonly ModuleReport[];
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
}

/** The controller's answer on `STATUS_SUBJECT`. */
export interface ControllerStatus {
  readonly nodes: readonly NodeStatus[];
  readonly consumers: readonly ConsumerStatus[];
  /** Every consumer a provider says is failing, by provider then login. */
  readonly failing: readonly FailingStatus[];
  readonly fleet: {
    readonly file: string;
    /** ISO 8601: when the fleet being served was read. */
    readonly readAt: string;
    /** Why the fleet file's latest version was refused (one line per problem), when it was. */
    readonly refused: readonly string[] | null;
  };
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
  const failing = (s.failing ?? []).map((f): FailingStatus => {
    const entry = byLogin.get(`${f.provider} ${f.login}`);
    return {
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
    };
  });
  return {
    nodes,
    consumers,
    failing,
    fleet: { file: s.fleetFile, readAt: s.readAt, refused: s.refused },
  };
}
