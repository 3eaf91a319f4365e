// Passwords travel and rest sealed: a public-key sealed box (X25519 + XSalsa20-Poly1305, libsodium's
// crypto_box_seal) to each node that needs one. Only the holder of the node's private key can open
// it, and any change to the box makes opening fail, so a tampered secret is never written to disk.
import { randomBytes } from "node:crypto";
import sodium from "libsodium-wrappers";

/** A node's sealing key pair, base64url. The private key never leaves the node. */
export interface NodeKeys {
  readonly publicKey: string;
  readonly privateKey: string;
}

/** What went wrong opening a sealed box. */
export type SealFailure = "tampered-or-not-for-this-node" | "malformed";

/** A sealed box that cannot be opened with this node's keys. Nothing from it may be used or written. */
export class SealError extends Error {
  override name = "SealError";
  constructor(
    readonly failure: SealFailure,
    /** The node's public key the box was tried with, to say which node refused it. */
    readonly publicKey: string,
    options?: { cause?: unknown },
  ) {
    super(
      failure === "malformed"
        ? `a sealed secret is malformed (not base64url, or too short to be a sealed box): it was refused ` +
            `and not written; the controller must seal it again`
        : `a sealed secret was tampered with or is not addressed to this node (public key ${publicKey}): ` +
            `it was refused and not written; if this node's keys were replaced, enroll it again`,
      options,
    );
  }
}

/** A public key that is not an X25519 public key (32 bytes, base64url). */
export class InvalidPublicKeyError extends Error {
  override name = "InvalidPublicKeyError";
  constructor(readonly publicKey: string) {
    super(
      `${JSON.stringify(publicKey.slice(0, 60))} is not a node's sealing public key (32 bytes, base64url): ` +
        `use the publicKey the node's newNodeKeys() made`,
    );
  }
}

const BASE64URL = /^[A-Za-z0-9_-]+$/;

/** Makes a node's sealing key pair from the operating system's CSPRNG. */
export async function newNodeKeys(): Promise<NodeKeys> {
  await sodium.ready;
  const { publicKey, privateKey } = sodium.crypto_box_keypair();
  return { publicKey: encode(publicKey), privateKey: encode(privateKey) };
}

/**
 * Seals `plaintext` so that only the holder of `recipientPublicKey`'s private key can open it.
 * Returns the box, base64url.
 * @throws InvalidPublicKeyError when the key is not a 32-byte base64url key.
 */
export async function seal(plaintext: string, recipientPublicKey: string): Promise<string> {
  await sodium.ready;
  const key = decode(recipientPublicKey);
  if (key === undefined || key.length !== sodium.crypto_box_PUBLICKEYBYTES) {
    throw new InvalidPublicKeyError(recipientPublicKey);
  }
  return encode(sealedBox(new TextEncoder().encode(plaintext), key));
}

/**
 * libsodium's sealed box (`crypto_box_seal`), built from its own parts so that its one random input,
 * the ephemeral key's seed, comes from node's CSPRNG in one call: libsodium's JavaScript build asks
 * for randomness four bytes at a time, which was most of a seal's cost. The box is the same:
 * the ephemeral public key, then `crypto_box_easy` of the message to `key` with the ephemeral
 * private key and the nonce blake2b(ephemeral public key ‖ `key`) of 24 bytes; so
 * `crypto_box_seal_open` opens it.
 */
function sealedBox(message: Uint8Array, key: Uint8Array): Uint8Array {
  const ephemeral = sodium.crypto_box_seed_keypair(new Uint8Array(randomBytes(sodium.crypto_box_SEEDBYTES)));
  const both = new Uint8Array(ephemeral.publicKey.length + key.length);
  both.set(ephemeral.publicKey);
  both.set(key, ephemeral.publicKey.length);
  const nonce = sodium.crypto_generichash(sodium.crypto_box_NONCEBYTES, both, null);
  const box = sodium.crypto_box_easy(message, nonce, key, ephemeral.privateKey);
  sodium.memzero(ephemeral.privateKey);
  const sealed = new Uint8Array(ephemeral.publicKey.length + box.length);
  sealed.set(ephemeral.publicKey);
  sealed.set(box, ephemeral.publicKey.length);
  return sealed;
}

/**
 * Opens a box made by `seal` for this node.
 * @throws SealError when the box was tampered with, is addressed to another node, or is malformed.
 */
export async function unseal(box: string, keys: NodeKeys): Promise<string> {
  await sodium.ready;
  const bytes = decode(box);
  const publicKey = decode(keys.publicKey);
  const privateKey = decode(keys.privateKey);
  if (publicKey === undefined || publicKey.length !== sodium.crypto_box_PUBLICKEYBYTES) {
    throw new InvalidPublicKeyError(keys.publicKey);
  }
  if (privateKey === undefined || privateKey.length !== sodium.crypto_box_SECRETKEYBYTES) {
    // Said without the key itself: it is secret.
    throw new InvalidPublicKeyError("(this node's private key)");
  }
  if (bytes === undefined || bytes.length < sodium.crypto_box_SEALBYTES) {
    throw new SealError("malformed", keys.publicKey);
  }
  let opened: Uint8Array;
  try {
    opened = sodium.crypto_box_seal_open(bytes, publicKey, privateKey);
  } catch (err) {
    // A changed box and a box sealed to another key fail the same authentication check, so the two
    // cannot be told apart; the message names both.
    throw new SealError("tampered-or-not-for-this-node", keys.publicKey, { cause: err });
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(opened);
  } catch (err) {
    throw new SealError("malformed", keys.publicKey, { cause: err });
  }
}

/** The bytes of randomness in a minted password: 192 bits. */
export const PASSWORD_BYTES = 24;

/**
 * A new password: 192 bits from the operating system's CSPRNG, base64url (32 characters of
 * A-Z, a-z, 0-9, `-` and `_`), so it fits in a URL or a config file unescaped.
 */
export function mintPassword(): string {
  return randomBytes(PASSWORD_BYTES).toString("base64url");
}

function encode(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("base64url");
}

// Buffer's decoder skips characters it does not know, so the text is checked first, and the
// round trip makes sure no bytes were made up.
function decode(text: string): Uint8Array | undefined {
  if (!BASE64URL.test(text)) return undefined;
  const bytes = Buffer.from(text, "base64url");
  return bytes.toString("base64url") === text ? new Uint8Array(bytes) : undefined;
}
