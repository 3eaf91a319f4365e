// What `mesh status` shows, built from what the controller serves and what the nodes last reported.
import {
  disagrees,
  endpointAtServed,
  formatHostPort,
  MESH_RELEASE,
  PROTOCOL_VERSION,
  releaseOfProtocol,
  STATE_FORMAT,
  UNVERSIONED_PROTOCOL,
  worksWithProtocol,
  type Plan,
} from "@mesh/manifest";
import type {
  ModuleReport,
  NodeReport,
  ReportedCounts,
  ReportedMisbehaviour,
  ReportedProvider,
  ReportedWaiting,
} from "./node-reports.ts";
import type { FailingStanding } from "./standings-book.ts";
import type { WaitingWrite } from "./pending-writes.ts";

/** Which controller leads, as `mesh status` shows it. */
export interface LeaderStatus {
  /** This controller's id. */
  readonly self: string;
  /** Whether this controller leads now. */
  readonly leading: boolean;
  /** The id of the controller holding the lease as this one last saw it, or null when none does. */
  readonly leader: string | null;
  /** The lease's term as last seen, or null. */
  readonly term: number | null;
  /** The lease term in which the fleet being served was stored (0: before terms), or null when unknown. */
  readonly fleetTerm: number | null;
}

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
  /**
   * The node's mesh as its agent last said: its release (null when it says none: 0.1.0), its
   * protocol, and whether this controller works with it (one protocol apart, either way). Absent
   * until the node reports.
   */
  readonly version?: NodeVersion;
}

/** A node's mesh release and protocol, as `mesh status` shows them. */
export interface NodeVersion {
  readonly release: string | null;
  readonly protocol: number;
  /** Whether this controller works with it; when not, `problem` says what to upgrade. */
  readonly compatible: boolean;
  readonly problem?: string;
}

/** One consumer of one interface as `mesh status` shows it. */
export interface ConsumerStatus {
  readonly consumer: string;
  readonly interface: string;
  readonly login: string;
  readonly provider: string;
  /** The consumer's node. */
  readonly node: string;
  /**
   * True when its provider has not seen it connected since its password was applied, for longer
   * than the bound (`NEVER_SEEN_AFTER_MS`): an app pointed at another server, misconfigured, or
   * never started. Absent otherwise (seen, within the bound, or the provider cannot tell).
   */
  readonly neverSeenConnected?: true;
  /** ISO 8601: since when its current password stands unused, when `neverSeenConnected`. */
  readonly unusedSince?: string;
  /** The rotation of its password under way, while one is; absent otherwise. */
  readonly rotation?: RotationStatus;
  /** ISO 8601: when the schedule (the fleet's `rotate:`) rotates its password next; absent when none is set. */
  readonly rotationDue?: string;
}

/**
 * Where a rotation stands, as `mesh status` shows it: `asked` from the rotation until its provider
 * is heard on it (the new password is being delivered to it); `add` while the provider makes the
 * new password valid beside the old; `drain` while both are valid and the apps move, until `until`,
 * when the old one goes (`remove`). A cut-over (a backend that holds one password) shows `asked`
 * only, until the provider is heard after it.
 */
export interface RotationStatus {
  readonly phase: "asked" | "add" | "drain";
  /** ISO 8601: since when it is in this phase (for `add` and `drain`: when the provider began it). */
  readonly since: string;
  /** ISO 8601: when the old password goes, once the provider says. */
  readonly until?: string;
}

/** How long a consumer may go unseen after its password was applied before it is said (10 min). */
export const NEVER_SEEN_AFTER_MS = 10 * 60_000;

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
  /**
   * Where it says it serves its consumers (`host:port`, from its admin URL), as its node last
   * reported; absent when it has not said.
   */
  readonly serves?: string;
  /** Where its consumers are sent, per interface with an endpoint, and whether that disagrees. */
  readonly endpoints?: readonly EndpointStatus[];
}

/**
 * Where one provided interface's consumers are sent, as `mesh status` shows it: the fleet's
 * `endpoint:` (kept as written: a public address, maybe), else where the provider reports it
 * serves, else (not heard yet) the manifest's default.
 */
