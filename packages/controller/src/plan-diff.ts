// What a fleet change will do, said before it is made: the fleet file as it reads now against what
// the mesh serves. Pure, so that `mesh plan` and a test can both ask it, and the retirement rule it
// foretells is the harness's own (`approvalReason` from the sdk), never a copy that could drift.
import { isDeepStrictEqual } from "node:util";
import { approvalReason, DEFAULT_RETIREMENT_LIMITS, type RetirementBound } from "@mesh/sdk/provider";
import {
  effectiveLimits,
  secretKey,
  type EffectiveLimits,
  type Endpoint,
  type PlanEntry,
  type PlanInstance,
} from "@mesh/manifest";
import type { FleetPlan } from "./fleet-plan.ts";

/** The part of a fleet a plan compares: what `loadFleetPlan` reads and what the controller serves. */
export type ComparedFleet = Pick<FleetPlan, "plan" | "nodes" | "modules">;

/** A mesh that serves nothing yet: compared with it, everything is new. */
export const EMPTY_FLEET: ComparedFleet = Object.freeze({
  plan: Object.freeze({ instances: [] }),
  nodes: [],
  modules: [],
});

/** The part of the harness's retirement bound that decides what waits for a person. */
export type RetirementLimits = Pick<RetirementBound, "stablePasses" | "retireAtOnce" | "retireFraction">;

/** What the comparison needs besides the two fleets. */
export interface PlanDiffOptions {
  /**
   * `secretKey(consumer, interface)` of every password the controller keeps. A consumer created
   * with a kept password (asked for again, or moved to another provider) gets that one back; any
   * other gets a new one minted. Default: none kept.
   */
  readonly keptPasswords?: Iterable<string>;
  /** `provider`'s retirement bound when it is not the harness's default. */
  readonly limitsOf?: (provider: string) => RetirementLimits | undefined;
}

/** One consumer, as a plan names it. */
export interface PlannedConsumer {
  readonly consumer: string;
  readonly interface: string;
  readonly login: string;
  /** The consumer's node: where it will run (or, retiring, where it ran). */
  readonly node: string;
}

/** A consumer the provider will make. */
export interface ConsumerCreate extends PlannedConsumer {
  /** `mint`: a new password; `kept`: the controller already keeps one for this consumer and interface. */
  readonly password: "mint" | "kept";
}

/** One thing that changes about a consumer the provider keeps serving. */
export interface ConsumerFieldChange {
  /**
   * `node`: the consumer runs elsewhere (its credential and password files move there);
   * `address`: its node's address; `values` / `derived`: what the provider makes for it;
   * `provider-node`: its provider runs elsewhere.
   */
  readonly what: "node" | "address" | "values" | "derived" | "provider-node";
  readonly from: unknown;
  readonly to: unknown;
}

/** A consumer whose entry changes. */
export interface ConsumerChange extends PlannedConsumer {
  readonly changes: readonly ConsumerFieldChange[];
  /**
   * Whether the provider applies it again in its backend (values or derived changed, or the
   * provider now runs elsewhere). The password is kept either way.
   */
  readonly reapplied: boolean;
}

/** The set a provider will stop being asked for, and whether it retires on its own. */
export interface PlannedRetirement {
  readonly logins: readonly string[];
  /**
   * The active consumers the provider holds when it decides: those it serves now and those this
   * change makes (the harness counts after it creates).
   */
  readonly held: number;
  /** Whether the set is past the bound and waits for a person's `retire approve`. */
  readonly needsApproval: boolean;
  /** Why it waits, in the harness's words; null when it retires on its own. */
  readonly reason: string | null;
  readonly limits: RetirementLimits;
}

