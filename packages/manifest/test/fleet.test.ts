import assert from "node:assert/strict";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  DEFAULT_MODULE_LIMITS,
  effectiveLimits,
  FleetError,
  loadFleet,
  loadFleetManifests,
  ManifestError,
  parseFleet,
  type Problem,
} from "@mesh/manifest";

const FILE = "fleets/home/mesh.yaml";
const MESH_REDIS_ENV = "MESH_REDIS_URL";

function problemsOf(text: string): readonly Problem[] {
  try {
    parseFleet(text, FILE);
  } catch (err) {
    assert.ok(err instanceof FleetError, `expected a FleetError, got ${String(err)}`);
    for (const p of err.problems) {
      assert.equal(p.file, FILE);
      assert.ok(p.fix.length > 0);
    }
    return err.problems;
  }
  assert.fail("the fleet file was accepted");
}

function problemOf(text: string, field: string): Problem {
  const problems = problemsOf(text);
  const found = problems.find((p) => p.field === field);
  assert.ok(found, `no problem at ${field}; got ${JSON.stringify(problems, null, 1)}`);
  return found;
}

const GOOD = `nodes:
  node-1: {}
  node-2:
    address: 10.0.0.2
modules:
  postgres: { manifest: ../../providers/postgres/module.json, node: node-1 }
  notes:
    manifest: ./notes/module.json
    node: node-2
    needs:
      postgres-database:
        values: { name: notes }
        provider: postgres
`;

