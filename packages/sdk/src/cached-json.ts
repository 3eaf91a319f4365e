// The JSON of values that never change once made (a provider's frozen status snapshot), kept beside
// them: a status of 100,000 consumers is many megabytes of JSON, and writing it out again for every
// request would hold the event loop each time.

// Kept as text until first asked for, then as the bytes written to a socket (and the text let go):
// one copy of a snapshot's JSON, not two.
const known = new WeakMap<object, string | Buffer>();

/**
 * Remembers `json` as the JSON text of `value`, which must be frozen (deeply, in effect: nothing in
 * it changes again) and must serialise to exactly that text.
 */
export function rememberJson(value: object, json: string): void {
  known.set(value, json);
}

/**
 * The UTF-8 bytes of `JSON.stringify(value)`, from memory when it was remembered or already made
 * once; a value is kept only when it is frozen, since anything else may change before it is asked
 * for again.
 */
export function jsonBytes(value: unknown): Buffer {
  if (typeof value !== "object" || value === null)
    return Buffer.from(JSON.stringify(value) ?? "null", "utf8");
  const kept = known.get(value);
  if (kept !== undefined && typeof kept !== "string") return kept;
  const bytes = Buffer.from(kept ?? JSON.stringify(value), "utf8");
  if (Object.isFrozen(value)) known.set(value, bytes);
  return bytes;
}
