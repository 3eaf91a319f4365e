// How a connection proves who it is: the creds file's JWT, and the server's nonce signed with the
// creds file's seed. nats.js's own `credsAuthenticator` signs with tweetnacl, Ed25519 in plain
// JavaScript, whose first signature in a process takes 100–250 ms: most of what a short command
// such as `mesh status` spends. This signs with Node's Ed25519 (OpenSSL) instead. Ed25519 is
// deterministic, so the signature, and all that is sent, is byte for byte what nats.js sends.
import { createPrivateKey, createPublicKey, sign, type KeyObject } from "node:crypto";
import type { Authenticator, JwtAuth } from "@nats-io/transport-node";

// The two armoured blocks of a creds file, the JWT then the seed: nats.js's own pattern.
const CREDS = /\s*(?:(?:[-]{3,}[^\n]*[-]{3,}\n)(.+)(?:\n\s*[-]{3,}[^\n]*[-]{3,}\n))/gi;

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

// An nkey's first byte says what it is: a seed's carries the seed prefix and the top of the role's.
const SEED_PREFIX = 18 << 3;
const USER_PREFIX = 20 << 3;

// A PKCS #8 Ed25519 private key is this DER header and the 32-byte seed.
const PKCS8_ED25519 = Buffer.from("302e020100300506032b657004220420", "hex");

/** The nkeys checksum: CRC-16/XMODEM of the payload. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++)
      crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

function base32Decode(text: string): Uint8Array {
  const out: number[] = [];
  let bits = 0;
  let value = 0;
  for (const char of text) {
    const index = BASE32.indexOf(char);
    if (index === -1) throw new Error("unable to parse credentials: the seed is not base32");
    value = (value << 5) | index;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      out.push((value >>> bits) & 0xff);
    }
  }
  return Uint8Array.from(out);
}

function base32Encode(bytes: Uint8Array): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const byte of bytes) {
    value = (value << 8) | byte;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += BASE32[(value >>> bits) & 31];
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31];
  return out;
}

/** The Ed25519 key a user seed (`SU…`) encodes, checked as nkeys checks it. */
function userKey(seed: string): KeyObject {
  const raw = base32Decode(seed);
  const payload = raw.subarray(0, raw.length - 2);
  const checksum = (raw[raw.length - 2] ?? 0) | ((raw[raw.length - 1] ?? 0) << 8);
  // Two prefix bytes (seed, then the role), the 32-byte Ed25519 seed, the checksum.
  if (raw.length !== 36 || crc16(payload) !== checksum)
    throw new Error("unable to parse credentials: the seed is damaged (its length or checksum is wrong)");
  const role = (((raw[0] ?? 0) & 7) << 5) | (((raw[1] ?? 0) & 248) >> 3);
  if (((raw[0] ?? 0) & 248) !== SEED_PREFIX || role !== USER_PREFIX)
    throw new Error("unable to parse credentials: the seed is not a user's");
  return createPrivateKey({
    key: Buffer.concat([PKCS8_ED25519, payload.subarray(2)]),
    format: "der",
    type: "pkcs8",
  });
}

/** The user's public nkey (`U…`) of `key`. */
function publicNkey(key: KeyObject): string {
  const spki = createPublicKey(key).export({ format: "der", type: "spki" });
  const payload = Buffer.concat([Buffer.from([USER_PREFIX]), spki.subarray(spki.length - 32)]);
  const checksum = crc16(payload);
  return base32Encode(Buffer.concat([payload, Buffer.from([checksum & 0xff, checksum >> 8])]));
}

/**
 * The authenticator of a creds file's contents (or of a function returning them, read again at each
 * (re)connect): its JWT, its user's public nkey, and the nonce signed with its seed, as nats.js's
 * `credsAuthenticator` gives them.
 * @throws Error ("unable to parse credentials…"), when called, for contents that are not a user's creds.
 */
export function credsAuthenticator(creds: Uint8Array | (() => Uint8Array)): Authenticator {
  return (nonce?: string): JwtAuth => {
    const text = new TextDecoder().decode(typeof creds === "function" ? creds() : creds);
    CREDS.lastIndex = 0;
    const jwt = CREDS.exec(text)?.[1]?.trim();
    const seed = CREDS.exec(text)?.[1]?.trim();
    if (jwt === undefined || seed === undefined) throw new Error("unable to parse credentials");
    const key = userKey(seed);
    const sig = nonce ? sign(null, new TextEncoder().encode(nonce), key).toString("base64") : "";
    return { jwt, nkey: publicNkey(key), sig };
  };
}
