// `mesh join-token NODE`: the operator's CLI asks the controller for a node's join token (or a new
// one), on a subject only the operator's credentials may publish to; the token holds the node's join
// secret, so it goes only to the operator's own inbox.
import { isValidNodeName } from "@mesh/bus";

/** What the CLI sends on `JOIN_TOKEN_SUBJECT`. */
export interface JoinTokenRequest {
  readonly node: string;
  /** Make a new token: the old one is no longer accepted. */
  readonly renew?: boolean;
}

/** What the controller answers. */
export type JoinTokenReply =
  | { readonly ok: true; readonly node: string; readonly token: string; readonly renewed: boolean }
  | { readonly ok: false; readonly error: string; readonly unknownNode?: true };

/**
 * Answers one join token request (the raw message data) with `tokenFor`, which throws an error
 * named `UnknownNodeError` for a node the fleet does not have. Never throws.
 */
export async function answerJoinTokenRequest(
  data: Uint8Array,
  tokenFor: (node: string, renew: boolean) => Promise<string>,
): Promise<JoinTokenReply> {
  let request: Partial<Record<keyof JoinTokenRequest, unknown>>;
  try {
    request = JSON.parse(new TextDecoder().decode(data)) as typeof request;
  } catch {
    return { ok: false, error: "the join token request is not JSON: send {node, renew}" };
  }
  const node = request?.node;
  if (!isValidNodeName(node)) {
    return { ok: false, error: "the join token request names no valid node: name a node of the fleet" };
  }
  const renew = request.renew === true;
  try {
    return { ok: true, node, token: await tokenFor(node, renew), renewed: renew };
  } catch (err) {
    if (err instanceof Error && err.name === "UnknownNodeError") {
      return { ok: false, error: err.message, unknownNode: true };
    }
    return {
      ok: false,
      error: `the controller could not ${renew ? "make a new" : "give the"} join token of node ${node} now (the bus did not store it): try again`,
    };
  }
}
