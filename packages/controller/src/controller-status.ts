// What `mesh status` shows, built from what the controller serves and what the nodes last reported.
import type { Plan } from "@mesh/manifest";
import type { ModuleReport, NodeReport } from "./node-reports.ts";

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

/** The controller's answer on `STATUS_SUBJECT`. */
export interface ControllerStatus {
  readonly nodes: readonly NodeStatus[];
  readonly consumers: readonly ConsumerStatus[];
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
}

/** The status: every node of the fleet or enrolled, and every consumer of the plan. */
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
  return { nodes, consumers, fleet: { file: s.fleetFile, readAt: s.readAt, refused: s.refused } };
}
