// A fleet on disk for the controller's tests: two nodes, a Postgres-like provider on one and a
// Redis-like provider on the other, and consumers spread over both.
import { mkdir, mkdtemp, rename, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A Postgres-like provider's manifest. */
export const POSTGRES = {
  name: "postgres",
  adminUrl: false,
  provides: {
    "postgres-database": {
      receives: "/run/mesh/postgres-database.json",
      spec: { name: { type: "string", pattern: "^[a-z][a-z0-9_]{0,31}$", default: "{login}" } },
      endpoint: { scheme: "postgresql", port: 5432, path: "/{name}" },
    },
  },
};

/** A Redis-like provider's manifest. */
export const REDIS = {
  name: "redis",
  adminUrl: false,
  provides: {
    "redis-namespace": {
      receives: "/run/mesh/redis-namespace.json",
      spec: {},
      derives: { prefix: "{login}:" },
      endpoint: { scheme: "redis", port: 6379 },
    },
  },
};

/** Writes `manifest` as `<dir>/<name>/module.json`, as a fleet file names it (`./<name>/module.json`). */
export async function writeManifest(dir: string, name: string, manifest: object): Promise<void> {
  await mkdir(join(dir, name), { recursive: true });
  await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest));
}

const consumer = (name: string, ifaces: readonly string[]): object => ({
  name,
  needs: Object.fromEntries(ifaces.map((i) => [i, { values: {} }])),
});

/** The fleet file's text: node-a runs postgres and app1; node-b runs redis, app2 and app3. */
export const FLEET_YAML = `nodes:
  node-a: {}
  node-b: {}
modules:
  postgres: { manifest: ./postgres/module.json, node: node-a }
  redis: { manifest: ./redis/module.json, node: node-b }
  app1: { manifest: ./app1/module.json, node: node-a }
  app2: { manifest: ./app2/module.json, node: node-b }
  app3: { manifest: ./app3/module.json, node: node-b }
`;

/** The test fleet with app4 (a Postgres consumer on node-a) added. */
export const WITH_APP4 = `${FLEET_YAML}  app4: { manifest: ./app4/module.json, node: node-a }\n`;

/** A fleet directory on disk. */
export interface FleetDir {
  readonly dir: string;
  readonly fleetFile: string;
  /** Replaces the fleet file atomically (as an editor that renames over it does). */
  writeFleet(text: string): Promise<void>;
}

/**
 * Writes the test fleet under a new temp dir: app1 needs Postgres (same node), app2 needs Postgres
 * (from node-b) and Redis, app3 needs Redis, app4 (not in the fleet yet) needs Postgres.
 */
export async function makeFleetDir(): Promise<FleetDir> {
  const dir = await mkdtemp(join(tmpdir(), "mesh-controller-fleet-"));
  const manifests: Record<string, object> = {
    postgres: POSTGRES,
    redis: REDIS,
    app1: consumer("app1", ["postgres-database"]),
    app2: consumer("app2", ["postgres-database", "redis-namespace"]),
    app3: consumer("app3", ["redis-namespace"]),
    app4: consumer("app4", ["postgres-database"]),
  };
  for (const [name, manifest] of Object.entries(manifests)) await writeManifest(dir, name, manifest);
  const fleetFile = join(dir, "mesh.yaml");
  const writeFleet = async (text: string): Promise<void> => {
    const temp = `${fleetFile}.tmp`;
    await writeFile(temp, text);
    await rename(temp, fleetFile);
  };
  await writeFleet(FLEET_YAML);
  return { dir, fleetFile, writeFleet };
}
