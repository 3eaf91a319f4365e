// What each kind of bus user may do, derived in one place so that the credentials the controller
// issues and the subjects the agents use cannot drift apart. The NATS server enforces them.
import {
  allReportsSubject,
  CONTROLLERS_SUBJECT,
  enrollSubject,
  FLEET_APPLY_SUBJECT,
  FLEET_HISTORY_SUBJECT,
  inboxSubjects,
  JOIN_TOKEN_SUBJECT,
  kvReadSubjects,
  LEDGER_READ_SUBJECT,
  nodeDeliveriesBucket,
  OPERATOR_IDENTITY,
  reportSubject,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
  toolSubject,
  type BusPermissions,
} from "@mesh/bus";

// The subjects a person's CLI asks on, defined with the bus's other subjects (the CLI reads them
// there without loading the controller); exported here too, as the controller's own.
export {
  CONTROLLERS_SUBJECT,
  FLEET_APPLY_SUBJECT,
  FLEET_HISTORY_SUBJECT,
  JOIN_TOKEN_SUBJECT,
  LEDGER_READ_SUBJECT,
  OPERATOR_IDENTITY,
  ROTATE_SUBJECT,
  SERVED_FLEET_SUBJECT,
  STATUS_SUBJECT,
  TOOL_REQUEST_SUBJECT,
};

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
 * writes every node's deliveries and answers requests). Publishing anywhere covers its answers, so
 * it does not also ask to answer (`allowResponses`): with it, every message it reads from a bucket
 * would cost the server a scan of all the reply subjects it was handed before.
 */
export function controllerPermissions(): BusPermissions {
  return { pub: { allow: [">"] }, sub: { allow: [">"] } };
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
        CONTROLLERS_SUBJECT,
        FLEET_APPLY_SUBJECT,
        FLEET_HISTORY_SUBJECT,
      ],
    },
    sub: { allow: [inboxSubjects(OPERATOR_IDENTITY), allReportsSubject()] },
  };
}
