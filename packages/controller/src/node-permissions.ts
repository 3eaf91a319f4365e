// What each kind of bus user may do, derived in one place so that the credentials the controller
// issues and the subjects the agents use cannot drift apart. The NATS server enforces them.
import {
  allReportsSubject,
  enrollSubject,
  inboxSubjects,
  kvReadSubjects,
  nodeDeliveriesBucket,
  reportSubject,
  toolSubject,
  type BusPermissions,
} from "@mesh/bus";

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

/** The identity (and inbox) of a person's CLI talking to the controller. */
export const OPERATOR_IDENTITY = "operator";

/**
 * An enrolled node's permissions: read its own deliveries bucket, publish its reports, receive
 * replies in its own inbox (`inboxPrefix(node)`), and answer the tool calls the controller relays
 * to it (`toolSubject(node)`). Nothing else: not another node's bucket, not another node's reports
 * or tools, not the controller's state.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function nodePermissions(node: string): BusPermissions {
  return {
    pub: { allow: [...kvReadSubjects(nodeDeliveriesBucket(node)), reportSubject(node)] },
    sub: { allow: [inboxSubjects(node), toolSubject(node)] },
    allowResponses: true,
  };
}

/**
 * The permissions of the credentials inside a node's join token: ask to enroll and get the answer
 * in the node's own inbox (`inboxPrefix(node)`), nothing more, so a leaked token reads nothing.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function enrollPermissions(node: string): BusPermissions {
  return { pub: { allow: [enrollSubject()] }, sub: { allow: [inboxSubjects(node)] } };
}

/**
 * The controller's own permissions: everything in the mesh's account (it creates the buckets,
 * writes every node's deliveries and answers requests).
 */
export function controllerPermissions(): BusPermissions {
  return { pub: { allow: [">"] }, sub: { allow: [">"] }, allowResponses: true };
}

/**
 * A person's CLI (`mesh status`, `mesh rotate`, `mesh tool`, `mesh ledger`): ask the controller,
 * and get the answer in the operator's own inbox (`inboxPrefix(OPERATOR_IDENTITY)`). Also may watch
 * the nodes' reports. Only this credential may ask for a tool.
 */
export function operatorPermissions(): BusPermissions {
  return {
    pub: {
      allow: [
        STATUS_SUBJECT,
        ROTATE_SUBJECT,
        TOOL_REQUEST_SUBJECT,
        LEDGER_READ_SUBJECT,
        SERVED_FLEET_SUBJECT,
        JOIN_TOKEN_SUBJECT,
      ],
    },
    sub: { allow: [inboxSubjects(OPERATOR_IDENTITY), allReportsSubject()] },
  };
}
