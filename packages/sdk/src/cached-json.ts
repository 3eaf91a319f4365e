// The JSON of values that never change once made (a provider's frozen status snapshot), kept beside
// them: a status of 100,000 consumers is many megabytes of JSON, and writing it out again for every
// request would hold the event loop each time.

const known = new WeakMap<object, string>();

/**
 * Remembers `json` as the JSON text of `value`, which must be frozen (deeply, in effect: nothing in
 * it changes again) and must serialise to exactly that text.
 */
export function rememberJson(value: object, json: string): void {
  known.set(value, json);
}

/**
 * `JSON.stringify(value)`, from memory when it was remembered or already written once; a value is
 * kept only when it is frozen, since anything else may change before it is asked for again.
 */
export function cachedJson(value: unknown): string {
  if (typeof value !== "object" || value === null) return JSON.stringify(value);
  let json = known.get(value);
  if (json === undefined) {
    json = JSON.stringify(value);
    if (Object.isFrozen(value)) known.set(value, json);
  }
  return json;
}
