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
