/**
 * @mesh/agent: the machine's agent. It enrolls its node with its own key pairs, follows the node's
 * own deliveries, unseals its secrets into 0600 files, writes each provider module's contributions
 * and each consumer module's credential files (atomically, only where they changed), supervises the
 * node's modules, and reports how they are doing.
 *
 * ```ts
 * import { startAgent } from "@mesh/agent";
 *
 * const agent = await startAgent({
 *   node: "node-1",
 *   stateDir: "/var/lib/mesh/nodes/node-1",
 *   joinToken: process.env.MESH_JOIN_TOKEN, // needed only until the node has enrolled
 *   logger: { info: console.log, warn: console.warn, error: console.error },
 * });
 * console.log(agent.status().modules);
 * await agent.stop(); // stops every module
 * ```
 */
export { moduleControlPath } from "./module-launch.ts";
export { ledgersPath, moduleCredsPath, moduleKeysPath } from "./module-keys.ts";
export { ModuleLog } from "./module-log.ts";
export type { AgentStatus } from "./node-agent.ts";
export { MisbehavingModules } from "./misbehaving-modules.ts";
export { providerPasswordGate } from "./password-gate.ts";
export { ProviderStandings } from "./provider-standings.ts";
export {
  AgentNotEnrolledError,
  AgentStartAbortedError,
  startAgent,
  stopLeftoverModules,
  type Agent,
  type StartAgentOptions,
} from "./start-agent.ts";
export { runToolCall, type ToolRunnerOptions } from "./tool-runner.ts";
export type { IsolationMode } from "./module-users.ts";
export {
  findProcessesByEnv,
  isRunning,
  ProcessRecords,
  processStartTime,
  stopLeftovers,
  type LeftProcess,
} from "./process-records.ts";
export { lockStateDir, StateLockedError, type StateLock } from "./state-lock.ts";
