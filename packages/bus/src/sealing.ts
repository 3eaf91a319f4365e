// Passwords travel and rest sealed: a public-key sealed box (X25519 + XSalsa20-Poly1305, libsodium's
// crypto_box_seal) to each node that needs one. Only the holder of the node's private key can open
// it, and any change to the box makes opening fail, so a tampered secret is never written to disk.
import {
  createPublicKey,
  diffieHellman,
  generateKeyPairSync,
  randomBytes,
  type KeyObject,
} from "node:crypto";
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
  return encode(sealedBox(new TextEncoder().encode(plaintext), key, recipientPublicKey));
}

/**
 * libsodium's sealed box (`crypto_box_seal`), built from its parts so that its two X25519
 * operations run in node's own crypto (OpenSSL, native) rather than in libsodium's WebAssembly,
 * about twice as slow; they were most of a seal's cost, and a large fleet's delivery seals tens of
 * thousands. The box is the same: the ephemeral public key, then `crypto_box_easy` of the message
 * to `key` with the ephemeral private key and the nonce blake2b(ephemeral public key ‖ `key`) of 24
 * bytes; so `crypto_box_seal_open` opens it. `crypto_box_easy` is `crypto_secretbox_easy` under the
 * key `crypto_box_beforenm` makes: HSalsa20 of the X25519 shared secret.
 */
function sealedBox(message: Uint8Array, key: Uint8Array, keyText: string): Uint8Array {
  // Both keys stay OpenSSL's; the public one is read out as a JWK (far cheaper than as DER).
  const ephemeral = generateKeyPairSync("x25519");
  const ephemeralPublic = new Uint8Array(
    Buffer.from(ephemeral.publicKey.export({ format: "jwk" }).x as string, "base64url"),
  );
  const shared = diffieHellman({ privateKey: ephemeral.privateKey, publicKey: recipientKey(keyText, key) });
  const boxKey = hsalsa20(shared);
  shared.fill(0);
  const both = new Uint8Array(ephemeralPublic.length + key.length);
  both.set(ephemeralPublic);
  both.set(key, ephemeralPublic.length);
  const nonce = sodium.crypto_generichash(sodium.crypto_box_NONCEBYTES, both, null);
  const box = sodium.crypto_secretbox_easy(message, nonce, boxKey);
  boxKey.fill(0);
  const sealed = new Uint8Array(ephemeralPublic.length + box.length);
  sealed.set(ephemeralPublic);
  sealed.set(box, ephemeralPublic.length);
  return sealed;
}

// A recipient's public key as OpenSSL takes it; made once per key (making one costs about as much
// as the X25519 operation itself), for the few keys a controller seals to: its own and its nodes'.
const recipients = new Map<string, KeyObject>();
const RECIPIENTS_KEPT = 1024;
// The DER (SubjectPublicKeyInfo) prefix of an X25519 public key: algorithm id 1.3.101.110, then the key.
const X25519_SPKI_PREFIX = Buffer.from("302a300506032b656e032100", "hex");

function recipientKey(text: string, key: Uint8Array): KeyObject {
  let made = recipients.get(text);
  if (made === undefined) {
    made = createPublicKey({ key: Buffer.concat([X25519_SPKI_PREFIX, key]), format: "der", type: "spki" });
    if (recipients.size >= RECIPIENTS_KEPT) recipients.clear();
    recipients.set(text, made);
  }
  return made;
}

// "expand 32-byte k", as four little-endian words.
const SIGMA = [0x61707865, 0x3320646e, 0x79622d32, 0x6b206574] as const;

const rotl = (v: number, c: number): number => (v << c) | (v >>> (32 - c));

/**
 * HSalsa20 of the 32-byte `key` with an all-zero 16-byte input: the Salsa20 core's 20 rounds over
 * the constants, key and input, whose output is the words at the diagonal and the input's
 * positions, without the final addition (so the state cannot be worked back to the key). This is
 * how `crypto_box_beforenm` makes a box's key from the X25519 shared secret.
 */
export function hsalsa20(key: Uint8Array): Uint8Array {
  if (key.length !== 32) throw new RangeError("HSalsa20 takes a 32-byte key");
  const word = (at: number): number =>
    (key[at] as number) |
    ((key[at + 1] as number) << 8) |
    ((key[at + 2] as number) << 16) |
    ((key[at + 3] as number) << 24);
  let [x0, x5, x10, x15] = SIGMA;
  let x1 = word(0);
  let x2 = word(4);
  let x3 = word(8);
  let x4 = word(12);
  let x11 = word(16);
  let x12 = word(20);
  let x13 = word(24);
  let x14 = word(28);
  let x6 = 0;
  let x7 = 0;
  let x8 = 0;
  let x9 = 0;
  for (let round = 0; round < 20; round += 2) {
    // The columns, each from its diagonal word down.
    x4 ^= rotl(x0 + x12, 7);
    x8 ^= rotl(x4 + x0, 9);
    x12 ^= rotl(x8 + x4, 13);
    x0 ^= rotl(x12 + x8, 18);
    x9 ^= rotl(x5 + x1, 7);
    x13 ^= rotl(x9 + x5, 9);
    x1 ^= rotl(x13 + x9, 13);
    x5 ^= rotl(x1 + x13, 18);
    x14 ^= rotl(x10 + x6, 7);
    x2 ^= rotl(x14 + x10, 9);
    x6 ^= rotl(x2 + x14, 13);
    x10 ^= rotl(x6 + x2, 18);
    x3 ^= rotl(x15 + x11, 7);
    x7 ^= rotl(x3 + x15, 9);
    x11 ^= rotl(x7 + x3, 13);
    x15 ^= rotl(x11 + x7, 18);
    // Then the rows, each from its diagonal word along.
    x1 ^= rotl(x0 + x3, 7);
    x2 ^= rotl(x1 + x0, 9);
    x3 ^= rotl(x2 + x1, 13);
    x0 ^= rotl(x3 + x2, 18);
    x6 ^= rotl(x5 + x4, 7);
    x7 ^= rotl(x6 + x5, 9);
    x4 ^= rotl(x7 + x6, 13);
    x5 ^= rotl(x4 + x7, 18);
    x11 ^= rotl(x10 + x9, 7);
    x8 ^= rotl(x11 + x10, 9);
    x9 ^= rotl(x8 + x11, 13);
    x10 ^= rotl(x9 + x8, 18);
    x12 ^= rotl(x15 + x14, 7);
    x13 ^= rotl(x12 + x15, 9);
    x14 ^= rotl(x13 + x12, 13);
    x15 ^= rotl(x14 + x13, 18);
  }
  const out = new Uint8Array(32);
  const view = new DataView(out.buffer);
  [x0, x5, x10, x15, x6, x7, x8, x9].forEach((w, i) => view.setUint32(i * 4, w >>> 0, true));
  return out;
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
