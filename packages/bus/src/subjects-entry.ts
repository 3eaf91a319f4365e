/**
 * @mesh/bus/subjects: the bus's subject and bucket names, the codes of the replies a tool call
 * through the mesh may get, and how a ledger's entries are read (records and claims), with nothing
 * else loaded (not even the NATS client): what a command needs to define itself, to name what it
 * asks and to show what it is answered. Everything here is also exported by `@mesh/bus`.
 */
export * from "./subjects.ts";
export * from "./tool-codes.ts";
export {
  CLAIM_EARLIEST_MS,
  CLAIM_LATEST_MS,
  claimOf,
  isOperatorClaim,
  recordedOf,
  viewLedger,
  type ActionClaim,
  type LedgerView,
  type RecordedBy,
} from "./ledger-view.ts";
