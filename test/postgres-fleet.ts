// The fleet file most through-mesh tests write: one node, node-a, with the Postgres provider against a
// test server (its admin URL from MESH_POSTGRES_URL), then the test's own modules.
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

/** What goes into the fleet beside the provider. */
export interface PostgresFleetOptions {
  /** A pass every second (`MESH_EVERY: 1s`, the default) or at the provider's own pace (false). */
  readonly everySecond?: boolean;
  /** Module entries as written (YAML lines, two spaces in), before the modules named. */
  readonly entries?: readonly string[];
}

/**
 * The fleet's text: node-a, the Postgres provider serving `server`'s port on 127.0.0.1, then
 * `entries`, then each of `modules` from `./<module>/module.json` on node-a.
 */
export function postgresFleetYaml(
  server: { readonly port: number },
  modules: readonly string[],
  options: PostgresFleetOptions = {},
): string {
  return [
    "nodes:",
    "  node-a: {}",
    "modules:",
    "  postgres:",
    `    manifest: ${JSON.stringify(join(root, "providers", "postgres", "module.json"))}`,
    "    node: node-a",
    `    endpoint: { host: 127.0.0.1, port: ${server.port} }`,
    "    admin: { env: MESH_POSTGRES_URL }",
    ...(options.everySecond === false ? [] : ["    env: { MESH_EVERY: 1s }"]),
    ...(options.entries ?? []),
    ...modules.map((m) => `  ${m}: { manifest: ./${m}/module.json, node: node-a }`),
    "",
  ].join("\n");
}