describe("parseFleet", () => {
  it("reads nodes and modules, resolving manifest paths against the fleet file's directory", () => {
    const fleet = parseFleet(GOOD, FILE);
    assert.deepEqual([...fleet.nodes.keys()], ["node-1", "node-2"]);
    assert.equal(fleet.nodes.get("node-2")?.address, "10.0.0.2");
    assert.equal(fleet.modules.get("postgres")?.manifest, "providers/postgres/module.json");
    assert.equal(fleet.modules.get("notes")?.manifest, "fleets/home/notes/module.json");
    const need = fleet.modules.get("notes")?.needs.get("postgres-database");
    assert.deepEqual(need?.values, { name: "notes" });
    assert.equal(need?.provider, "postgres");
    assert.equal(fleet.modules.get("notes")?.line, 7);
  });

  it("keeps an absolute manifest path as it is", () => {
    const fleet = parseFleet(
      "nodes: { n: {} }\nmodules:\n  a: { manifest: /opt/a/module.json, node: n }\n",
      FILE,
    );
    assert.equal(fleet.modules.get("a")?.manifest, "/opt/a/module.json");
  });

  it("takes a node written with no settings (node-1:) as a node", () => {
    const fleet = parseFleet("nodes:\n  node-1:\nmodules: {}\n", FILE);
    assert.ok(fleet.nodes.has("node-1"));
  });

  it("refuses a module written twice instead of keeping the last, naming both lines", () => {
    const text = `nodes: { node-1: {} }
modules:
  notes: { manifest: ./a.json, node: node-1 }
  redis: { manifest: ./r.json, node: node-1 }
  notes: { manifest: ./b.json, node: node-1 }
`;
    const p = problemOf(text, "modules.notes");
    assert.equal(p.code, "duplicate-module");
    assert.equal(p.line, 5);
    assert.match(p.message, /lines 3, 5/);
    assert.match(p.fix, /unique/);
  });

  it("refuses a node or any other key written twice", () => {
    assert.equal(problemOf("nodes:\n  n: {}\n  n: {}\nmodules: {}\n", "nodes.n").code, "duplicate-key");
    const text = "nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    node: m\n";
    assert.equal(problemOf(text, "modules.a.node").line, 6);
  });

  it("says a file that is not YAML is not YAML, with the line", () => {
    const p = problemOf(
      "nodes:\n  node-1: {}\nmodules:\n  notes: { manifest: ./a.json, node: node-1\n",
      "(file)",
    );
    assert.equal(p.code, "not-yaml");
    assert.ok(p.line !== undefined && p.line >= 4, `line ${p.line}`);
  });

  it("says an empty file is empty and shows a fleet to start from", () => {
    const p = problemOf("# nothing yet\n", "(file)");
    assert.match(p.message, /empty/);
    assert.match(p.fix, /nodes:/);
  });

  it("refuses more than one document", () => {
    assert.equal(problemsOf("nodes: {}\nmodules: {}\n---\nnodes: {}\n")[0]?.code, "not-yaml");
  });

  it("names the field, line and fix of a missing or misspelt field", () => {
    const missing = problemOf("nodes: { n: {} }\nmodules:\n  a: { manifest: ./a.json }\n", "modules.a.node");
    assert.match(missing.message, /is missing/);
    assert.equal(missing.line, 3);
    const misspelt = problemOf(
      "nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    nedds: {}\n",
      "modules.a.nedds",
    );
    assert.equal(misspelt.line, 6);
    assert.match(misspelt.fix, /known fields here: manifest, node, needs/);
  });

  it("says values go under values: when they are written straight under the need", () => {
    const text =
      "nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    needs:\n      postgres-database: { name: notes }\n";
    const p = problemOf(text, "modules.a.needs.postgres-database.name");
    assert.equal(p.line, 7);
    assert.match(p.fix, /values, provider/);
  });

  it("refuses hostile module and node names", () => {
    for (const name of ["../etc", "Notes", "notes_app", "a.b", '"x y"', "'*'", "a".repeat(42), "'$x'"]) {
      const asModule = problemsOf(`nodes: { n: {} }\nmodules:\n  ${name}: { manifest: ./a.json, node: n }\n`);
      assert.match(asModule[0]?.message ?? "", /module name/, name);
      const asNode = problemsOf(`nodes:\n  ${name}: {}\nmodules: {}\n`);
      assert.match(asNode[0]?.message ?? "", /node name/, name);
    }
  });

  it("takes constructor and __proto__-like keys as data, never as inherited members", () => {
    const fleet = parseFleet(
      "nodes: { constructor: {} }\nmodules:\n  constructor: { manifest: ./a.json, node: constructor }\n",
      FILE,
    );
    assert.equal(fleet.modules.get("constructor")?.node, "constructor");
    assert.equal(fleet.modules.get("hasownproperty"), undefined);
    const withProto = parseFleet(
      "nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    needs:\n      x: { values: { __proto__: { polluted: true } } }\n",
      FILE,
    );
    assert.ok(Object.hasOwn(withProto.modules.get("a")?.needs.get("x")?.values ?? {}, "__proto__"));
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  it("refuses a document expanded by aliases beyond reason", () => {
    const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 8; i++)
      bomb.push(
        `${"b".repeat(i)}: &${"a".repeat(i + 1)} [${Array(10)
          .fill(`*${"a".repeat(i)}`)
          .join(", ")}]`,
      );
    assert.equal(problemsOf(bomb.join("\n"))[0]?.code, "not-yaml");
  });

  it("keeps a module's metrics address as written, another host than loopback included", () => {
    const fleet = parseFleet(
      `nodes: { n: {}, m: {} }
modules:
  a: { manifest: ./a.json, node: n, metrics: "0.0.0.0:9464" }
  b: { manifest: ./b.json, node: n, metrics: " [::1]:0 " }
  c: { manifest: ./c.json, node: n, metrics: "127.0.0.1:0" }
  d: { manifest: ./d.json, node: m, metrics: "127.0.0.1:9464" }
  e: { manifest: ./e.json, node: n }
`,
      FILE,
    );
    const metrics = [...fleet.modules.values()].map((m) => [m.name, m.metrics]);
    assert.deepEqual(metrics, [
      ["a", "0.0.0.0:9464"],
      ["b", "[::1]:0"],
      ["c", "127.0.0.1:0"],
      ["d", "127.0.0.1:9464"],
      ["e", undefined],
    ]);
  });

  it("refuses a metrics address that is not HOST:PORT, saying how to write one", () => {
    for (const [bad, why] of [
      ["metrics.example.com:9464", /is not an IP address or localhost/],
      ["127.0.0.1:99999", /past 65535/],
      ["127.0.0.1", /not HOST:PORT/],
      ["http://127.0.0.1:9464/metrics", /not HOST:PORT/],
    ] as const) {
      const p = problemOf(
        `nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    metrics: "${bad}"\n`,
        "modules.a.metrics",
      );
      assert.equal(p.line, 6);
      assert.match(
        p.message,
        /must be HOST:PORT where the module serves its Prometheus metrics, like 127\.0\.0\.1:9464/,
      );
      assert.match(p.message, why, p.message);
    }
    assert.match(
      problemOf(
        "nodes: { n: {} }\nmodules:\n  a: { manifest: ./a.json, node: n, metrics: 9464 }\n",
        "modules.a.metrics",
      ).message,
      /must be HOST:PORT .* not 9464/,
    );
  });

  it("reads where a provider's admin URL is and the variables its entry adds, never the URL itself", () => {
    const fleet = parseFleet(
      `nodes: { node-1: {} }
modules:
  postgres:
    manifest: ./pg/module.json
    node: node-1
    admin: { file: ./secrets/postgres.url }
    env: { MESH_EVERY: 1s, WORKERS: 4, VERBOSE: true }
  redis: { manifest: ./redis/module.json, node: node-1, admin: { env: MESH_REDIS_URL } }
`,
      FILE,
    );
    const postgres = fleet.modules.get("postgres");
    assert.deepEqual(postgres?.admin, { file: join("fleets/home", "secrets/postgres.url") });
    assert.deepEqual(postgres?.env, { MESH_EVERY: "1s", WORKERS: "4", VERBOSE: "true" });
    assert.deepEqual(fleet.modules.get("redis")?.admin, { env: MESH_REDIS_ENV });
  });

  it("refuses an admin entry that names neither a file nor a variable, and a bad variable name", () => {
    const base = "nodes: { node-1: {} }\nmodules:\n  pg:\n    manifest: ./pg.json\n    node: node-1\n";
    assert.match(
      problemOf(`${base}    admin: postgres://a:b@h/db\n`, "modules.pg.admin").message,
      /file|env/,
    );
    assert.ok(problemsOf(`${base}    admin: { env: "lower case" }\n`).length > 0);
    assert.ok(problemsOf(`${base}    env: { "not a name": x }\n`).length > 0);
  });

  it("reads each module's limits as bytes, processes and CPUs, max as no bound, and leaves the rest to the defaults", () => {
    const fleet = parseFleet(
      `nodes: { n: {} }
modules:
  a:
    manifest: ./a.json
    node: n
    limits: { memory: 512M, pids: 256, cpu: 1.5, home: 1G }
  b: { manifest: ./b.json, node: n, limits: { memory: 64MiB, cpu: max } }
  c: { manifest: ./c.json, node: n }
`,
      FILE,
    );
    assert.deepEqual(fleet.modules.get("a")?.limits, {
      memory: 512 * 1024 ** 2,
      pids: 256,
      cpu: 1.5,
      home: 1024 ** 3,
    });
    assert.deepEqual(fleet.modules.get("b")?.limits, { memory: 64 * 1024 ** 2, cpu: null });
    assert.equal(fleet.modules.get("c")?.limits, undefined);
    assert.deepEqual(effectiveLimits(fleet.modules.get("b")?.limits), {
      memory: 64 * 1024 ** 2,
      pids: DEFAULT_MODULE_LIMITS.pids,
      cpu: null,
      home: null,
    });
    assert.deepEqual(DEFAULT_MODULE_LIMITS, { memory: null, pids: 512, cpu: null, home: null });
  });

  it("refuses a limit that is not one, naming the line, the limit and how to write it", () => {
    for (const [limits, field, why] of [
      ["{ memory: lots }", "memory", /must be a size like 512M or 1G .* or max for no bound, not "lots"/],
      ["{ memory: 512 }", "memory", /at least 1M/],
      ["{ pids: 0 }", "pids", /must be a whole number of processes like 256/],
      ["{ pids: 2.5 }", "pids", /whole number/],
      ["{ cpu: -1 }", "cpu", /must be a number of CPUs like 1\.5/],
      ["{ home: 1X }", "home", /must be a size like 512M/],
    ] as const) {
      const p = problemOf(
        `nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    limits: ${limits}\n`,
        `modules.a.limits.${field}`,
      );
      assert.equal(p.line, 6);
      assert.match(p.message, why, p.message);
      assert.equal(p.fix, "fix the value");
    }
    const p = problemOf(
      "nodes: { n: {} }\nmodules:\n  a: { manifest: ./a.json, node: n, limits: { disk: 1G } }\n",
      "modules.a.limits.disk",
    );
    assert.match(p.fix, /memory, pids, cpu, home/);
  });

  it("refuses two modules of one node on one fixed metrics port, and lets port 0 repeat", () => {
    const p = problemOf(
      `nodes: { n: {} }
modules:
  a: { manifest: ./a.json, node: n, metrics: "127.0.0.1:9464" }
  b: { manifest: ./b.json, node: n, metrics: "0.0.0.0:0" }
  c: { manifest: ./c.json, node: n, metrics: "0.0.0.0:0" }
  d: { manifest: ./d.json, node: n, metrics: "0.0.0.0:9464" }
`,
      "modules.d.metrics",
    );
    assert.equal(p.line, 6);
    assert.match(p.message, /port 9464 on node n, where module a serves its metrics already/);
    assert.match(p.fix, /another port/);
    assert.equal(
      problemsOf(`nodes: { n: {} }
modules:
  a: { manifest: ./a.json, node: n, metrics: "127.0.0.1:9464" }
  d: { manifest: ./d.json, node: n, metrics: "0.0.0.0:9464" }
`).length,
      1,
    );
  });
});

describe("loadFleet and loadFleetManifests", () => {
  const dirs: string[] = [];
  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  async function tempFleet(files: Record<string, string>): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "mesh-fleet-"));
    dirs.push(dir);
    for (const [name, text] of Object.entries(files)) {
      await mkdir(join(dir, name, ".."), { recursive: true });
      await writeFile(join(dir, name), text);
    }
    return join(dir, "mesh.yaml");
  }

  it("reads the manifest of every module once, by the fleet's module names", async () => {
    const path = await tempFleet({
      "mesh.yaml":
        "nodes: { n: {} }\nmodules:\n  a: { manifest: ./m/module.json, node: n }\n  b: { manifest: m/module.json, node: n }\n",
      "m/module.json": '{ "name": "notes" }',
    });
    const fleet = await loadFleet(path);
    const manifests = await loadFleetManifests(fleet);
    assert.deepEqual([...manifests.keys()], ["a", "b"]);
    assert.equal(manifests.get("a"), manifests.get("b"));
  });

  it("reads a large fleet's manifests a few at a time, never one descriptor per module", async () => {
    const n = 1_000;
    const modules = Array.from(
      { length: n },
      (_, i) => `  m${i}: { manifest: ./m${i}/module.json, node: n }`,
    );
    const fleet = parseFleet(`nodes: { n: {} }\nmodules:\n${modules.join("\n")}\n`, FILE);
    let open = 0;
    let most = 0;
    const manifests = await loadFleetManifests(fleet, async (path) => {
      open++;
      most = Math.max(most, open);
      await new Promise((resolve) => setImmediate(resolve));
      open--;
      return JSON.stringify({ name: path.split("/").at(-2) });
    });
    assert.equal(manifests.size, n);
    assert.equal(manifests.get("m999")?.name, "m999");
    assert.ok(most > 1 && most <= 64, `${most} manifests were read at once`);
  });

  it("reports the problems of every bad manifest together, each with its own file", async () => {
    const path = await tempFleet({
      "mesh.yaml":
        "nodes: { n: {} }\nmodules:\n  a: { manifest: ./a.json, node: n }\n  b: { manifest: ./b.json, node: n }\n  c: { manifest: ./c.json, node: n }\n",
      "a.json": "{ not json",
      "b.json": '{ "name": "B" }',
    });
    const fleet = await loadFleet(path);
    await assert.rejects(loadFleetManifests(fleet), (err: unknown) => {
      assert.ok(err instanceof ManifestError);
      assert.deepEqual(
        err.problems.map((p) => [p.file.slice(-6), p.code]),
        [
          ["a.json", "not-json"],
          ["b.json", "invalid"],
          ["c.json", "unreadable"],
        ],
      );
      return true;
    });
  });

  it("reads the rotation schedule: a default at the top and a period per module and interface", () => {
    const fleet = parseFleet(
      `rotate: { every: 30d }
nodes: { n: {} }
modules:
  notes:
    manifest: ./n.json
    node: n
    rotate: { postgres-database: { every: 1d12h } }
`,
      FILE,
    );
    assert.equal(fleet.rotateEvery, 30 * 86_400_000);
    assert.deepEqual(fleet.modules.get("notes")?.rotate, { "postgres-database": 36 * 3_600_000 });
    assert.equal(parseFleet(GOOD, FILE).rotateEvery, undefined);
  });

  it("refuses a rotation period it cannot read, or shorter than the minimum, naming the line", () => {
    const saved = process.env["MESH_ROTATE_MIN"];
    delete process.env["MESH_ROTATE_MIN"];
    try {
      const bad = problemOf("rotate: { every: 30 }\nnodes: { n: {} }\nmodules: {}\n", "rotate.every");
      assert.equal(bad.line, 1);
      assert.match(bad.message, /must be a period like 30d/);
      const unit = problemOf("rotate: { every: 3w }\nnodes: { n: {} }\nmodules: {}\n", "rotate.every");
      assert.match(unit.message, /not "3w"/);
      const yaml =
        "nodes: { n: {} }\nmodules:\n  a:\n    manifest: ./a.json\n    node: n\n    rotate:\n      s3-bucket: { every: 5s }\n";
      const short = problemOf(yaml, "modules.a.rotate.s3-bucket.every");
      assert.equal(short.line, 7);
      assert.match(short.message, /shorter than 1h, the shortest rotation period/);
      const misspelt = problemOf("rotate: { evry: 30d }\nnodes: { n: {} }\nmodules: {}\n", "rotate.evry");
      assert.equal(misspelt.line, 1);
      // The test knob lowers the minimum, as a short run through a mesh needs.
      process.env["MESH_ROTATE_MIN"] = "1s";
      assert.equal(parseFleet(yaml, FILE).modules.get("a")?.rotate?.["s3-bucket"], 5000);
    } finally {
      if (saved === undefined) delete process.env["MESH_ROTATE_MIN"];
      else process.env["MESH_ROTATE_MIN"] = saved;
    }
  });

  it("names a fleet file that does not exist", async () => {
    const path = join(tmpdir(), "mesh-no-such-fleet", "mesh.yaml");
    await assert.rejects(
      loadFleet(path),
      (err: unknown) => err instanceof FleetError && /does not exist/.test(err.message),
    );
  });
});
