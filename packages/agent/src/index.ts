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
export * from "./agent-report.ts";
export * from "./apply-delivery.ts";
export * from "./delivery.ts";
export * from "./enroll-node.ts";
export * from "./module-launch.ts";
export * from "./module-keys.ts";
export {
  DEFAULT_LOG_KEEP,
  DEFAULT_LOG_MAX_BYTES,
  formatJsonLogLine,
  formatLogLine,
  ModuleLog,
  rotatedLogPath,
  type LogStream,
  type ModuleLogFormat,
  type ModuleLogLimits,
} from "./module-log.ts";
export * from "./module-process.ts";
export * from "./module-supervisor.ts";
export * from "./node-agent.ts";
export * from "./node-identity.ts";
export {
  MisbehavingModules,
  type Misbehaviour,
  type MisbehavingModulesOptions,
} from "./misbehaving-modules.ts";
export { providerPasswordGate, type PasswordGateOptions } from "./password-gate.ts";
export { MAX_REPORTED_FAILING, ProviderStandings, type ProviderStanding } from "./provider-standings.ts";
export * from "./start-agent.ts";
export * from "./tool-runner.ts";
export {
  ModuleIsolations,
  ModuleDirError,
  ownerOf,
  type ModuleIdentity,
  type ModuleIsolation,
} from "./module-isolation.ts";
export {
  ISOLATION_MODES,
  meshUserPrefix,
  moduleUserComment,
  ModuleUserError,
  ModuleUsers,
  moduleUserName,
  usersOfGoneModules,
  type IsolationMode,
  type ModuleUser,
} from "./module-users.ts";
export { loadOrMakeMeshId, MESH_ID_FILE, MESH_ID_PATTERN, MeshIdError, newMeshId } from "./mesh-id.ts";
export {
  AGENT_CGROUP,
  CgroupError,
  cgroupLayout,
  ModuleCgroup,
  ModuleCgroups,
  type CgroupHierarchy,
  type CgroupLayout,
  type CgroupVersion,
  type LimitCounters,
  type ModuleCgroupsOptions,
} from "./module-cgroups.ts";
export {
  HOME_MEASURE_EVERY_MS,
  HomeSizes,
  measureWithDu,
  type HomeSize,
  type MeasureHome,
} from "./home-sizes.ts";
export { UnsafeModuleFileError } from "./safe-open.ts";
export {
  findProcessesByEnv,
  isRunning,
  processStartTime,
  ProcessRecords,
  stopLeftovers,
  stopProcesses,
  type LeftoversOptions,
  type LeftProcess,
  type ProcessRecord,
  type StopProcessesOptions,
} from "./process-records.ts";
export { lockStateDir, stateLockPath, StateLockedError, type StateLock } from "./state-lock.ts";
