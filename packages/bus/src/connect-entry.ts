/**
 * @mesh/bus/connect: what a short-lived client needs to ask the mesh one thing: open a connection,
 * ask in parts, close it, or ask through whichever server of a cluster reaches the controller
 * (`askThroughServers`). It loads the NATS client and nothing else of the bus (no JetStream
 * manager, no key or sealing libraries), so `mesh status` starts quickly; the subjects to ask on
 * are in @mesh/bus/subjects, which loads nothing at all. Asking (`requestInParts`,
 * `askThroughServers`) is on this entry only; `connectBus` and `closeBus` are on `@mesh/bus` too.
 *
 * ```ts
 * import { askThroughServers, closeBus, connectBus, requestInParts } from "@mesh/bus/connect";
 * import { inboxPrefix, OPERATOR_IDENTITY, STATUS_SUBJECT } from "@mesh/bus/subjects";
 * ```
 */
export {
  BusCredentialsRefusedError,
  BusTlsError,
  BusUnreachableError,
  closeBus,
  connectBus,
  type BusLogger,
  type BusTlsProblem,
  type ConnectBusOptions,
} from "./connect-bus.ts";
export { requestInParts, type RequestInPartsOptions } from "./answer-parts.ts";
export {
  ASK_RECEIPT_MS,
  askThroughServers,
  AskUnansweredError,
  type AskedAnswer,
  type AskServersOptions,
} from "./ask-servers.ts";
