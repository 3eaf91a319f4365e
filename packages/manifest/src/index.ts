/**
 * @mesh/manifest: manifests (`module.json`), fleet files (`mesh.yaml`), and everything derived
 * from them — logins, the plan, file paths, contributions and credential files. The controller
 * and the agent both derive through this package, so they can never disagree.
 *
 * ```ts
 * import { loadFleet, loadFleetManifests, checkFleet, derivePlan, contributionsFor, credentialsFor,
 *   formatProblem } from "@mesh/manifest";
 *
 * const fleet = await loadFleet("examples/fleet/mesh.yaml"); // throws FleetError
 * const manifests = await loadFleetManifests(fleet); // throws ManifestError
 * const problems = checkFleet(fleet, manifests);
 * if (problems.length > 0) throw new Error(problems.map(formatProblem).join("\n"));
 * const plan = derivePlan(fleet, manifests);
 * for (const file of contributionsFor(plan, "postgres", "/var/lib/mesh")) console.log(file.path, file.contents);
 * for (const file of credentialsFor(plan, "notes", "/var/lib/mesh")) console.log(file.path, file.contents.url);
 * ```
 */
export * from "./problem.ts";
export * from "./names.ts";
export * from "./manifest.ts";
export * from "./spec.ts";
export * from "./template.ts";
export * from "./run-template.ts";
export * from "./fleet.ts";
export {
  DEFAULT_MODULE_LIMITS,
  effectiveLimits,
  formatLimit,
  formatLimits,
  formatSize,
  isModuleLimits,
  LIMIT_NAMES,
  MAX_PIDS_LIMIT,
  MIN_SIZE_LIMIT,
  parseSize,
  type EffectiveLimits,
  type ModuleLimits,
} from "./module-limits.ts";
export * from "./check-fleet.ts";
export * from "./login.ts";
export * from "./plan.ts";
export * from "./state-paths.ts";
export * from "./contributions.ts";
export * from "./credential.ts";
export * from "./delivery.ts";
export * from "./delivery-parts.ts";
export {
  MAX_MISBEHAVIOUR_TEXT,
  MAX_REPORTED_MISBEHAVIOURS,
  reportedMisbehaviours,
  reportedMisbehaviourSchema,
  type ReportedCounts,
  type ReportedFailure,
  type ReportedMisbehaviour,
  type ReportedProvider,
  type ReportedWaiting,
} from "./provider-report.ts";
export * from "./listen-address.ts";
export * from "./events.ts";
export * from "./check-code.ts";
export * from "./tools.ts";
export {
  boundedJson,
  cleanupDeletedSchema,
  cleanupEntrySchema,
  cleanupListSchema,
  consumerStateSchema,
  consumerStatusSchema,
  describeIssues,
  MAX_ANSWER_DEPTH,
  MAX_REPLY_TEXT,
  parseAnswer,
  parseToolAnswer,
  retireApprovedSchema,
  retireListSchema,
  statusReportSchema,
  TOOL_ANSWER_SCHEMAS,
  toolCallReplySchema,
  type AnswerFault,
  type Frozen,
  type ParsedAnswer,
  type ToolAnswerInputs,
  type ToolAnswers,
} from "./tool-answers.ts";