/** What happens to one provided interface instance. */
export interface ProviderPlan {
  readonly provider: string;
  readonly interface: string;
  /** Where it runs after the change (removed: where it ran). */
  readonly node: string;
  /** `new` / `removed` from the fleet, `moved` to another node, or `same`. */
  readonly change: "new" | "removed" | "moved" | "same";
  /** Where it ran before, when it moves. */
  readonly previousNode: string | null;
  /** Its endpoint before and after, as a URL without path, when it changes (credential files change). */
  readonly endpoint: { readonly from: string | null; readonly to: string | null } | null;
  /** How many consumers it serves now. */
  readonly holds: number;
  readonly creates: readonly ConsumerCreate[];
  readonly changes: readonly ConsumerChange[];
  readonly retires: readonly PlannedConsumer[];
  /** The retirement of `retires`, or null when nothing retires (or the provider leaves). */
  readonly retirement: PlannedRetirement | null;
  /**
   * Consumers of a provider that leaves the fleet: nothing runs to retire them, so their logins
   * and data stay in the backend as they are.
   */
  readonly leftInBackend: readonly PlannedConsumer[];
}

/**
 * A module that starts, stops, moves to another node, restarts with another manifest or metrics
 * address, or runs on under other limits (set on its cgroup as it runs, no restart).
 */
export interface ModuleChange {
  readonly module: string;
  readonly change: "start" | "stop" | "move" | "restart" | "limits";
  /** Where it runs after the change (stop: where it ran). */
  readonly node: string;
  readonly previousNode: string | null;
  readonly manifest: string;
  readonly previousManifest: string | null;
  /** When its metrics address changes: the fleet file's `metrics` before and after (null: not set). */
  readonly metrics?: { readonly from: string | null; readonly to: string | null };
  /**
   * The limits it runs under after the change, defaults filled in (a start or a move shows them
   * all), and before when they change; absent for a stop.
   */
  readonly limits?: { readonly from: EffectiveLimits | null; readonly to: EffectiveLimits };
}

/** A node added to or removed from the fleet. */
export interface NodeChange {
  readonly node: string;
  readonly change: "add" | "remove";
}

/** The counts of a plan, for its one-line summary. */
export interface PlanSummary {
  readonly create: number;
  /** Of the creates, how many get a new password. */
  readonly mint: number;
  readonly change: number;
  readonly retire: number;
  /** Of the retirements, how many wait for a person. */
  readonly awaitingApproval: number;
  readonly leftInBackend: number;
  readonly moduleStart: number;
  readonly moduleStop: number;
  readonly moduleMove: number;
  readonly moduleRestart: number;
  /** Modules that run on under other limits. */
  readonly moduleLimits: number;
  readonly nodesAdded: number;
  readonly nodesRemoved: number;
}

/** Everything a fleet change will do. */
export interface FleetPlanDiff {
  /** Whether anything at all changes. */
  readonly changed: boolean;
  /** Only the instances something happens to, by provider then interface. */
  readonly providers: readonly ProviderPlan[];
  /** By module name. */
  readonly modules: readonly ModuleChange[];
  /** By node name. */
  readonly nodes: readonly NodeChange[];
  readonly summary: PlanSummary;
}

const byName = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
const instanceKey = (i: Pick<PlanInstance, "provider" | "interface">): string =>
  `${i.provider} ${i.interface}`;

/** The endpoint's address as a person reads it: `postgresql://10.0.0.2:5432`. */
function endpointAddress(e: Endpoint | undefined): string | null {
  if (e === undefined) return null;
  return `${e.scheme}://${e.host}${e.port === undefined ? "" : `:${e.port}`}`;
}

/** Whether two values hold the same data once sent as JSON (key order and absent keys aside). */
function sameData(a: unknown, b: unknown): boolean {
  const asSent = (v: unknown): unknown => (v === undefined ? null : JSON.parse(JSON.stringify(v)));
  return isDeepStrictEqual(asSent(a), asSent(b));
}

const named = (e: PlanEntry): PlannedConsumer => ({
  consumer: e.consumer,
  interface: e.interface,
  login: e.login,
  node: e.consumerNode,
});

