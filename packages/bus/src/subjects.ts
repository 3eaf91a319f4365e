// Every subject and bucket name the control plane uses is built here and nowhere else, so the
// permissions the controller grants and the subjects the agents use cannot drift apart. A node name
// is one subject token: a name that could widen a subject (a dot, a wildcard, a space) is refused.

/** What a node name may be: a lowercase letter, then up to 40 of a-z, 0-9 and `-`. */
export const NODE_NAME_PATTERN = /^[a-z][a-z0-9-]{0,40}$/;

/** A node name that is not valid; refused before it becomes part of any subject or bucket name. */
export class InvalidNodeNameError extends Error {
  override name = "InvalidNodeNameError";
  constructor(readonly node: string) {
    super(
      `node name ${JSON.stringify(node)} is not valid: a node name is 1–41 characters of a-z, 0-9 and -, ` +
        `starting with a letter; rename the node in the fleet file`,
    );
  }
}

/** Whether `node` is a valid node name. */
export function isValidNodeName(node: unknown): node is string {
  return typeof node === "string" && NODE_NAME_PATTERN.test(node);
}

/**
 * Returns `node` when it is a valid node name.
 * @throws InvalidNodeNameError when it is not.
 */
export function assertNodeName(node: unknown): string {
  if (!isValidNodeName(node)) throw new InvalidNodeNameError(String(node));
  return node;
}

/** The prefix of every subject the control plane uses. */
export const MESH_SUBJECT_PREFIX = "mesh";

/**
 * Everything addressed to one node (`mesh.node.<node>.>`): what that node's agent may subscribe to.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function nodeSubjects(node: string): string {
  return `${MESH_SUBJECT_PREFIX}.node.${assertNodeName(node)}.>`;
}

/**
 * Where the controller tells a node that its deliveries changed (`mesh.node.<node>.deliveries`).
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function deliverySubject(node: string): string {
  return `${MESH_SUBJECT_PREFIX}.node.${assertNodeName(node)}.deliveries`;
}

/**
 * Where the controller asks a node's agent to run a tool (`mesh.node.<node>.tool`), as a request.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function toolSubject(node: string): string {
  return `${MESH_SUBJECT_PREFIX}.node.${assertNodeName(node)}.tool`;
}

/**
 * Where a node's agent reports how its modules are doing (`mesh.report.<node>`). Kept outside
 * `mesh.node.<node>.>` so that a node's permission to subscribe to its own subjects never lets it
 * pose as the controller's listener, and its permission to publish is exactly this one subject.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function reportSubject(node: string): string {
  return `${MESH_SUBJECT_PREFIX}.report.${assertNodeName(node)}`;
}

/** Every node's reports (`mesh.report.*`): what the controller subscribes to. */
export function allReportsSubject(): string {
  return `${MESH_SUBJECT_PREFIX}.report.*`;
}

/** Where an agent asks to join the mesh with its join token and public keys (`mesh.enroll`), as a request. */
export function enrollSubject(): string {
  return `${MESH_SUBJECT_PREFIX}.enroll`;
}

/** An identity (a node, a module, the controller) that cannot be one subject token safely. */
export class InvalidIdentityError extends Error {
  override name = "InvalidIdentityError";
  constructor(readonly identity: string) {
    super(
      `identity ${JSON.stringify(identity)} cannot name an inbox: it must be 1–41 characters of a-z, 0-9 ` +
        `and -, starting with a letter`,
    );
  }
}

/**
 * The inbox prefix for one identity (`_INBOX.<identity>`). Each connection gets its own, so replies
 * meant for one node (a KV read of its sealed secrets, say) are never visible to another.
 * @throws InvalidIdentityError when `identity` is not a valid name.
 */
export function inboxPrefix(identity: string): string {
  if (!NODE_NAME_PATTERN.test(identity)) throw new InvalidIdentityError(identity);
  return `_INBOX.${identity}`;
}

/**
 * What a connection with `inboxPrefix(identity)` must be allowed to subscribe to, to get replies.
 * @throws InvalidIdentityError when `identity` is not a valid name.
 */
export function inboxSubjects(identity: string): string {
  return `${inboxPrefix(identity)}.>`;
}

