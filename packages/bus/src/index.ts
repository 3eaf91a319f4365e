/**
 * @mesh/bus: what the controller and the agents stand on. NATS with decentralized JWT
 * authentication (the server itself enforces who may say what), durable KV state, the control
 * plane's subjects, and passwords sealed to the nodes that need them.
 *
 * ```ts
 * import { connectBus, createAuthority, credsFor, deliverySubject, inboxPrefix, inboxSubjects,
 *   newNodeKeys, newUserKeys, seal, unseal, mintPassword } from "@mesh/bus";
 *
 * const authority = await createAuthority();            // keep authority.exportSeeds() secret
 * const configText = authority.serverConfig({ storeDir: "/var/lib/mesh/nats" });
 *
 * const keys = newUserKeys();                           // on the node; only keys.publicKey travels
 * const jwt = await authority.issueUser({
 *   name: "n1",
 *   publicKey: keys.publicKey,
 *   permissions: { pub: { allow: [] }, sub: { allow: [deliverySubject("n1"), inboxSubjects("n1")] } },
 * });
 * const nc = await connectBus({ servers: "nats://127.0.0.1:4333", creds: credsFor(jwt, keys.seed),
 *   name: "n1", inboxPrefix: inboxPrefix("n1") });
 *
 * const node = await newNodeKeys();                     // the private key never leaves the node
 * const box = await seal(mintPassword(), node.publicKey);
 * const password = await unseal(box, node);             // throws SealError if tampered or misaddressed
 * ```
 */
export {
  BusAuthority,
  createAuthority,
  credsFor,
  InvalidUserKeyError,
  loadAuthority,
  newUserKeys,
  RESPONSE_WINDOW_MS,
  type AuthoritySeeds,
  type BusPermissions,
  type UserKeys,
  type UserLimits,
} from "./authority.ts";
export {
  BusCredentialsRefusedError,
  BusTlsError,
  BusUnreachableError,
  closeBus,
  connectBus,
  type BusLogger,
} from "./connect-bus.ts";
export { respondInParts, sendReceipt, sendRequest } from "./answer-parts.ts";
export { kvReadSubjects } from "./kv-permissions.ts";
export {
  InvalidPublicKeyError,
  mintPassword,
  newNodeKeys,
  seal,
  SealError,
  unseal,
  type NodeKeys,
} from "./sealing.ts";
export {
  openState,
  StaleRevisionError,
  StateOpenError,
  StateValueError,
  type BusState,
  type StateChange,
  type StateWatch,
} from "./state.ts";
export {
  allReportsSubject,
  assertNodeName,
  CONTROLLERS_SUBJECT,
  deliverySubject,
  DESIRED_STATE_BUCKET,
  enrollSubject,
  FLEET_APPLY_SUBJECT,
  FLEET_HISTORY_SUBJECT,
  inboxPrefix,
  inboxSubjects,
  isValidNodeName,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  MESH_SUBJECT_PREFIX,
  nodeDeliveriesBucket,
  NODES_BUCKET,
  OPERATOR_IDENTITY,
  reportSubject,
  ROTATE_SUBJECT,
  SEALED_PASSWORDS_BUCKET,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
  toolSubject,
} from "./subjects.ts";
export {
  RELAY_UNANSWERED_CODES,
  RUNNER_UNANSWERED_CODES,
  TOOL_SURFACES,
  type ToolRelayCode,
  type ToolRunnerCode,
  type ToolSurface,
} from "./tool-codes.ts";
export { claimOf, viewLedger, type LedgerView } from "./ledger-view.ts";
export { readFileIfExists, writeFileAtomic, type FileOwner, type WriteOutcome } from "./write-file-atomic.ts";
export {
  decodeJoinToken,
  encodeJoinToken,
  JoinTokenError,
  parseJoinToken,
  type JoinToken,
} from "./join-token.ts";
export { findNatsServer, NatsNotFoundError } from "./nats-server-binary.ts";
export {
  ALL_LEDGER_SUBJECTS,
  LEDGER_STREAM,
  ledgerInboxPrefix,
  ledgerPermissions,
  ledgerSnapshotBucket,
  ledgerStreamName,
  ledgerSubject,
  ledgerSubjects,
  type LedgerKind,
} from "./ledger-subjects.ts";
export { ACCOUNT_UPDATER_IDENTITY, accountUpdaterPermissions, pushAccountClaims } from "./account-updates.ts";
export {
  clusterClientUrls,
  clusterServerConfigs,
  ClusterSpecError,
  parseClusterServer,
  type ClusterServer,
} from "./cluster-config.ts";
export { belowReplicas, raiseReplicas } from "./bus-replicas.ts";
export { clusterSize, replicasFor } from "./replica-count.ts";
export {
  ensureLedger,
  LedgerEntryError,
  LedgerNotMadeError,
  LedgerWriteError,
  ModuleLedger,
  readLedger,
  sharedLedgerMade,
  type LedgerRecord,
} from "./ledger.ts";
export { migrateLedgers } from "./ledger-migration.ts";
export {
  dumpStreams,
  loadStream,
  StreamExistsError,
  type StreamHeader,
  type StreamMessage,
} from "./stream-backup.ts";
