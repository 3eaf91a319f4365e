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
export type { Logger } from "./logger.ts";
export { formatProblem, ProblemsError, type Problem } from "./problem.ts";
export { eventNameProblem, isInterfaceName, isModuleName, MODULE_NAME_RULE } from "./names.ts";
export {
  loadManifest,
  MANIFEST_MAX_BYTES,
  ManifestError,
  parseManifest,
  readManifestText,
  type Manifest,
  type OnNewPassword,
  type RunCommand,
} from "./manifest.ts";
export { deriveValues } from "./spec.ts";
export { s3BucketName } from "./template.ts";
export { namesMeshTargets, namesModuleMetrics, renderRunTemplate, secretInterfaces } from "./run-template.ts";
export {
  ADMIN_URL_VARIABLE,
  FleetError,
  loadFleet,
  loadFleetManifests,
  parseFleet,
  readFleetText,
  type AdminUrlSource,
  type Fleet,
} from "./fleet.ts";
export { rotateMinimumMs } from "./rotation-period.ts";
export {
  DEFAULT_MODULE_LIMITS,
  effectiveLimits,
  formatLimit,
  formatSize,
  isModuleLimits,
  LIMIT_NAMES,
  type EffectiveLimits,
} from "./module-limits.ts";
export { checkFleet } from "./check-fleet.ts";
export { deriveLogin, isSecondLogin, LOGIN_PATTERN, secondLogin } from "./login.ts";
export { derivePlan, type Endpoint, type Plan, type PlanEntry, type PlanInstance } from "./plan.ts";
export {
  disagrees,
  endpointAtServed,
  endpointDisagreements,
  formatHostPort,
  servedEndpointOf,
  withServedEndpoints,
  type HostPort,
} from "./served-endpoint.ts";
export {
  credentialPath,
  moduleDir,
  moduleHomePath,
  providerSecretPath,
  receivesPath,
  renderedFilePath,
  secretPath,
  secretsDirPath,
  StateDirError,
  secondSecretPath,
  slotSecretPath,
} from "./state-paths.ts";
export { contributionsFor } from "./contributions.ts";
export { credentialFor, credentialsFor, type Credential } from "./credential.ts";
export {
  DELIVERY_KEY,
  nodePlan,
  planEntries,
  secretKey,
  type DeliveredModule,
  type Delivery,
  type ModuleCredential,
} from "./delivery.ts";
export {
  DeliveryPartsError,
  entryPartKey,
  indexFingerprint,
  isDeliveryHead,
  modulePartKey,
  nameParts,
  partFingerprint,
  readDelivery,
  type DeliveryHead,
  type DeliveryPart,
  type IndexPart,
  type ModulePart,
  type PartCache,
} from "./delivery-parts.ts";
export {
  reportedMisbehaviours,
  reportedMisbehaviourSchema,
  type ReportedCounts,
  type ReportedFailure,
  type ReportedMisbehaviour,
  type ReportedProvider,
  type ReportedRotation,
  type ReportedWaiting,
} from "./provider-report.ts";
export { heldMintOf, OLDER_THAN_BACKEND, olderThanHeld } from "./mint-order.ts";
export {
  isLoopbackHost,
  ListenAddressError,
  parseListenAddress,
  type ListenAddress,
} from "./listen-address.ts";
export {
  compilePermissions,
  EVENTS_PREFIX,
  eventSubject,
  explain,
  InvalidEventNameError,
  permissionGrants,
  SeatConflictError,
  seatHolders,
  SEATS_PREFIX,
  seatSubject,
  STANDINGS_EVENTS,
  subjectCovers,
  subscriptionSubjects,
  type ModulePermissions,
} from "./events.ts";
export { checkModules, formatFinding, type CheckTarget, type Finding } from "./check-code.ts";
export { READ_ONLY_TOOL_NAMES, TOOL_NAMES, toolAnswerBytes, toolDefinition } from "./tools.ts";
export {
  boundedJson,
  parseAnswer,
  parseToolAnswer,
  reportedRotationSchema,
  statusReportSchema,
  toolCallReplySchema,
  type AnswerFault,
  type ToolAnswers,
} from "./tool-answers.ts";
export {
  formatsLine,
  MESH_RELEASE,
  PROTOCOL_VERSION,
  protocolOf,
  releaseOf,
  releaseOfFormat,
  releaseOfProtocol,
  STATE_FORMAT,
  UNVERSIONED_FORMAT,
  UNVERSIONED_PROTOCOL,
  worksWithProtocol,
} from "./versions.ts";
