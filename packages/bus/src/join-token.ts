// A join token is what an operator carries from the controller to a new node: the node's name,
// where the bus is, credentials that allow nothing but asking to enroll, and a one-node secret.
import { isValidNodeName } from "./subjects.ts";

/** A join token's contents (`base64url(JSON)`), as the controller makes it for one node. */
export interface JoinToken {
  readonly v: 1;
  readonly node: string;
  /** The bus's URLs (`nats://host:port`). */
  readonly servers: readonly string[];
  /** NATS creds text that may only publish an enrollment request and receive its reply. */
  readonly creds: string;
  /** The node's enrollment secret, which the controller checks. */
  readonly secret: string;
  /** The mesh's bus CA (PEM) when the bus uses TLS: the node trusts the servers it signed. */
  readonly ca?: string;
}

/** A join token that cannot be used: damaged, of another version, or made for another node. */
export class JoinTokenError extends Error {
  override name = "JoinTokenError";
  constructor(
    readonly node: string,
    why: string,
  ) {
    super(`the join token given to node ${node} ${why}: ask the controller for this node's join token again`);
  }
}

/** The token's text, as the controller hands it out: base64url of its JSON. It holds a secret: never log it. */
export function encodeJoinToken(token: JoinToken): string {
  return Buffer.from(JSON.stringify(token), "utf8").toString("base64url");
}

/**
 * Reads the join token `token` meant for `node`. Nothing of the token is quoted in an error: it
 * holds a secret.
 * @throws JoinTokenError when it is not a join token, or is for another node.
 */
export function parseJoinToken(token: string, node: string): JoinToken {
  return readJoinToken(token, node);
}

/**
 * Reads a join token without knowing which node it is for (the controller's own checks, tools).
 * @throws JoinTokenError when it is not a join token.
 */
export function decodeJoinToken(token: string): JoinToken {
  return readJoinToken(token, undefined);
}

function readJoinToken(token: string, expected: string | undefined): JoinToken {
  const node = expected ?? "(any)";
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(token.trim(), "base64url").toString("utf8"));
  } catch {
    throw new JoinTokenError(node, "is not a join token (not base64url JSON)");
  }
  const t = parsed as Partial<Record<keyof JoinToken, unknown>> | null;
  if (typeof t !== "object" || t === null) throw new JoinTokenError(node, "is not a join token");
  if (t.v !== 1) throw new JoinTokenError(node, `is of version ${JSON.stringify(t.v)}, not 1`);
  if (!isValidNodeName(t.node)) throw new JoinTokenError(node, "names no valid node");
  if (expected !== undefined && t.node !== expected)
    throw new JoinTokenError(node, `was made for node ${t.node}`);
  const servers = t.servers;
  if (
    !Array.isArray(servers) ||
    servers.length === 0 ||
    !servers.every((s) => typeof s === "string" && /^(nats|tls):\/\/\S+$/.test(s))
  ) {
    throw new JoinTokenError(node, "lists no bus servers (nats://host:port)");
  }
  if (typeof t.creds !== "string" || !t.creds.includes("BEGIN NATS USER JWT")) {
    throw new JoinTokenError(node, "holds no enrollment credentials");
  }
  if (typeof t.secret !== "string" || t.secret.length === 0) {
    throw new JoinTokenError(node, "holds no enrollment secret");
  }
  if (t.ca !== undefined && (typeof t.ca !== "string" || !t.ca.includes("BEGIN CERTIFICATE"))) {
    throw new JoinTokenError(node, "holds a bus CA that is not a PEM certificate");
  }
  return {
    v: 1,
    node: t.node,
    servers: servers as string[],
    creds: t.creds,
    secret: t.secret,
    ...(t.ca !== undefined ? { ca: t.ca } : {}),
  };
}
