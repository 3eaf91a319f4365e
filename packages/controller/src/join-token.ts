// A join token is everything a new node needs to ask to join, in one string an operator can paste:
// where the bus is, credentials that can do nothing but ask to enroll, and the node's secret.
import { isValidNodeName } from "@mesh/bus";

/** What a join token carries (contract: base64url of this JSON). */
export interface JoinToken {
  readonly v: 1;
  readonly node: string;
  /** The bus's URLs, as the controller was given them. */
  readonly servers: readonly string[];
  /** NATS creds text allowed only to publish to `enrollSubject()` and receive the reply. */
  readonly creds: string;
  /** The node's join secret, compared by the controller in constant time. */
  readonly secret: string;
}

/** A join token that is damaged or not a join token. */
export class InvalidJoinTokenError extends Error {
  override name = "InvalidJoinTokenError";
  constructor(why: string, options?: { cause?: unknown }) {
    super(
      `the join token ${why}: copy it again, whole, from the controller (mesh join-token <node>)`,
      options,
    );
  }
}

/** The token's text: base64url of its JSON. It holds a secret: never log it. */
export function encodeJoinToken(token: JoinToken): string {
  return Buffer.from(JSON.stringify(token), "utf8").toString("base64url");
}

/**
 * Reads a join token's text.
 * @throws InvalidJoinTokenError when it is not base64url of a version 1 token's JSON; the message
 * never quotes the token (it holds a secret).
 */
export function decodeJoinToken(text: string): JoinToken {
  const trimmed = text.trim();
  if (!/^[A-Za-z0-9_-]+$/.test(trimmed)) throw new InvalidJoinTokenError("is not base64url text");
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(trimmed, "base64url").toString("utf8"));
  } catch (err) {
    throw new InvalidJoinTokenError("does not decode to JSON", { cause: err });
  }
  const t = value as Partial<Record<keyof JoinToken, unknown>> | null;
  if (t === null || typeof t !== "object" || t.v !== 1) {
    throw new InvalidJoinTokenError("is not a version 1 join token");
  }
  if (!isValidNodeName(t.node)) throw new InvalidJoinTokenError("names no valid node");
  if (!Array.isArray(t.servers) || t.servers.length === 0 || !t.servers.every((s) => typeof s === "string")) {
    throw new InvalidJoinTokenError("lists no bus servers");
  }
  if (typeof t.creds !== "string" || typeof t.secret !== "string" || t.secret.length === 0) {
    throw new InvalidJoinTokenError("carries no credentials or no secret");
  }
  return { v: 1, node: t.node, servers: [...(t.servers as string[])], creds: t.creds, secret: t.secret };
}
