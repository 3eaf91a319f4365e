// A provider in one file: an adapter over a Map, run by the sdk's harness on a contributions file
// and a secret file written here the way the agent writes them. It shows the whole contract an
// adapter keeps, with no server to start:
//   node --conditions=source --import tsx examples/hello-provider/main.ts
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runProvisioner, type Adapter, type InventoryEntry, type Provision } from "@mesh/sdk";

/** What the "backend" keeps per login: the password, whether it is retired, and this instance's mark. */
interface Held {
  password: string;
  retired?: { at: Date; why: string };
}

/** The adapter: the only code a provider writes. The harness holds every rule around it. */
function createMapAdapter(backend: Map<string, Held>): Adapter {
  return {
    async create(p: Provision) {
      backend.set(p.as, { password: p.password }); // idempotent; clears a retirement mark
    },
    async holds(p: Provision) {
      const held = backend.get(p.as);
      return held !== undefined && held.retired === undefined && held.password === p.password;
    },
    async retire(as, _derived, why, at) {
      const held = backend.get(as);
      if (held !== undefined) held.retired = { at, why }; // access off, data kept, marked
    },
    async inventory(): Promise<InventoryEntry[]> {
      return [...backend].map(([as, held]) => ({
        as,
        state: held.retired === undefined ? "active" : "retired",
        derived: {},
        retiredAt: held.retired?.at,
        why: held.retired?.why,
      }));
    },
    async delete(r) {
      backend.delete(r.as);
      return { freedBytes: 0 };
    },
  };
}

const dir = await mkdtemp(join(tmpdir(), "hello-provider-"));
try {
  // What the agent writes: each consumer's password (0600), then the contributions file, atomically.
  const secret = join(dir, "notes.hello-database");
  await writeFile(secret, "a-password-the-mesh-minted\n", { mode: 0o600 });
  const receives = join(dir, "hello-database.json");
  const given = [{ as: "notes_hello", secret, node: "node-1", values: {}, derived: {} }];
  await writeFile(`${receives}.tmp`, JSON.stringify({ requirement: "hello-database", given }));
  await rename(`${receives}.tmp`, receives);

  const backend = new Map<string, Held>();
  const handle = runProvisioner("hello-database", createMapAdapter(backend), {
    receives,
    instance: "hello",
    watch: false,
  });
  await handle.ready;
  for (const c of handle.status().consumers) console.log(`${c.login}: ${c.state} (${c.why})`);
  console.log(`the backend holds: ${[...backend.keys()].join(", ")}`);
  await handle.stop();
} finally {
  await rm(dir, { recursive: true, force: true });
}
