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
export * from "./authority.ts";
export * from "./connect-bus.ts";
export * from "./answer-parts.ts";
export * from "./ask-servers.ts";
export * from "./kv-permissions.ts";
export * from "./sealing.ts";
export * from "./state.ts";
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
export * from "./write-file-atomic.ts";
export * from "./join-token.ts";
export * from "./nats-server-binary.ts";
export * from "./ledger-subjects.ts";
export * from "./account-updates.ts";
export * from "./cluster-config.ts";
export * from "./bus-replicas.ts";
export * from "./replica-count.ts";
export * from "./ledger.ts";
