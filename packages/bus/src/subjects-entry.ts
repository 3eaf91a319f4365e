/**
 * @mesh/bus/subjects: the bus's subject and bucket names, the codes of the replies a tool call
 * through the mesh may get, and how a ledger's entries are read (records and claims), with nothing
 * else loaded (not even the NATS client): what a command needs to define itself, to name what it
 * asks and to show what it is answered. Everything here is also exported by `@mesh/bus`.
 */
export {
  CONTROLLERS_SUBJECT,
  FLEET_APPLY_SUBJECT,
  FLEET_HISTORY_SUBJECT,
  inboxPrefix,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  OPERATOR_IDENTITY,
  ROTATE_SUBJECT,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
} from "./subjects.ts";
export { RELAY_UNANSWERED_CODES, RUNNER_UNANSWERED_CODES } from "./tool-codes.ts";
export { viewLedger, type LedgerView } from "./ledger-view.ts";
