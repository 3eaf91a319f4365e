// Each node's join token is made once and kept in the controller's desired state, sealed to the
// controller's own key (it holds the node's join secret and enroll-only credentials), so asking
// again returns the same token and a restarted controller still accepts it.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import {
  assertNodeName,
  credsFor,
  newUserKeys,
  seal,
  StateValueError,
  unseal,
  type BusAuthority,
  type BusLogger,
  type BusState,
  type NodeKeys,
} from "@mesh/bus";
import { decodeJoinToken, encodeJoinToken } from "@mesh/bus";
import { enrollPermissions } from "./node-permissions.ts";

/** A node's join token as the controller keeps it. */
export interface KeptJoinToken {
  readonly v: 1;
  /** The token's text, sealed to the controller's key. */
  readonly sealedToken: string;
  /** SHA-256 (hex) of the node's join secret, what an enrollment is checked against. */
  readonly secretDigest: string;
  /** ISO 8601. */
  readonly madeAt: string;
  /**
   * The NATS public key of the node that first enrolled with this token: only it may enroll with
   * it again (an agent killed mid-enrollment retries); another key needs a renewed token.
   */
  readonly enrolledKey?: string;
}

/** Where the tokens are kept: a key per node in the controller's desired-state bucket. */
export const joinTokenKey = (node: string): string => `join.${assertNodeName(node)}`;

const digest = (secret: string): Buffer => createHash("sha256").update(secret, "utf8").digest();

/**
 * Reads a kept token record, or undefined when it is not one.
 */
export function parseKeptJoinToken(value: unknown): KeptJoinToken | undefined {
  const v = value as Partial<KeptJoinToken> | null;
  if (v?.v !== 1 || typeof v.sealedToken !== "string" || typeof v.secretDigest !== "string") return undefined;
  return {
    v: 1,
    sealedToken: v.sealedToken,
    secretDigest: v.secretDigest,
    madeAt: String(v.madeAt),
    ...(typeof v.enrolledKey === "string" ? { enrolledKey: v.enrolledKey } : {}),
  };
}

/** Makes, keeps and checks the nodes' join tokens. */
export class JoinSecrets {
  readonly #state: BusState<unknown>;
  readonly #keys: NodeKeys;
  readonly #authority: BusAuthority;
  readonly #servers: readonly string[];
  readonly #log: BusLogger;
  readonly #ca: string | undefined;

  /**
   * @param state the controller's desired-state bucket.
   * @param servers the bus URLs written into each token (as a node will reach them).
   * @param ca the mesh's bus CA (PEM) each token carries, when the bus uses TLS.
   */
  constructor(
    state: BusState<unknown>,
    keys: NodeKeys,
    authority: BusAuthority,
    servers: readonly string[],
    log: BusLogger,
    ca?: string,
  ) {
    this.#state = state;
    this.#keys = keys;
    this.#authority = authority;
    this.#servers = servers;
    this.#log = log;
    this.#ca = ca;
  }

  /**
   * `node`'s join token: the one made before, else a new one (kept before it is returned).
   * @throws InvalidNodeNameError for an invalid node name; the bus's error when the state cannot
   * be read or written.
   */
  async tokenFor(node: string): Promise<string> {
    const kept = await this.#kept(node);
    if (kept !== undefined) {
      let token: string | undefined;
      try {
        token = await unseal(kept.sealedToken, this.#keys);
      } catch {
        this.#log.warn(
          `the join token of node ${node} cannot be opened with this controller's key (its key file was ` +
            `replaced): a new token is made, and the old one is no longer accepted`,
        );
      }
      // A token kept from before the bus had TLS (or another CA) carries the CA that serves now.
      if (token !== undefined) return this.#ca === undefined ? token : withCa(token, this.#ca);
    }
    return this.renew(node);
  }

  /**
   * Makes `node` a new join token (a new secret and new enroll-only credentials); the old token is
   * no longer accepted.
   * @throws InvalidNodeNameError for an invalid node name; the bus's error when the state cannot
   * be written.
   */
  async renew(node: string): Promise<string> {
    assertNodeName(node);
    const secret = randomBytes(32).toString("base64url");
    const keys = newUserKeys();
    const jwt = await this.#authority.issueUser({
      name: `enroll-${node}`,
      publicKey: keys.publicKey,
      permissions: enrollPermissions(node),
    });
    const creds = new TextDecoder().decode(credsFor(jwt, keys.seed));
    const token = encodeJoinToken({
      v: 1,
      node,
      servers: [...this.#servers],
      creds,
      secret,
      ...(this.#ca !== undefined ? { ca: this.#ca } : {}),
    });
    const record: KeptJoinToken = {
      v: 1,
      sealedToken: await seal(token, this.#keys.publicKey),
      secretDigest: digest(secret).toString("hex"),
      madeAt: new Date().toISOString(),
    };
    await this.#state.put(joinTokenKey(node), record);
    return token;
  }

  /**
   * Whether `secret` is `node`'s join secret, compared in constant time. False for a node that has
   * no token.
   * @throws the bus's error when the state cannot be read.
   */
  async check(node: string, secret: string): Promise<boolean> {
    const kept = await this.#kept(node);
    // Compared even when there is no token, so the answer takes as long either way.
    const expected = kept !== undefined ? Buffer.from(kept.secretDigest, "hex") : Buffer.alloc(32);
    const given = digest(secret);
    const same = expected.length === given.length && timingSafeEqual(expected, given);
    return kept !== undefined && same;
  }

  /**
   * Whether the node key `natsPublicKey` may enroll `node` with its current token: the first key
   * that does is kept with the token, and from then on only that key may (check the secret first).
   * False for a node that has no token.
   * @throws the bus's error when the state cannot be read or written.
   */
  async claim(node: string, natsPublicKey: string): Promise<boolean> {
    const kept = await this.#kept(node);
    if (kept === undefined) return false;
    if (kept.enrolledKey !== undefined) return kept.enrolledKey === natsPublicKey;
    await this.#state.put(joinTokenKey(node), { ...kept, enrolledKey: natsPublicKey });
    return true;
  }

  /**
   * Whether a node key has claimed `node`'s current token (only that key may enroll with it).
   * @throws the bus's error when the state cannot be read.
   */
  async claimed(node: string): Promise<boolean> {
    return (await this.#kept(node))?.enrolledKey !== undefined;
  }

  async #kept(node: string): Promise<KeptJoinToken | undefined> {
    let value: unknown;
    try {
      value = await this.#state.get(joinTokenKey(node));
    } catch (err) {
      // A damaged record is no token; a bus that does not answer is the bus's error to say.
      if (err instanceof StateValueError) return undefined;
      throw err;
    }
    return parseKeptJoinToken(value);
  }
}

function withCa(token: string, ca: string): string {
  const parsed = decodeJoinToken(token);
  return parsed.ca === ca ? token : encodeJoinToken({ ...parsed, ca });
}
