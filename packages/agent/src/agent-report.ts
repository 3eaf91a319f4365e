import type { ReportedMisbehaviour } from "@mesh/manifest";
import type { ModulePublicKeys } from "./module-keys.ts";
import type { ModuleStatus } from "./module-process.ts";
import type { ProviderStanding } from "./provider-standings.ts";

/** What an agent publishes on `reportSubject(node)`, on every change and every 10 s. */
export interface AgentReport {
  readonly node: string;
  /** The agent's release (`MESH_RELEASE`): what `mesh status` shows as the node's version. */
  readonly release: string;
  /**
   * The protocol the agent speaks (`PROTOCOL_VERSION`); a report without it is of 0.1.0
   * (protocol 1). The controller works with an agent one protocol apart, either way.
   */
  readonly protocol: number;
  /** The generation of the last delivery applied; 0 before the first. */
  readonly generation: number;
  /** ISO 8601. */
  readonly at: string;
  readonly modules: readonly ModuleStatus[];
  /** What applying the last delivery did to the files. */
  readonly files: { readonly written: number; readonly unchanged: number };
  /**
   * The public keys of each module's bus and ledger key pairs, by module: the controller issues
   * their credentials for them. Never a seed.
   */
  readonly moduleKeys: Readonly<Record<string, ModulePublicKeys>>;
  /**
   * What each provider module of this node says of its consumers, from its own control socket: the
   * failing ones (from their first failure), the set waiting for a person, and counts by state.
   */
  readonly providers?: readonly ProviderStanding[];
  /**
   * The modules of this node that misbehave: what they were asked, what was wrong with the answer
   * and since when, one entry per question, until their next good answer to it.
   */
  readonly misbehaving?: readonly ReportedMisbehaviour[];
  /**
   * Users of this node's mesh (`mesh-<id>-…` in /etc/passwd) whose module no longer runs here, at
   * most 100: the mesh never removes a user; an operator may (`userdel`, see docs/operating.md).
   */
  readonly goneModuleUsers?: readonly string[];
}
