/**
 * @mesh/controller: turns the fleet file into each node's delivery — the part of the plan the node
 * takes part in and the passwords it needs, each sealed to that node's own key — enrolls nodes,
 * and answers `mesh status`.
 *
 * ```ts
 * import { loadOrCreateAuthority, startController } from "@mesh/controller";
 * import { startNats } from "@mesh/testkit"; // or the mesh's own nats-server
 *
 * const authority = await loadOrCreateAuthority(".mesh-state/controller");
 * const nats = await startNats({ config: authority.serverConfig() });
 * const controller = await startController({
 *   stateDir: ".mesh-state/controller", fleetFile: "examples/fleet/mesh.yaml",
 *   servers: [nats.url], authority, logger: console,
 * });
 * const token = await controller.joinToken("node-1"); // hand it to node-1's agent
 * await controller.stop();
 * ```
 */
export { loadOrCreateAuthority, saveAuthority } from "./authority-file.ts";
export { loadOrCreateControllerKeys } from "./controller-keys.ts";
export { ControllerMetrics } from "./controller-metrics.ts";
export { dashboardRoutes } from "./dashboard/dashboard-routes.ts";
export type { DashboardSources } from "./dashboard/dashboard-state.ts";
export type { EnrollReply } from "./enrollment.ts";
export type { Controller } from "./fleet-controller.ts";
export { fleetPlanOf, loadFleetPlan, type FleetPlan, type FleetSource } from "./fleet-plan.ts";
export type { FleetRevision } from "./fleet-history.ts";
export { applyParts } from "./apply-uploads.ts";
export { browsableUrl, metricsRoute, startControllerHttp, type ControllerHttpServer } from "./http-server.ts";
export { HttpAuth, LOGIN_CODE_TTL_MS } from "./http-auth.ts";
export { loadOrCreateToken, operatorTokenPath, scrapeTokenPath } from "./secret-token.ts";
export { JoinSecrets } from "./join-secrets.ts";
export { MODULE_BUS_LIMITS, MODULE_CREDENTIALS_BUCKET } from "./module-credentials.ts";
export {
  LEDGER_READ_SUBJECT,
  OPERATOR_IDENTITY,
  operatorPermissions,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
} from "./node-permissions.ts";
export { parseReport, type NodeReport } from "./node-reports.ts";
export { WriteWaitsError } from "./pending-writes.ts";
export {
  diffFleetPlans,
  EMPTY_FLEET,
  type ComparedFleet,
  type FleetPlanDiff,
  type ModuleChange,
  type ProviderPlan,
} from "./plan-diff.ts";
export { keepScrapeTargets } from "./scrape-targets.ts";
export { startController, type ControllerOptions } from "./start-controller.ts";
export { copyStandbyState } from "./standby-state.ts";
export { loadStoredFleet, parseStoredFleet } from "./stored-fleet.ts";
export { relayToolCall, type ToolCall } from "./tool-relay.ts";
// What the controller publishes is defined once, in @mesh/manifest, for both it and the agent.
export { DELIVERY_KEY, readDelivery, secretKey, type Delivery } from "@mesh/manifest";
