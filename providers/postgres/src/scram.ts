// SCRAM-SHA-256 verifiers computed here, so a consumer's password never reaches the server (or its
// statement log) in plain text: the server is handed the verifier, exactly as it would store it.

import { createHash, createHmac, pbkdf2, randomBytes, timingSafeEqual } from "node:crypto";
import { promisify } from "node:util";
import saslprep from "@mongodb-js/saslprep";

const pbkdf2Async = promisify(pbkdf2);

/** The iteration count PostgreSQL itself uses for new verifiers. */
export const SCRAM_ITERATIONS = 4096;

/** The parts of a stored SCRAM-SHA-256 verifier. */
export interface ScramVerifier {
  readonly iterations: number;
  readonly salt: Buffer;
  readonly storedKey: Buffer;
  readonly serverKey: Buffer;
}

/**
 * The password as the server normalises it before hashing: unchanged when it is pure ASCII,
 * else SASLprep (RFC 4013); when SASLprep refuses it (a prohibited or unassigned character) the
 * server falls back to the raw password, and so does this.
 */
export function preparePassword(password: string): string {
  if (/^[\x00-\x7f]*$/.test(password)) return password;
  try {
    const prepared = saslprep(password);
    return prepared === "" ? password : prepared;
  } catch {
    return password;
  }
}

async function keysFor(password: string, salt: Buffer, iterations: number): Promise<[Buffer, Buffer]> {
  const salted = await pbkdf2Async(
    Buffer.from(preparePassword(password), "utf8"),
    salt,
    iterations,
    32,
    "sha256",
  );
  const clientKey = createHmac("sha256", salted).update("Client Key").digest();
  const storedKey = createHash("sha256").update(clientKey).digest();
  const serverKey = createHmac("sha256", salted).update("Server Key").digest();
  return [storedKey, serverKey];
}

/**
 * Computes the verifier PostgreSQL stores for `password`:
 * `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 parts). Uses the
 * asynchronous pbkdf2 so a batch of creates does not stall the event loop.
 */
export async function scramVerifier(
  password: string,
  options: { salt?: Buffer; iterations?: number } = {},
): Promise<string> {
  const salt = options.salt ?? randomBytes(16);
  const iterations = options.iterations ?? SCRAM_ITERATIONS;
  const [storedKey, serverKey] = await keysFor(password, salt, iterations);
  const verifier =
    `SCRAM-SHA-256$${iterations}:${salt.toString("base64")}` +
    `$${storedKey.toString("base64")}:${serverKey.toString("base64")}`;
  // The server takes a malformed verifier for a plaintext password without a word; never send one.
  if (!parseScramVerifier(verifier)) throw new Error("computed a SCRAM verifier that does not parse (a bug)");
  return verifier;
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** The parts of a stored verifier, or undefined when `text` is not a SCRAM-SHA-256 verifier. */
export function parseScramVerifier(text: string | null | undefined): ScramVerifier | undefined {
  if (typeof text !== "string") return undefined;
  const match = /^SCRAM-SHA-256\$(\d{1,9}):([^$:]+)\$([^$:]+):([^$:]+)$/.exec(text);
  if (!match) return undefined;
  const [, iter, salt, stored, server] = match;
  if (!iter || !salt || !stored || !server) return undefined;
  if (![salt, stored, server].every((part) => BASE64.test(part))) return undefined;
  const iterations = Number(iter);
  const storedKey = Buffer.from(stored, "base64");
  const serverKey = Buffer.from(server, "base64");
  if (iterations < 1 || storedKey.length !== 32 || serverKey.length !== 32) return undefined;
  return { iterations, salt: Buffer.from(salt, "base64"), storedKey, serverKey };
}

/**
 * Whether `stored` (a role's `rolpassword`) is the verifier of `password`, recomputed with the
 * stored salt and iteration count. False for anything that is not a SCRAM-SHA-256 verifier.
 */
export async function verifierMatches(stored: string | null | undefined, password: string): Promise<boolean> {
  const parsed = parseScramVerifier(stored);
  if (!parsed) return false;
  const [storedKey, serverKey] = await keysFor(password, parsed.salt, parsed.iterations);
  return timingSafeEqual(storedKey, parsed.storedKey) && timingSafeEqual(serverKey, parsed.serverKey);
}
