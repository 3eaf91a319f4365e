// A small fleet on disk for the agent's tests: a provider, consumers with and without a `run`, and
// tiny node scripts as their programs, planned by @mesh/manifest exactly as the controller plans.
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { derivePlan, loadFleet, loadFleetManifests, type DeliveredModule, type Plan } from "@mesh/manifest";

/** A script that records its environment beside its control socket, then keeps running. */
const STAY = `import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
if (process.argv.includes("--ignore-sigterm")) process.on("SIGTERM", () => console.log("SIGTERM ignored"));
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k.startsWith("MESH_") || k === "AGENT_TEST" || k === "HOME"));
writeFileSync(join(dirname(process.env.MESH_CONTROL), "env.json"), JSON.stringify({ pid: process.pid, cwd: process.cwd(), env }));
console.log("up and running");
setInterval(() => {}, 1000);
`;

/** A script that fails at once. */
const CRASH = `console.error("boom: cannot go on");
process.exit(3);
`;

/** The modules of the test fleet, each with its manifest and (maybe) its program. */
const MODULES: Record<string, { node: string; manifest: object }> = {
  store: {
    node: "n1",
    manifest: {
      name: "store",
      adminUrl: false,
      provides: {
        "kv-store": {
          receives: "/run/mesh/kv-store.json",
          spec: { name: { type: "string", default: "{login}" } },
          endpoint: { scheme: "kv", port: 7000, path: "/{name}" },
        },
      },
      run: { command: "node", args: ["../scripts/stay.mjs"] },
    },
  },
  app: {
    node: "n1",
    manifest: {
      name: "app",
      needs: { "kv-store": { values: { name: "appdata" } } },
      run: { command: "node", args: ["../scripts/stay.mjs"] },
    },
  },
  worker: { node: "n1", manifest: { name: "worker", needs: { "kv-store": {} } } },
  flaky: {
    node: "n1",
    manifest: { name: "flaky", run: { command: "node", args: ["../scripts/crash.mjs"] } },
  },
  stubborn: {
    node: "n1",
    manifest: {
      name: "stubborn",
      run: { command: "node", args: ["../scripts/stay.mjs", "--ignore-sigterm"] },
    },
  },
  remote: {
    node: "n2",
    manifest: {
      name: "remote",
      needs: { "kv-store": {} },
      run: { command: "node", args: ["../scripts/stay.mjs"] },
    },
  },
};

/** The fleet on disk: its plan, and each module as a delivery names it. */
export interface TestFleet {
  readonly dir: string;
  readonly plan: Plan;
  module(name: string): DeliveredModule;
}

/** Writes the test fleet under `dir` and plans it. */
export async function writeTestFleet(dir: string): Promise<TestFleet> {
  await mkdir(join(dir, "scripts"), { recursive: true });
  await writeFile(join(dir, "scripts", "stay.mjs"), STAY);
  await writeFile(join(dir, "scripts", "crash.mjs"), CRASH);
  const lines = ["nodes:", "  n1: {}", "  n2: {}", "modules:"];
  for (const [name, { node, manifest }] of Object.entries(MODULES)) {
    await mkdir(join(dir, name), { recursive: true });
    await writeFile(join(dir, name, "module.json"), JSON.stringify(manifest, null, 2));
    lines.push(`  ${name}:`, `    manifest: ./${name}/module.json`, `    node: ${node}`);
  }
  await writeFile(join(dir, "mesh.yaml"), `${lines.join("\n")}\n`);
  const fleet = await loadFleet(join(dir, "mesh.yaml"));
  const plan = derivePlan(fleet, await loadFleetManifests(fleet));
  return {
    dir,
    plan,
    module: (name) => ({ name, manifest: join(dir, name, "module.json") }),
  };
}

/** `plan` narrowed to what `node` takes part in, and to the consumers in `consumers` when given. */
export function planFor(plan: Plan, node: string, consumers?: readonly string[]): Plan {
  return {
    instances: plan.instances
      .map((i) => ({
        ...i,
        consumers: i.consumers.filter(
          (c) => (i.node === node || c.consumerNode === node) && (consumers?.includes(c.consumer) ?? true),
        ),
      }))
      .filter((i) => i.node === node || i.consumers.length > 0),
  };
}
