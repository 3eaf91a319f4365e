import { createHash } from "node:crypto";
import { assertInterfaceName, assertModuleName } from "./names.ts";

/** What every backend accepts as a login: lowercase, starts with a letter, at most 32 characters. */
export const LOGIN_PATTERN = /^[a-z][a-z0-9_]{0,31}$/;

/** Longest login written out in full; longer ones are shortened and hashed to exactly 32. */
const FULL_MAX = 31;
const HASH_CHARS = 8;
const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

function base32(bytes: Uint8Array, chars: number): string {
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = (buffer << 8) | byte;
    bits += 8;
    while (bits >= 5 && out.length < chars) {
      out += BASE32[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
    if (out.length >= chars) break;
  }
  return out;
}

/**
 * The login of `consumer` for the interface `iface`: `notes` + `postgres-database` →
 * `notes_postgres` (the module, `_`, the interface's first word, with `-` made `_`).
 *
 * Deterministic, so controller, agent and provider recompute it rather than remember it. Module
 * names hold no `_`, so the written-out form is one-to-one in (module, first word of the
 * interface); a module needing two interfaces with one first word is a collision `checkFleet`
 * reports. A login longer than 31 characters is cut to 23 and given `_` and 8 characters of a
 * hash of both full names: exactly 32, so it can never equal a written-out one.
 * @throws InvalidNameError when `consumer` is not a module name or `iface` not an interface name.
 */
export function deriveLogin(consumer: string, iface: string): string {
  assertModuleName(consumer);
  assertInterfaceName(iface);
  const word = iface.split("-")[0] ?? iface;
  const full = `${consumer}_${word}`.replaceAll("-", "_");
  if (full.length <= FULL_MAX) return full;
  const hash = createHash("sha256").update(`${consumer}\n${iface}`).digest();
  return `${full.slice(0, 32 - 1 - HASH_CHARS)}_${base32(hash, HASH_CHARS)}`;
}

/** What ends every second login: a last segment that starts with a digit, as no derived login's does. */
const SECOND_SUFFIX = "_2";
/** Longest login that takes the suffix as it is (30 + 2 = 32). */
const SECOND_FULL_MAX = 32 - SECOND_SUFFIX.length;

/**
 * The second login of a consumer whose backend alternates logins at each rotation (Postgres, which
 * holds one password per role): `notes_postgres` → `notes_postgres_2`. Deterministic, like
 * `deriveLogin`, so every part of the mesh recomputes it.
 *
 * It can never be another consumer's derived login: a written-out login ends in `_` and the
 * interface's first word, which starts with a letter; a shortened one ends in `_` and 8 hash
 * characters. A second login ends in `_2`. A login longer than 30 characters keeps its first 21,
 * then `_2`, 7 characters of a hash of the whole login and `_2` (exactly 32); that middle segment
 * starts with a digit, so it is never a written-out login with `_2` added either.
 * @throws Error when `login` is not a valid login.
 */
export function secondLogin(login: string): string {
  if (!LOGIN_PATTERN.test(login)) throw new Error(`login ${JSON.stringify(login)} is not valid`);
  if (login.length <= SECOND_FULL_MAX) return `${login}${SECOND_SUFFIX}`;
  const hash = createHash("sha256").update(`second\n${login}`).digest();
  return `${login.slice(0, 21)}_2${base32(hash, 7)}${SECOND_SUFFIX}`;
}

/** Whether `login` has the shape only `secondLogin` gives (it ends in `_2`). */
export function isSecondLogin(login: string): boolean {
  return LOGIN_PATTERN.test(login) && login.endsWith(SECOND_SUFFIX);
}
