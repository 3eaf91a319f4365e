// What one node receives: the part of the plan it takes part in and, sealed to its own key, the
// password of every consumer it runs or provides for. The controller writes it, the agent derives
// every file from it: one definition for both sides.
import type { AdminUrlSource } from "./fleet.ts";
import type { ModuleLimits } from "./module-limits.ts";
import type { Plan, PlanEntry, PlanInstance } from "./plan.ts";

/** The key the controller writes a node's delivery under, in the node's own bucket. */
export const DELIVERY_KEY = "delivery";

/** A module a node runs, and where its manifest is. */
export interface DeliveredModule {
  readonly name: string;
  /**
   * Absolute path of its module.json where the fleet names it: the module's directory (its code,
   * the directory it runs in) is the one holding it, at this path on the node.
   */
  readonly manifest: string;
  /**
   * The manifest's text as it was applied (the fleet carries every manifest it names): the node
   * needs only the module's code, not this file. Absent from a controller of before: the agent
   * reads the file at `manifest`.
   */
  readonly manifestText?: string;
  /** HOST:PORT for its Prometheus metrics when the fleet file sets one; absent: loopback, a free port. */
  readonly metrics?: string;
  /** Variables the fleet file adds to its environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Where the agent reads this provider's admin URL (a path or a variable name, never the URL). */
  readonly admin?: AdminUrlSource;
  /** What it may use of its node, as the fleet file writes them (the agent fills in the defaults). */
  readonly limits?: ModuleLimits;
}

/** One node's delivery, written to `nodeDeliveriesBucket(node)` under `DELIVERY_KEY`. */
export interface Delivery {
  readonly node: string;
  /** Increases with every change the controller publishes for this node. */
  readonly generation: number;
  /**
   * The term of the controller that published it (its lease's): an agent ignores a delivery of a
   * lower term than the newest it has seen, so a paused old leader cannot undo the new one.
   * Absent from a controller of before terms (taken as 0).
   */
  readonly term?: number;
  /** Absolute path of mesh.yaml. */
  readonly fleetFile: string;
  /** The modules this node runs, by name. */
  readonly modules: readonly DeliveredModule[];
  /** Only the instances and consumer entries this node takes part in, as provider or consumer. */
  readonly plan: Plan;
  /** `secretKey(consumer, interface)` -> the password sealed (bus `seal`) to this node's key. */
  readonly secrets: Readonly<Record<string, string>>;
  /**
   * The `secrets` keys whose password was minted by `mesh rotate --now` (a leaked password): the
   * provider takes it without an overlap (no password being retired beside it) and ends the old
   * sessions. Absent when none is.
   */
  readonly cuts?: readonly string[];
  /**
   * `secrets` key -> when its password was minted (ISO 8601), said to its provider in the
   * contributions entry (`minted`), which never puts back a password older than its backend holds.
   * Absent from a controller of before mint times.
   */
  readonly minted?: Readonly<Record<string, string>>;
  /**
   * Module name -> its bus and ledger user JWTs, issued by the controller for the public keys the
   * node's agent reported for that module. Only JWTs: the seeds never leave the node. A module the
   * controller has not issued for yet (its keys not reported yet) is absent.
   */
  readonly credentials?: Readonly<Record<string, ModuleCredential>>;
  /**
   * Module name -> the bus public key (`U…`) the controller will not issue for any more (the
   * module's permissions changed, or the key was revoked): the agent makes the module new key
   * pairs when its bus key is this one, and reports them.
   */
  readonly replaceKeys?: Readonly<Record<string, string>>;
}

/** The two user JWTs of one module: its bus connection's and its ledger connection's. */
export interface ModuleCredential {
  /** Its events: `compilePermissions` of its manifest, nothing else. */
  readonly bus: string;
  /** Its own ledger only (bus `ledgerPermissions`). */
  readonly ledger: string;
}

/** The key of a consumer's password in `Delivery.secrets` and in the sealed-passwords bucket. */
export function secretKey(consumer: string, iface: string): string {
  return `${consumer}/${iface}`;
}

/**
 * The part of `plan` that `node` takes part in: every instance it provides (with all of its
 * consumers, since the provider makes them all), and of every other instance only the consumers
 * that run on `node` (they need the provider's endpoint).
 */
export function nodePlan(plan: Plan, node: string): Plan {
  const instances: PlanInstance[] = [];
  for (const instance of plan.instances) {
    if (instance.node === node) {
      instances.push(instance);
      continue;
    }
    const consumers = instance.consumers.filter((c) => c.consumerNode === node);
    if (consumers.length > 0) instances.push({ ...instance, consumers });
  }
  return { instances };
}

/** Every consumer entry of `plan`, in the plan's order. */
export function planEntries(plan: Plan): PlanEntry[] {
  return plan.instances.flatMap((i) => i.consumers);
}