export interface EndpointStatus {
  readonly interface: string;
  /** `host:port` consumers' credentials name. */
  readonly given: string;
  /** Where that comes from. */
  readonly from: "fleet" | "provider" | "manifest";
  /** `host:port` the provider reports it serves (its admin URL), or null when it has not said. */
  readonly serves: string | null;
  /** True when the fleet's `endpoint:` and where the provider serves are not the same server. */
  readonly disagrees: boolean;
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
  /** The answering controller's own mesh: its release, protocol and state format. */
  readonly mesh?: { readonly release: string; readonly protocol: number; readonly stateFormat: number };
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
  /** The bound of `neverSeenConnected` (default `NEVER_SEEN_AFTER_MS`). */
  readonly neverSeenAfterMs?: number;
  /** Now, ms since the epoch (default the clock). */
  readonly now?: number;
  /** When this controller last rotated each consumer's password (ISO 8601), by `consumer interface`. */
  readonly rotated?: ReadonlyMap<string, string>;
  /** When the schedule rotates each consumer's password next (ISO 8601), by `consumer interface`. */
  readonly rotationDue?: ReadonlyMap<string, string>;
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
      ...(report === undefined ? {} : { version: nodeVersion(report) }),
    };
  });
  const now = s.now ?? Date.now();
  const bound = s.neverSeenAfterMs ?? NEVER_SEEN_AFTER_MS;
  // What each provider's node says of its unseen consumers (a node speaks only for its own providers).
  const unseenSince = new Map<string, string>();
  for (const i of s.plan.instances) {
    const said = s.reports.get(i.node)?.providers?.find((r) => r.module === i.provider);
    for (const u of said?.unseen ?? []) unseenSince.set(`${i.provider} ${u.login}`, u.since);
  }
  const consumers = s.plan.instances.flatMap((i) =>
    i.consumers.map((c): ConsumerStatus => {
      const since = unseenSince.get(`${c.provider} ${c.login}`);
      const unused = since !== undefined && now - Date.parse(since) >= bound;
      const rotation = rotationOf(s, i.node, c);
      const due = s.rotationDue?.get(`${c.consumer} ${c.interface}`);
      return {
        consumer: c.consumer,
        interface: c.interface,
        login: c.login,
        provider: c.provider,
        node: c.consumerNode,
        ...(unused ? { neverSeenConnected: true as const, unusedSince: since } : {}),
        ...(rotation === undefined ? {} : { rotation }),
        ...(due === undefined ? {} : { rotationDue: due }),
      };
    }),
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
    const serves = r?.provider.serves;
    const endpoints = s.plan.instances
      .filter((i) => i.provider === provider)
      .flatMap((i): EndpointStatus[] => {
        const told = i.endpoint;
        if (told?.port === undefined) return [];
        const learnt = told.defaulted === true && serves !== undefined;
        const at = learnt ? endpointAtServed(told, serves) : told;
        return [
          {
            interface: i.interface,
            given: formatHostPort({ host: at.host, port: at.port ?? told.port }),
            from: told.defaulted !== true ? "fleet" : learnt ? "provider" : "manifest",
            serves: serves === undefined ? null : formatHostPort(serves),
            disagrees:
              told.defaulted !== true &&
              serves !== undefined &&
              disagrees({ host: told.host, port: told.port }, serves),
          },
        ];
      });
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
      ...(serves === undefined ? {} : { serves: formatHostPort(serves) }),
      ...(endpoints.length === 0 ? {} : { endpoints }),
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
    mesh: { release: MESH_RELEASE, protocol: PROTOCOL_VERSION, stateFormat: STATE_FORMAT },
  };
}

/**
 * Where the rotation of `c`'s password stands: the provider's word (its node's report) when it names
 * one; else `asked` while the controller rotated it after the provider's node last asked it.
 */
export function rotationOf(
  s: Pick<StatusSources, "reports" | "rotated">,
  providerNode: string,
  c: {
    readonly consumer: string;
    readonly interface: string;
    readonly provider: string;
    readonly login: string;
  },
): RotationStatus | undefined {
  const said = s.reports.get(providerNode)?.providers?.find((r) => r.module === c.provider);
  const reported = said?.rotating?.find((r) => r.login === c.login);
  if (reported !== undefined) return { phase: reported.phase, since: reported.since, until: reported.until };
  const asked = s.rotated?.get(`${c.consumer} ${c.interface}`);
  if (asked === undefined) return undefined;
  const heard = said?.answered === true ? Date.parse(said.askedAt) : -Infinity;
  return heard > Date.parse(asked) ? undefined : { phase: "asked", since: asked };
}

/** What a node's report says of its mesh, and whether this controller works with it. */
export function nodeVersion(report: Pick<NodeReport, "release" | "protocol">): NodeVersion {
  const release = report.release ?? null;
  const protocol = report.protocol ?? UNVERSIONED_PROTOCOL;
  if (worksWithProtocol(protocol)) return { release, protocol, compatible: true };
  const older = protocol < PROTOCOL_VERSION;
  return {
    release,
    protocol,
    compatible: false,
    problem:
      `its agent (mesh ${release ?? releaseOfProtocol(protocol) ?? "?"}, protocol ${protocol}) is more than one ` +
      `protocol ${older ? "older" : "newer"} than this controller (mesh ${MESH_RELEASE}, protocol ${PROTOCOL_VERSION}): ` +
      `upgrade ${older ? "the node" : "the controller"} (docs/operating.md, "Upgrading")`,
  };
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
