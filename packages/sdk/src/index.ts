/**
 * @mesh/sdk: what an adapter or module author writes against. A provider writes one adapter, which
 * the harness runs; a consumer says and hears events on its module bus:
 *
 * ```ts
 * import { connectModuleBus, consoleLogger, runProvisioner } from "@mesh/sdk";
 * const handle = runProvisioner("postgres-database", adapter, { receives: "/run/mesh/pg.json" });
 * // ... later
 * await handle.stop();
 * ```
 *
 * What the provider process itself needs (its main: settings from the environment, the control
 * socket, metrics, the action journal) is the second entry point, `@mesh/sdk/provider`.
 */

// The adapter a provider writes, and the guard every adapter runs inside.
export type {
  Adapter,
  BatchedAdapter,
  Deleted,
  FailureClass,
  InventoryEntry,
  ProviderAdapter,
  Provision,
  Retired,
  RotationMark,
} from "./adapter.ts";
export { guardAdapter, GuardedAdapter, WHY_MOST, type GuardOptions } from "./adapter-guard.ts";
export { defineProvider, type ProviderModule } from "./provider.ts";

// The refusals an adapter throws, and how it classifies a backend's failures.
export {
  RefusalError,
  NotMadeHereError,
  NotRetiredError,
  ValueRefusedError,
  DerivedChangedError,
  refuseUnlisted,
  findInChain,
  isRefusal,
  quoteValue,
  type NotMadeHereDetail,
} from "./refusals.ts";
export {
  AdminLoginRefusedError,
  BackendUnreachableError,
  classifyBackendFailure,
} from "./backend-failures.ts";
export { clip, describeError, errorCodes, isNetworkError, NETWORK_ERROR_CODES } from "./scrub.ts";

// Marks an adapter keeps on what it made, logins, and its admin settings.
export {
  markEntry,
  parseJsonOrUndefined,
  readMark,
  readMinted,
  readRotation,
  retiredMark,
  type ConsumerMark,
} from "./consumer-mark.ts";
export {
  assertLogin,
  InvalidLoginError,
  isSecondLogin,
  isValidLogin,
  LOGIN_PATTERN,
  secondLogin,
} from "./login.ts";
export {
  INSTANCE_PATTERN,
  AdminSettingError,
  assertInstance,
  checkAdminSettings,
  checkHttpAdminSettings,
  adminUrlError,
  parseAdminUrl,
  positiveSetting,
  type AdminSettings,
  type AdminUrl,
  type AdminUrlRules,
  type CheckedAdminSettings,
  type CheckedHttpAdminSettings,
  type HttpAdminSettings,
} from "./admin-settings.ts";

// The harness that runs an adapter, its handle's tools, and what is passed in.
export { runProvisioner, type ProvisionerHandle, type ProvisionerOptions } from "./harness.ts";
export {
  ToolError,
  type CleanupEntry,
  type ConsumerState,
  type ConsumerStatus,
  type ProvisionerTools,
  type RetireList,
  type StatusReport,
  type ToolErrorCode,
} from "./tools.ts";
export {
  consoleLogger,
  discardActions,
  silentAnnouncer,
  systemClock,
  type ActionEntry,
  type ActionKind,
  type ActionLog,
  type Announcer,
  type Clock,
  type Logger,
  type StandingEvent,
} from "./collaborators.ts";
export { FakeClock } from "./clock.ts";
export type { ProvisionerObserver } from "./metrics.ts";
export { forEachLimited } from "./concurrency.ts";
export { formatDuration, InvalidDurationError, MAX_DURATION_MS, parseDuration } from "./duration.ts";

// A module's own events on the bus.
export {
  connectModuleBus,
  EventBodyError,
  EventNotDeclaredError,
  EventRefusedError,
  MAX_EVENT_BYTES,
  MODULE_BUS_VARIABLES,
  ModuleBus,
  ModuleBusClosedError,
  ModuleBusCredentialsError,
  ModuleBusNotConfiguredError,
  SubscriptionNotDeclaredError,
  type EventHandler,
  type EventSubscription,
  type ModuleBusOptions,
  type ModuleBusStats,
  type ModuleEvent,
} from "./module-bus.ts";
