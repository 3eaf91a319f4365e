// Enrollment: the node proves it holds the join token's secret and hands over its two public keys;
// the controller answers with a user JWT for the node's own NATS key. Nothing private travels.
import {
  BusCredentialsRefusedError,
  BusTlsError,
  closeBus,
  connectBus,
  enrollSubject,
  inboxPrefix,
  type BusLogger,
} from "@mesh/bus";
import type { NatsConnection } from "@nats-io/transport-node";
import type { JoinToken } from "@mesh/bus";
import type { NodeIdentity } from "./node-identity.ts";

/** The node could not enroll: the controller refused it, or did not answer in time. */
export class EnrollmentError extends Error {
  override name = "EnrollmentError";
  constructor(
    readonly node: string,
    why: string,
    options?: { cause?: unknown },
  ) {
    super(`node ${node} could not enroll: ${why}`, options);
  }
}

/** What an enrollment request says (the contract's shape). */
export interface EnrollRequest {
  readonly node: string;
  readonly secret: string;
  readonly natsPublicKey: string;
  readonly sealPublicKey: string;
}

/** How long enrollment keeps asking a controller that does not answer (yet). */
export const ENROLL_WITHIN_MS = 120_000;

/**
 * Enrolls the node named by `token` with `identity`'s public keys and returns the issued JWT.
 * Asks again while the bus or the controller does not answer, up to `withinMs`.
 * @throws EnrollmentError when the controller refuses, answers nonsense, or never answers.
 */
export async function enrollNode(
  token: JoinToken,
  identity: NodeIdentity,
  logger: BusLogger,
  withinMs = ENROLL_WITHIN_MS,
): Promise<string> {
  const deadline = Date.now() + withinMs;
  const request: EnrollRequest = {
    node: token.node,
    secret: token.secret,
    natsPublicKey: identity.nats.publicKey,
    sealPublicKey: identity.seal.publicKey,
  };
  let said = false;
  const waiting = (what: string): void => {
    if (!said) logger.info(`node ${token.node} is enrolling: ${what}; asking again until it does`);
    said = true;
  };
  let nc: NatsConnection | undefined;
  try {
    for (;;) {
      try {
        nc ??= await connectBus({
          servers: token.servers,
          creds: new TextEncoder().encode(token.creds),
          name: token.node,
          inboxPrefix: inboxPrefix(token.node),
          ...(token.ca !== undefined ? { ca: token.ca } : {}),
        });
        const reply = await nc.request(enrollSubject(), JSON.stringify(request), { timeout: 5_000 });
        return readReply(token.node, reply.string());
      } catch (err) {
        // A CA that does not fit the bus does not start fitting by asking again.
        if (err instanceof EnrollmentError || err instanceof BusTlsError) throw err;
        if (err instanceof BusCredentialsRefusedError) {
          throw new EnrollmentError(token.node, "the bus refused the join token's credentials", {
            cause: err,
          });
        }
        if (Date.now() > deadline) {
          throw new EnrollmentError(
            token.node,
            `neither the bus at ${token.servers.join(", ")} nor the controller answered within ` +
              `${Math.round(withinMs / 1000)} s: check that the controller is running`,
            { cause: err },
          );
        }
        waiting(nc === undefined ? "the bus does not answer yet" : "the controller does not answer yet");
        await new Promise((r) => setTimeout(r, 1_000));
      }
    }
  } finally {
    if (nc !== undefined) await closeBus(nc);
  }
}

function readReply(node: string, text: string): string {
  let reply: unknown;
  try {
    reply = JSON.parse(text);
  } catch {
    throw new EnrollmentError(node, "the controller's answer is not JSON");
  }
  const r = reply as { ok?: unknown; jwt?: unknown; error?: unknown } | null;
  if (r?.ok === true && typeof r.jwt === "string" && r.jwt.length > 0) return r.jwt;
  if (r?.ok === false) {
    const why = typeof r.error === "string" ? r.error : "no reason given";
    throw new EnrollmentError(node, `the controller refused it (${why}): ask for a new join token`);
  }
  throw new EnrollmentError(node, "the controller's answer is neither {ok:true, jwt} nor {ok:false, error}");
}
