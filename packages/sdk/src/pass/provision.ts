// What a consumer's entry and password make the backend hold, and the digest that tells whether
// that changed since it was last applied.

import { createHash } from "node:crypto";
import type { Provision } from "../adapter.ts";
import type { Contribution } from "../contributions-file.ts";

/** What `create` is given for entry `g` with its password. */
export function provisionOf(g: Contribution, password: string): Provision {
  return {
    as: g.as,
    password,
    values: g.values,
    derived: g.derived,
    at: g.at,
    node: g.node,
    ...(g.login === undefined ? {} : { login: g.login }),
    ...(g.minted === undefined ? {} : { minted: g.minted }),
  };
}

/** A digest of everything a create is given: what changed is re-applied, nothing else. */
export function digestOf(p: Provision): string {
  return createHash("sha256")
    .update(
      stableJson([
        p.as,
        p.password,
        p.values,
        p.derived,
        p.retiring ?? null,
        ...(p.login === undefined ? [] : [p.login]),
      ]),
    )
    .digest("base64url");
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) =>
      a < b ? -1 : a > b ? 1 : 0,
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "null";
}
