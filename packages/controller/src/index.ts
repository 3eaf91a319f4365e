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
export * from "./authority-file.ts";
export * from "./controller-keys.ts";
export * from "./controller-lease.ts";
export * from "./controller-metrics.ts";
export * from "./controller-status.ts";
export * from "./dashboard/dashboard-routes.ts";
export * from "./dashboard/dashboard-state.ts";
export * from "./enrollment.ts";
export * from "./fleet-controller.ts";
export * from "./fleet-plan.ts";
export * from "./http-server.ts";
export {
  CSRF_HEADER,
  HttpAuth,
  LOGIN_CODE_TTL_MS,
  OPERATOR_TOKEN_WHO,
  SESSION_IDLE_MS,
  SESSION_MAX_MS,
  WeakTokenError,
  whoOf,
  type AuthCheck,
  type DashboardSession,
  type HttpAccess,
  type HttpAuthOptions,
  type HttpCaller,
  type LoginCode,
  type StartedSession,
} from "./http-auth.ts";
export { REFUSALS_SAID_EVERY_MS, RefusalLog, type Refused, type RefusalLogOptions } from "./refusal-log.ts";
export {
  loadOrCreateToken,
  newToken,
  operatorTokenPath,
  OPERATOR_TOKEN_FILE,
  readToken,
  SCRAPE_TOKEN_FILE,
  scrapeTokenPath,
  TokenFileError,
  type TokenKind,
} from "./secret-token.ts";
export * from "./join-secrets.ts";
export * from "./join-token-request.ts";
export * from "./lease-driver.ts";
export { LedgerRecorder, RECORD_TIMEOUT_MS, type LedgerRecords } from "./ledger-recorder.ts";
export * from "./module-credentials.ts";
export * from "./module-ledgers.ts";
export * from "./node-deliveries.ts";
export * from "./node-permissions.ts";
export * from "./node-reports.ts";
export * from "./password-store.ts";
export { RESTORES_FILE, RestoreIntents, type RestoreIntent } from "./restore-intents.ts";
export {
  PendingWrites,
  WriteWaitsError,
  type PendingWritesOptions,
  type WaitingWrite,
} from "./pending-writes.ts";
export * from "./plan-diff.ts";
export * from "./revocation-list.ts";
export * from "./scrape-targets.ts";
export * from "./rotate-request.ts";
export * from "./start-controller.ts";
export * from "./standby-state.ts";
export * from "./standings-book.ts";
export * from "./stored-fleet.ts";
export * from "./tool-relay.ts";
export * from "./watch-fleet-file.ts";
// What the controller publishes is defined once, in @mesh/manifest, for both it and the agent.
export {
  DELIVERY_KEY,
  nodePlan,
  planEntries,
  readDelivery,
  secretKey,
  type DeliveredModule,
  type Delivery,
  type DeliveryHead,
} from "@mesh/manifest";
