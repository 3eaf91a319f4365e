// Enrollment: a node proves it holds its join secret and sends its two public keys; it gets back a
// user JWT carrying exactly its node permissions. Its private keys never leave it, so nothing the
// controller keeps or sends can impersonate the node or open what is sealed to it.
import {
  InvalidPublicKeyError,
  InvalidUserKeyError,
  isValidNodeName,
  seal,
  type BusAuthority,
} from "@mesh/bus";
import type { JoinSecrets } from "./join-secrets.ts";
import { nodePermissions } from "./node-permissions.ts";

/** What an agent sends on `enrollSubject()`. */
export interface EnrollRequest {
  readonly node: string;
  readonly secret: string;
  /** The node's NATS user public key (`U…`). */
  readonly natsPublicKey: string;
  /** The node's sealing public key (X25519, base64url). */
  readonly sealPublicKey: string;
}

/** What the controller answers. */
export type EnrollReply =
  { readonly ok: true; readonly jwt: string } | { readonly ok: false; readonly error: string };

/** An enrolled node as the controller keeps it (NODES bucket, keyed by node name). */
export interface EnrolledNode {
  readonly node: string;
  readonly sealPublicKey: string;
  readonly natsPublicKey: string;
  /** ISO 8601. */
  readonly enrolledAt: string;
}

/** Reads a kept node record. @throws Error when it is not one. */
export function parseEnrolledNode(value: unknown): EnrolledNode {
  const v = value as Partial<EnrolledNode> | null;
  if (
    !isValidNodeName(v?.node) ||
    typeof v?.sealPublicKey !== "string" ||
    typeof v.natsPublicKey !== "string"
  ) {
    throw new Error("not an enrolled node record");
  }
  return {
    node: v.node,
    sealPublicKey: v.sealPublicKey,
    natsPublicKey: v.natsPublicKey,
    enrolledAt: String(v.enrolledAt),
  };
}

/** What answering an enrollment needs. */
export interface EnrollmentDeps {
  readonly joinSecrets: JoinSecrets;
  readonly authority: BusAuthority;
  /** Keeps the node (and publishes its delivery); called only for a request that was accepted. */
  readonly enroll: (node: EnrolledNode) => Promise<void>;
}

const refuse = (error: string): EnrollReply => ({ ok: false, error });

/**
 * Answers one enrollment request (the raw message data). Never throws: every failure is a refusal
 * that says what to do, and none repeats the secret.
 */
export async function answerEnrollment(deps: EnrollmentDeps, data: Uint8Array): Promise<EnrollReply> {
  let request: Partial<Record<keyof EnrollRequest, unknown>>;
  try {
    request = JSON.parse(new TextDecoder().decode(data)) as typeof request;
  } catch {
    return refuse("the enrollment request is not JSON: send {node, secret, natsPublicKey, sealPublicKey}");
  }
  const { node, secret, natsPublicKey, sealPublicKey } = request ?? {};
  if (!isValidNodeName(node)) {
    return refuse("the enrollment request names no valid node: use the node named in the join token");
  }
  if (typeof secret !== "string" || typeof natsPublicKey !== "string" || typeof sealPublicKey !== "string") {
    return refuse(`the enrollment request for node ${node} lacks its secret or one of its public keys`);
  }
  try {
    if (!(await deps.joinSecrets.check(node, secret))) {
      return refuse(
        `node ${node} was refused: its join secret is not right (or no join token was made for it); ` +
          `ask the operator for the node's current join token`,
      );
    }
  } catch {
    return refuse(
      `the controller could not check node ${node}'s join secret (its state did not answer): try again`,
    );
  }
  try {
    await seal("", sealPublicKey);
  } catch (err) {
    return refuse(
      err instanceof InvalidPublicKeyError
        ? `node ${node}'s ${err.message}`
        : `node ${node}'s sealing key cannot be used: send the publicKey of newNodeKeys()`,
    );
  }
  let jwt: string;
  try {
    jwt = await deps.authority.issueUser({
      name: node,
      publicKey: natsPublicKey,
      permissions: nodePermissions(node),
    });
  } catch (err) {
    if (err instanceof InvalidUserKeyError) return refuse(`node ${node}'s ${err.message}`);
    return refuse(`the controller could not issue node ${node}'s credentials: try again`);
  }
  try {
    if (!(await deps.joinSecrets.claim(node, natsPublicKey))) {
      return refuse(
        `node ${node} was refused: its join token was already used by another node key; if this ` +
          `machine is node ${node} now, make a new token with \`mesh join-token ${node} --renew\``,
      );
    }
  } catch {
    return refuse(`the controller could not record node ${node}'s use of its join token: try again`);
  }
  try {
    await deps.enroll({ node, sealPublicKey, natsPublicKey, enrolledAt: new Date().toISOString() });
  } catch (err) {
    return refuse(`the controller could not record node ${node} (${(err as Error).message}): try again`);
  }
  return { ok: true, jwt };
}
