// The authority's keys sign a JWT for every module of the mesh. nkeys keeps only a key's seed and
// derives the key pair from it again, in JavaScript, at each use: its public key, its private key
// and each signature cost an ed25519 scalar multiplication, milliseconds each, several per JWT
// (seconds of the controller for a hundred modules). A signing key derives them once and signs
// with node's own ed25519, whose signatures are the same bytes (ed25519 is deterministic).
import { createPrivateKey, generateKeyPairSync, sign, type KeyObject } from "node:crypto";
import { Prefix, type KeyPair } from "@nats-io/nkeys";
// The package's encoder of keys (prefix, base32, checksum), which its own key pairs use; not
// re-exported from its root.
import { Codec } from "@nats-io/nkeys/lib/codec.js";

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
/** An ed25519 private key in PKCS #8 (DER), up to its 32-byte seed. */
const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");

function base32Decode(text: string): Buffer {
  const out: number[] = [];
  let bits = 0;
  let value = 0;
  for (const ch of text) {
    const digit = BASE32.indexOf(ch);
    if (digit < 0) throw new Error("not base32");
    value = (value << 5) | digit;
    bits += 5;
    if (bits >= 8) {
      out.push((value >>> (bits - 8)) & 0xff);
      bits -= 8;
    }
  }
  return Buffer.from(out);
}

/** `kp`'s ed25519 private key, from its seed (`S…`: two bytes of prefix, 32 of seed, two of checksum). */
function privateKeyOf(kp: KeyPair): KeyObject {
  const raw = base32Decode(new TextDecoder().decode(kp.getSeed())).subarray(2, 34);
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519, raw]), format: "der", type: "pkcs8" });
}

/**
 * A new user key pair (`U…` public key, `SU…` seed), made by node's own ed25519: the same pair
 * nkeys would make from that seed (`fromSeed(seed).getPublicKey()` is `publicKey`), in tens of
 * microseconds, where nkeys derives the public key in JavaScript in milliseconds.
 */
export function newUserKeyPair(): { publicKey: string; seed: string } {
  const jwk = generateKeyPairSync("ed25519").privateKey.export({ format: "jwk" });
  const seed = new Uint8Array(Buffer.from(jwk.d ?? "", "base64url"));
  const raw = new Uint8Array(Buffer.from(jwk.x ?? "", "base64url"));
  if (seed.length !== 32 || raw.length !== 32)
    throw new Error("node made an ed25519 key that is not 32 bytes");
  const text = new TextDecoder();
  return {
    publicKey: text.decode(Codec.encode(Prefix.User, raw)),
    seed: text.decode(Codec.encodeSeed(Prefix.User, seed)),
  };
}

class SigningKey implements KeyPair {
  readonly #kp: KeyPair;
  #publicKey: string | undefined;
  #privateKey: Uint8Array | undefined;
  #signer: KeyObject | undefined;

  constructor(kp: KeyPair) {
    this.#kp = kp;
  }

  getPublicKey(): string {
    return (this.#publicKey ??= this.#kp.getPublicKey());
  }

  getPrivateKey(): Uint8Array {
    return (this.#privateKey ??= this.#kp.getPrivateKey());
  }

  getSeed(): Uint8Array {
    return this.#kp.getSeed();
  }

  sign(input: Uint8Array): Uint8Array {
    return new Uint8Array(sign(null, input, (this.#signer ??= privateKeyOf(this.#kp))));
  }

  verify(input: Uint8Array, sig: Uint8Array): boolean {
    return this.#kp.verify(input, sig);
  }

  clear(): void {
    this.#publicKey = undefined;
    this.#privateKey = undefined;
    this.#signer = undefined;
    this.#kp.clear();
  }

  seal(input: Uint8Array, recipient: string, nonce?: Uint8Array): Uint8Array {
    return this.#kp.seal(input, recipient, nonce);
  }

  open(message: Uint8Array, sender: string): Uint8Array | null {
    return this.#kp.open(message, sender);
  }
}

/** `kp` deriving its public and private key once, and signing natively. */
export function signingKey(kp: KeyPair): KeyPair {
  return kp instanceof SigningKey ? kp : new SigningKey(kp);
}
