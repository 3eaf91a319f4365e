// Small fleets built in memory: a fleet file's text and its manifests as objects, so each test
// shows exactly the mistake it is about.
import { parseFleet, parseManifest, type Fleet, type Manifest } from "@mesh/manifest";

/** The fleet file every problem in these tests names. */
export const FLEET_FILE = "/srv/mesh/mesh.yaml";

/** A Postgres-like provider manifest: an optional database name, a list of extensions, an endpoint. */
export const POSTGRES = {
  name: "postgres",
  provides: {
    "postgres-database": {
      receives: "/run/mesh/postgres-database.json",
      spec: {
        name: {
          type: "string",
          pattern: "^[a-z][a-z0-9_]{0,31}$",
          default: "{login}",
          description: "The consumer's database name. Fixed once made.",
        },
        extensions: { type: "array", items: { enum: ["pgcrypto", "citext"] } },
      },
      endpoint: { scheme: "postgresql", port: 5432, path: "/{name}" },
    },
  },
};

/** A Redis-like provider manifest: no values, a derived key prefix. */
export const REDIS = {
  name: "redis",
  provides: {
    "redis-namespace": {
      receives: "/run/mesh/redis-namespace.json",
      spec: {},
      derives: { prefix: "{login}:" },
      endpoint: { scheme: "redis", port: 6379 },
    },
  },
};

/** A consumer manifest needing each interface given, with the values given. */
export function consumer(name: string, needs: Record<string, Record<string, unknown>> = {}): object {
  return {
    name,
    needs: Object.fromEntries(Object.entries(needs).map(([iface, values]) => [iface, { values }])),
  };
}

/**
 * Parses `yaml` as the fleet file, and gives each module the manifest in `manifests` under its
 * name (each serialized to a file named `/srv/mesh/<module>/module.json` so lines can be checked).
 */
export function fleetOf(
  yaml: string,
  manifests: Record<string, object>,
): { fleet: Fleet; manifests: Map<string, Manifest> } {
  const fleet = parseFleet(yaml, FLEET_FILE);
  const parsed = new Map<string, Manifest>();
  for (const [module, doc] of Object.entries(manifests)) {
    parsed.set(module, parseManifest(JSON.stringify(doc, null, 2), `/srv/mesh/${module}/module.json`));
  }
  return { fleet, manifests: parsed };
}
