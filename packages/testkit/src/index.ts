/**
 * @mesh/testkit: real servers for tests and the adapter conformance kit.
 *
 * ```ts
 * import { startPostgres } from "@mesh/testkit";
 * const pg = await startPostgres();
 * const adminUrl = await pg.createAdmin("mesh_admin"); // CREATEROLE + CREATEDB only, scram-sha-256 on
 * await pg.stop();
 * ```
 */
export * from "./free-port.ts";
export * from "./conformance-target.ts";
export { quietLogger, recordingLogger } from "./recording-logger.ts";
export * from "./conformance.ts";
export * from "./postgres-server.ts";
export * from "./mariadb-server.ts";
export * from "./redis-server.ts";
export {
  CEPH_ADMIN_CAPS,
  CephNotFoundError,
  CephStartError,
  startCeph,
  type CephServer,
} from "./ceph-server.ts";
export * from "./glewlwyd-server.ts";
export * from "./memory-adapter.ts";
export * from "./nats-server.ts";
export * from "./nats-cluster.ts";
export * from "./prometheus-scrape.ts";
export * from "./until.ts";
export { okLine, serveScriptedControl, type ScriptedControl } from "./scripted-control.ts";
export { removeStaleModuleUsers } from "./module-users-cleanup.ts";
