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
export { freePort } from "./free-port.ts";
export { providerTarget, type ConformanceTarget, type TargetServer } from "./conformance-target.ts";
export { quietLogger, recordingLogger, type RecordingLogger, type SaidLine } from "./recording-logger.ts";
export { AWKWARD_PASSWORDS, HOSTILE_LOGINS, mintPassword, runConformance } from "./conformance.ts";
export { startPostgres, type PostgresServer } from "./postgres-server.ts";
export { startMariadb, type MariadbServer } from "./mariadb-server.ts";
export { startRedis, type RedisServer } from "./redis-server.ts";
export { startCeph, type CephServer } from "./ceph-server.ts";
export { startGlewlwyd, type GlewlwydServer } from "./glewlwyd-server.ts";
export { MemoryAdapter, OverlapMemoryAdapter } from "./memory-adapter.ts";
export { startNats, type NatsServer } from "./nats-server.ts";
export { meshClusterConfigs, startNatsCluster, type NatsCluster } from "./nats-cluster.ts";
export { parsePromText, scrapeProm, type PromScrape } from "./prometheus-scrape.ts";
export { until } from "./until.ts";
export { stopOnSignalsYourself } from "./exit-on-signal.ts";
export { okLine, serveScriptedControl, type ScriptedControl } from "./scripted-control.ts";
export { removeStaleModuleUsers } from "./module-users-cleanup.ts";
