// What each kind of bus user may do, derived in one place so that the credentials the controller
// issues and the subjects the agents use cannot drift apart. The NATS server enforces them.
import {
  allReportsSubject,
  enrollSubject,
  inboxSubjects,
  kvReadSubjects,
  nodeDeliveriesBucket,
  reportSubject,
  type BusPermissions,
} from "@mesh/bus";

/** Where the controller answers status requests (operator credentials only). */
export const STATUS_SUBJECT = "mesh.status";

/** Where the controller answers rotation requests `{consumer, interface}` (operator credentials only). */
export const ROTATE_SUBJECT = "mesh.rotate";

/** The identity (and inbox) of a person's CLI talking to the controller. */
export const OPERATOR_IDENTITY = "operator";

/**
 * An enrolled node's permissions: read its own deliveries bucket, publish its reports, and receive
 * replies in its own inbox (`inboxPrefix(node)`). Nothing else: not another node's bucket, not
 * another node's reports, not the controller's state.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function nodePermissions(node: string): BusPermissions {
  return {
    pub: { allow: [...kvReadSubjects(nodeDeliveriesBucket(node)), reportSubject(node)] },
    sub: { allow: [inboxSubjects(node)] },
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
 * A person's CLI (`mesh status`, `mesh rotate`): ask the controller, and get the answer in the
 * operator's own inbox (`inboxPrefix(OPERATOR_IDENTITY)`). Also may watch the nodes' reports.
 */
export function operatorPermissions(): BusPermissions {
  return {
    pub: { allow: [STATUS_SUBJECT, ROTATE_SUBJECT] },
    sub: { allow: [inboxSubjects(OPERATOR_IDENTITY), allReportsSubject()] },
  };
}
