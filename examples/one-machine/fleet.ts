// The tour's fleet (`npm start`), shared with the benchmark that times its cold start
// (bench/tour.ts): one node, four providers and the example apps.
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const fleetDir = join(root, "examples", "fleet");

/** Where a server listens. */
export interface Served {
  readonly host: string;
  readonly port: number;
}

/** Where the server behind an admin URL listens. */
export function servedAt(url: string): Served {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

/** The apps of the tour's fleet, each with the line of its log that says it used its credential. */
export const TOUR_APPS = {
  notes: /stored note/,
  counter: /visit|count/i,
  files: /read it back/,
  "api-client": /signature verified/,
} as const satisfies Record<string, RegExp>;

/**
 * The tour's fleet file: the four providers, each given its backend's address and the variable that
 * holds its admin URL, passing every second, and the apps (notes only `withNotes`).
 */
export function tourFleetYaml(
  withNotes: boolean,
  pg: Served,
  redis: Served,
  s3: Served,
  oidc: Served,
): string {
  // A provider's admin URL reaches that provider alone: the agent hands it the variable its entry names.
  const m = (name: string, manifest: string, at?: Served) =>
    `  ${name}:\n    manifest: ${JSON.stringify(manifest)}\n    node: node-1\n` +
    (at
      ? `    endpoint: { host: ${at.host}, port: ${at.port} }\n` +
        `    admin: { env: MESH_${name.toUpperCase()}_URL }\n    env: { MESH_EVERY: 1s }\n`
      : "");
  return [
    "nodes:\n  node-1: {}\nmodules:\n",
    m("postgres", join(root, "providers", "postgres", "module.json"), pg),
    m("redis", join(root, "providers", "redis", "module.json"), redis),
    m("s3", join(root, "providers", "s3", "module.json"), s3),
    m("oidc", join(root, "providers", "oidc", "module.json"), oidc),
    withNotes ? m("notes", join(fleetDir, "notes", "module.json")) : "",
    m("counter", join(fleetDir, "counter", "module.json")),
    m("files", join(fleetDir, "files", "module.json")),
    m("api-client", join(fleetDir, "api-client", "module.json")),
    m("audit-logger", join(fleetDir, "audit-logger", "module.json")),
  ].join("");
}