function fieldChanges(before: PlanEntry, after: PlanEntry): ConsumerFieldChange[] {
  const changes: ConsumerFieldChange[] = [];
  if (before.consumerNode !== after.consumerNode)
    changes.push({ what: "node", from: before.consumerNode, to: after.consumerNode });
  if ((before.consumerAt ?? null) !== (after.consumerAt ?? null))
    changes.push({ what: "address", from: before.consumerAt ?? null, to: after.consumerAt ?? null });
  if (!sameData(before.values, after.values))
    changes.push({ what: "values", from: before.values, to: after.values });
  if (!sameData(before.derived, after.derived))
    changes.push({ what: "derived", from: before.derived, to: after.derived });
  if (before.providerNode !== after.providerNode)
    changes.push({ what: "provider-node", from: before.providerNode, to: after.providerNode });
  return changes;
}

/**
 * Compares the fleet the mesh serves (`served`; `EMPTY_FLEET` when none runs) with the fleet as it
 * reads now (`next`), and says what applying `next` will do: per provided interface, the consumers
 * its provider creates (and whether a password is minted), changes, and retires — with whether the
 * retirement waits for a person under the provider's bound, counted as the harness counts —; the
 * modules that start, stop or move and the nodes added or removed. Touches nothing.
 */
export function diffFleetPlans(
  served: ComparedFleet,
  next: ComparedFleet,
  options: PlanDiffOptions = {},
): FleetPlanDiff {
  const kept = new Set(options.keptPasswords ?? []);
  const before = new Map(served.plan.instances.map((i) => [instanceKey(i), i]));
  const after = new Map(next.plan.instances.map((i) => [instanceKey(i), i]));
  const keys = [...new Set([...before.keys(), ...after.keys()])];

  const providers: ProviderPlan[] = [];
  for (const key of keys) {
    const was = before.get(key);
    const now = after.get(key);
    const instance = now ?? was;
    if (instance === undefined) continue;
    const old = new Map((was?.consumers ?? []).map((c) => [c.login, c]));
    const wanted = new Map((now?.consumers ?? []).map((c) => [c.login, c]));

    const creates: ConsumerCreate[] = [];
    const changes: ConsumerChange[] = [];
    const gone: PlannedConsumer[] = [];
    for (const [login, entry] of wanted) {
      const prior = old.get(login);
      if (prior === undefined) {
        const password = kept.has(secretKey(entry.consumer, entry.interface)) ? "kept" : "mint";
        creates.push({ ...named(entry), password });
        continue;
      }
      const fields = fieldChanges(prior, entry);
      if (fields.length > 0) {
        const reapplied = fields.some(
          (f) => f.what === "values" || f.what === "derived" || f.what === "provider-node",
        );
        changes.push({ ...named(entry), changes: fields, reapplied });
      }
    }
    for (const [login, entry] of old) if (!wanted.has(login)) gone.push(named(entry));

    const change: ProviderPlan["change"] =
      was === undefined ? "new" : now === undefined ? "removed" : was.node !== now.node ? "moved" : "same";
    const from = endpointAddress(was?.endpoint);
    const to = endpointAddress(now?.endpoint);
    const endpoint = was !== undefined && now !== undefined && from !== to ? { from, to } : null;

    let retirement: PlannedRetirement | null = null;
    const retires = now === undefined ? [] : gone;
    if (retires.length > 0) {
      const limits = options.limitsOf?.(instance.provider) ?? DEFAULT_RETIREMENT_LIMITS;
      const held = old.size + creates.length;
      const reason = approvalReason(retires.length, held, limits) ?? null;
      retirement = {
        logins: retires.map((r) => r.login),
        held,
        needsApproval: reason !== null,
        reason,
        limits,
      };
    }
    const plan: ProviderPlan = {
      provider: instance.provider,
      interface: instance.interface,
      node: instance.node,
      change,
      previousNode: change === "moved" && was !== undefined ? was.node : null,
      endpoint,
      holds: old.size,
      creates: creates.sort((a, b) => byName(a.consumer, b.consumer)),
      changes: changes.sort((a, b) => byName(a.consumer, b.consumer)),
      retires: retires.sort((a, b) => byName(a.consumer, b.consumer)),
      retirement,
      leftInBackend: now === undefined ? gone.sort((a, b) => byName(a.consumer, b.consumer)) : [],
    };
    const eventful =
      change !== "same" ||
      endpoint !== null ||
      creates.length + changes.length + retires.length + plan.leftInBackend.length > 0;
    if (eventful) providers.push(plan);
  }
  providers.sort((a, b) => byName(a.provider, b.provider) || byName(a.interface, b.interface));

  const modules: ModuleChange[] = [];
  const modulesBefore = new Map(served.modules.map((m) => [m.name, m]));
  const modulesAfter = new Map(next.modules.map((m) => [m.name, m]));
  for (const name of [...new Set([...modulesBefore.keys(), ...modulesAfter.keys()])].sort(byName)) {
    const was = modulesBefore.get(name);
    const now = modulesAfter.get(name);
    if (was === undefined && now !== undefined) {
      modules.push({
        module: name,
        change: "start",
        node: now.node,
        previousNode: null,
        manifest: now.manifest,
        previousManifest: null,
        limits: { from: null, to: effectiveLimits(now.limits) },
      });
    } else if (was !== undefined && now === undefined) {
      modules.push({
        module: name,
        change: "stop",
        node: was.node,
        previousNode: null,
        manifest: was.manifest,
        previousManifest: null,
      });
    } else if (was !== undefined && now !== undefined) {
      // A new metrics address is a new environment, and the agent restarts the module for it.
      const metrics = { from: was.metrics ?? null, to: now.metrics ?? null };
      const metricsChange = metrics.from !== metrics.to;
      const limits = { from: effectiveLimits(was.limits), to: effectiveLimits(now.limits) };
      const limitsChange = JSON.stringify(limits.from) !== JSON.stringify(limits.to);
      const moved = was.node !== now.node;
      if (!moved && was.manifest === now.manifest && !metricsChange && !limitsChange) continue;
      const restarts = moved || was.manifest !== now.manifest || metricsChange;
      modules.push({
        module: name,
        change: moved ? "move" : restarts ? "restart" : "limits",
        node: now.node,
        previousNode: moved ? was.node : null,
        manifest: now.manifest,
        previousManifest: was.manifest !== now.manifest ? was.manifest : null,
        ...(metricsChange ? { metrics } : {}),
        ...(limitsChange || moved ? { limits } : {}),
      });
    }
  }

  const nodesBefore = new Set(served.nodes);
  const nodesAfter = new Set(next.nodes);
  const nodes: NodeChange[] = [
    ...[...nodesAfter].filter((n) => !nodesBefore.has(n)).map((node) => ({ node, change: "add" as const })),
    ...[...nodesBefore]
      .filter((n) => !nodesAfter.has(n))
      .map((node) => ({ node, change: "remove" as const })),
  ].sort((a, b) => byName(a.node, b.node));

  const count = (pick: (p: ProviderPlan) => number): number => providers.reduce((n, p) => n + pick(p), 0);
  const moduleCount = (change: ModuleChange["change"]): number =>
    modules.filter((m) => m.change === change).length;
  const summary: PlanSummary = {
    create: count((p) => p.creates.length),
    mint: count((p) => p.creates.filter((c) => c.password === "mint").length),
    change: count((p) => p.changes.length),
    retire: count((p) => p.retires.length),
    awaitingApproval: count((p) => (p.retirement?.needsApproval === true ? p.retires.length : 0)),
    leftInBackend: count((p) => p.leftInBackend.length),
    moduleStart: moduleCount("start"),
    moduleStop: moduleCount("stop"),
    moduleMove: moduleCount("move"),
    moduleRestart: moduleCount("restart"),
    moduleLimits: moduleCount("limits"),
    nodesAdded: nodes.filter((n) => n.change === "add").length,
    nodesRemoved: nodes.filter((n) => n.change === "remove").length,
  };
  const changed = providers.length > 0 || modules.length > 0 || nodes.length > 0;
  return { changed, providers, modules, nodes, summary };
}