// What a person's CLI asks the controller, each answered only to operator credentials. They are
// here, with the other subjects, so the CLI finds them without loading the controller.

/** Where the controller answers status requests (operator credentials only). */
export const STATUS_SUBJECT = "mesh.status";

/** Where the controller answers rotation requests `{consumer, interface}` (operator credentials only). */
export const ROTATE_SUBJECT = "mesh.rotate";

/** Where the controller relays a tool call `{module, tool, args, who}` to the module's node (operator credentials only). */
export const TOOL_REQUEST_SUBJECT = "mesh.tool";

/** Where the controller answers `mesh ledger` requests `{module, limit}` (operator credentials only). */
export const LEDGER_READ_SUBJECT = "mesh.ledger.read";

/**
 * Where the controller answers `mesh plan` with the fleet it serves and the `secretKey` of every
 * password it keeps, `{ok, fleet, keptPasswords}` (operator credentials only; it changes nothing).
 */
export const SERVED_FLEET_SUBJECT = "mesh.fleet.served";

/**
 * Where the controller answers `mesh join-token` requests `{node, renew}` with the node's join
 * token (operator credentials only: the token holds the node's join secret).
 */
export const JOIN_TOKEN_SUBJECT = "mesh.join.token";

/**
 * Where every controller, leading or standing by, answers who it is and who it sees leading:
 * `{self, leading, leader, term, fleetTerm}`. Not a queue: a person's CLI hears them all, and so
 * names the standbys (operator credentials only).
 */
export const CONTROLLERS_SUBJECT = "mesh.controllers";

/**
 * Where the leading controller takes `mesh apply` and `mesh fleet rollback`: `{source, expectRevision?,
 * force?, who}` or `{rollback: REV, …}`, answered with the revision served after it (operator
 * credentials only).
 */
export const FLEET_APPLY_SUBJECT = "mesh.fleet.apply";

/**
 * Where a controller answers `mesh fleet history` (`{}`) and `mesh fleet show REV` (`{revision}`)
 * from the history kept in the bus (operator credentials only).
 */
export const FLEET_HISTORY_SUBJECT = "mesh.fleet.history";

/** The identity (and inbox) of a person's CLI talking to the controller. */
export const OPERATOR_IDENTITY = "operator";

/** The controller's desired state (fleet, derived consumers): a KV bucket only the controller uses. */
export const DESIRED_STATE_BUCKET = "mesh-desired";

/** The minted passwords, sealed to the controller's own key: a KV bucket only the controller uses. */
export const SEALED_PASSWORDS_BUCKET = "mesh-sealed";

/** The enrolled nodes and their public keys: a KV bucket only the controller uses. */
export const NODES_BUCKET = "mesh-nodes";

/**
 * The KV bucket holding one node's deliveries (`mesh-node-<node>`). Each node has its own bucket,
 * because NATS cannot confine a reader to some keys of a shared bucket reliably.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function nodeDeliveriesBucket(node: string): string {
  return `mesh-node-${assertNodeName(node)}`;
}

/** What a KV bucket name may be, as NATS defines it. */
export const BUCKET_NAME_PATTERN = /^[-_a-zA-Z0-9]+$/;

/** A KV bucket name NATS would refuse, or that would widen a permission built from it. */
export class InvalidBucketNameError extends Error {
  override name = "InvalidBucketNameError";
  constructor(readonly bucket: string) {
    super(`bucket name ${JSON.stringify(bucket)} is not valid: use only a-z, A-Z, 0-9, - and _`);
  }
}

/**
 * Returns `bucket` when it is a valid KV bucket name.
 * @throws InvalidBucketNameError when it is not.
 */
export function assertBucketName(bucket: string): string {
  if (!BUCKET_NAME_PATTERN.test(bucket)) throw new InvalidBucketNameError(bucket);
  return bucket;
}

/**
 * The JetStream stream behind a KV bucket (`KV_<bucket>`), as permissions must name it.
 * @throws InvalidBucketNameError for an invalid bucket name.
 */
export function kvStreamName(bucket: string): string {
  return `KV_${assertBucketName(bucket)}`;
}
