/**
 * @mesh/sdk: the provisioner harness every provider shares. A provider writes one adapter:
 *
 * ```ts
 * import { runProvisioner, consoleLogger } from "@mesh/sdk";
 * const handle = runProvisioner("postgres-database", adapter, { receives: "/run/mesh/pg.json" });
 * // ... later
 * await handle.stop();
 * ```
 */
export * from "./adapter.ts";
export * from "./login.ts";
export * from "./collaborators.ts";
export * from "./tools.ts";
export * from "./provider.ts";
export * from "./harness.ts";
export * from "./consumer-book.ts";
export type { Trouble } from "./standing.ts";
export * from "./clock.ts";
export * from "./contributions-file.ts";
export * from "./secret-file.ts";
export * from "./retirement.ts";
export * from "./scrub.ts";
export * from "./duration.ts";
export * from "./redact.ts";
export * from "./control-socket.ts";
export * from "./provider-process.ts";
export * from "./provider-settings.ts";
export * from "./bus-announcer.ts";
export * from "./defaults.ts";
export * from "./module-bus.ts";
export * from "./metrics.ts";
export * from "./metrics-url.ts";
export * from "./watcher.ts";
export * from "./action-journal.ts";
export { guardAdapter, GuardedAdapter, WHY_MOST, type GuardOptions } from "./adapter-guard.ts";
export { forEachLimited } from "./concurrency.ts";
export {
  AdminLoginRefusedError,
  BackendUnreachableError,
  classifyBackendFailure,
} from "./backend-failures.ts";
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
  markEntry,
  parseJsonOrUndefined,
  readMark,
  retiredMark,
  type ConsumerMark,
} from "./consumer-mark.ts";
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
