import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { loadManifest, ManifestError, parseManifest, type Problem } from "@mesh/manifest";

const root = fileURLToPath(new URL("../../../", import.meta.url));
const FILE = "examples/app/module.json";

function problemsOf(text: string): readonly Problem[] {
  try {
    parseManifest(text, FILE);
  } catch (err) {
    assert.ok(err instanceof ManifestError, `expected a ManifestError, got ${String(err)}`);
    assert.equal(err.file, FILE);
    for (const p of err.problems) {
      assert.equal(p.file, FILE);
      assert.ok(p.fix.length > 0, `problem without a fix: ${JSON.stringify(p)}`);
      assert.ok(err.message.includes(p.message));
    }
    return err.problems;
  }
  assert.fail("the manifest was accepted");
}

function problemOf(text: string, field: string): Problem {
  const problems = problemsOf(text);
  const found = problems.find((p) => p.field === field);
  assert.ok(found, `no problem at ${field}; got ${JSON.stringify(problems, null, 1)}`);
  return found;
}

const json = (doc: unknown): string => JSON.stringify(doc, null, 2);

describe("the providers' manifests", () => {
  for (const name of ["postgres", "redis", "mariadb"]) {
    it(`parses providers/${name}/module.json`, async () => {
      const m = await loadManifest(join(root, "providers", name, "module.json"));
      assert.equal(m.name, name);
      assert.equal(m.provides.size, 1);
      assert.deepEqual(m.tools, [
        "status",
        "retire list",
        "retire approve",
        "cleanup list",
        "cleanup delete",
      ]);
      // The agent starts each provider from its own directory, with plain node on its built JavaScript.
      assert.deepEqual(m.run && { command: m.run.command, args: m.run.args }, {
        command: "node",
        args: ["dist/main.bundle.js"],
      });
    });
  }

  it("reads postgres's spec: an optional name with a pattern and a list of allowed extensions", async () => {
    const m = await loadManifest(join(root, "providers/postgres/module.json"));
    const spec = m.provides.get("postgres-database")?.spec;
    assert.equal(spec?.get("name")?.type, "string");
    assert.equal(spec?.get("name")?.required, false);
    assert.ok(spec?.get("name")?.pattern?.test("notes"));
    assert.equal(spec?.get("extensions")?.type, "string[]");
    assert.ok(spec?.get("extensions")?.enum?.includes("pgcrypto"));
  });
});

describe("parseManifest", () => {
  it("reads a consumer's needs, events, seats and tools", () => {
    const m = parseManifest(
      json({
        name: "notes",
        needs: { "postgres-database": { values: { name: "notes" } }, "redis-namespace": {} },
        emits: ["note.created", "note.deleted"],
        subscribes: ["**", "photos.uploaded", "photos.**", "archivist.note-archived"],
        seats: ["archivist"],
        tools: ["status"],
      }),
      FILE,
    );
    assert.equal(m.name, "notes");
    assert.deepEqual(m.needs.get("postgres-database")?.values, { name: "notes" });
    assert.deepEqual(m.needs.get("redis-namespace")?.values, {});
    assert.deepEqual(m.emits, ["note.created", "note.deleted"]);
    assert.equal(m.subscribes.length, 4);
    assert.deepEqual(m.seats, ["archivist"]);
  });

  it("says a manifest that is not JSON is not JSON, with the line of the mistake", () => {
    const p = problemOf('{\n  "name": "notes",\n  "needs": {},\n}\n', "(file)");
    assert.equal(p.code, "not-json");
    assert.equal(p.line, 4);
    assert.match(p.message, /is not JSON/);
  });

  it("says a truncated manifest is not JSON", () => {
    const p = problemOf('{\n  "name": "notes",\n  "needs": {\n', "(file)");
    assert.equal(p.code, "not-json");
    assert.ok(p.line !== undefined && p.line >= 3);
  });

  it("says an empty manifest is empty and shows what to write", () => {
    const p = problemOf("  \n", "(file)");
    assert.match(p.message, /empty/);
    assert.match(p.fix, /"name"/);
  });

  it("refuses a JSON document that is not an object", () => {
    for (const text of ["[]", "null", "42", '"notes"']) {
      assert.equal(problemsOf(text)[0]?.field, "(file)", text);
    }
  });

  it("refuses a key written twice instead of keeping the last one, naming both lines", () => {
    const p = problemOf('{\n  "name": "notes",\n  "needs": {},\n  "name": "other"\n}', "name");
    assert.equal(p.code, "duplicate-key");
    assert.equal(p.line, 4);
    assert.match(p.message, /lines 2, 4/);
  });

  it("names the field, the line and the fix for a value of the wrong type", () => {
    const p = problemOf('{\n  "name": "notes",\n  "emits": "note.created"\n}', "emits");
    assert.equal(p.line, 3);
    assert.match(p.message, /must be a list/);
    assert.equal(p.fix, "fix the value");
  });

  it("says a missing name is missing and to add it", () => {
    const p = problemOf(json({ needs: {} }), "name");
    assert.match(p.message, /is missing/);
    assert.equal(p.fix, "add it");
  });

  it("refuses an unknown field and lists the known ones, so a misspelling is not ignored", () => {
    const p = problemOf(json({ name: "notes", need: {} }), "need");
    assert.match(p.message, /not a known field/);
    assert.match(p.fix, /needs/);
  });

  it("reports every problem of a manifest at once, not only the first", () => {
    const problems = problemsOf(json({ name: "Notes", emits: ["A"], tools: ["x y Z"], extra: 1 }));
    assert.deepEqual(
      problems.map((p) => p.field),
      ["name", "emits[0]", "tools[0]", "extra"],
    );
  });

  it("refuses hostile module names: paths, quotes, uppercase, spaces, unicode, too long", () => {
    const hostile = [
      "",
      "../etc",
      "a/b",
      "notes.json",
      "Notes",
      "notes app",
      "robert'); drop table students;--",
      "n\u00f6tes",
      "1notes",
      "-notes",
      "notes_app",
      "a".repeat(42),
      "$notes",
      "notes\n",
    ];
    for (const name of hostile) {
      const p = problemOf(json({ name }), "name");
      assert.match(p.message, /must be a module name/, name);
    }
    assert.equal(parseManifest(json({ name: "a".repeat(41) }), FILE).name, "a".repeat(41));
  });

  it("takes names that are also Object.prototype members as plain data", () => {
    const m = parseManifest(json({ name: "constructor", needs: { constructor: {}, "to-string": {} } }), FILE);
    assert.equal(m.name, "constructor");
    assert.deepEqual([...m.needs.keys()], ["constructor", "to-string"]);
    assert.equal(m.provides.get("constructor"), undefined);
  });

  it("refuses interface names that are not lowercase words joined by -", () => {
    for (const iface of ["Postgres", "postgres_database", "postgres.database", "1db", "pg/db", ""]) {
      const p = problemOf(json({ name: "notes", needs: { [iface]: {} } }), `needs.${iface}`);
      assert.match(p.message, /interface name/, iface);
      assert.equal(p.fix, "rename it");
    }
  });

  it("refuses event names with empty parts, wildcards, $, spaces or uppercase, and ** in emits", () => {
    const bad = [
      "",
      "a..b",
      ".a",
      "a.",
      "a.*",
      "a.>",
      "$sys.x",
      "a b",
      "Note.created",
      "a.**",
      "**",
      "note\tcreated",
    ];
    const problems = problemsOf(json({ name: "notes", emits: bad }));
    assert.deepEqual(
      problems.map((p) => p.field),
      bad.map((_, i) => `emits[${i}]`),
    );
    for (const p of problems) assert.match(p.message, /local event name/);
  });

  it("accepts ** only as a whole subscription or as the last part after a module", () => {
    const good = ["**", "photos.**", "photos.uploaded", "archivist.note.archived"];
    assert.equal(parseManifest(json({ name: "notes", subscribes: good }), FILE).subscribes.length, 4);
    const bad = [
      "photos",
      "photos.*",
      "photos.**.x",
      "Photos.uploaded",
      "photos.",
      "*.uploaded",
      "photos.a..b",
      ">",
    ];
    const problems = problemsOf(json({ name: "notes", subscribes: bad }));
    assert.deepEqual(
      problems.map((p) => p.field),
      bad.map((_, i) => `subscribes[${i}]`),
    );
  });

  it("refuses an event listed twice", () => {
    const p = problemOf(json({ name: "notes", emits: ["note.created", "note.created"] }), "emits[1]");
    assert.match(p.message, /second time/);
  });

  it("reads a provider's spec, derived values and endpoint", () => {
    const m = parseManifest(
      json({
        name: "pg",
        provides: {
          "postgres-database": {
            receives: "/run/mesh/postgres-database.json",
            spec: {
              name: { type: "string", pattern: "^[a-z]+$", default: "{login}" },
              size: { type: "number", required: true },
              tags: { type: "string[]", enum: ["a", "b"] },
            },
            derives: { owner: "{login}" },
            endpoint: { scheme: "postgresql", port: 5432, path: "/{name}", query: { sslmode: "disable" } },
          },
        },
      }),
      FILE,
    );
    const p = m.provides.get("postgres-database");
    assert.equal(p?.spec.get("size")?.required, true);
    assert.equal(p?.spec.get("name")?.default, "{login}");
    assert.equal(p?.derives.get("owner"), "{login}");
    assert.equal(p?.endpoint?.path, "/{name}");
    assert.equal(p?.endpoint?.query.get("sslmode"), "disable");
  });

  it("refuses a spec that contradicts itself or cannot be used", () => {
    const problems = problemsOf(
      json({
        name: "pg",
        provides: {
          x: {
            receives: "/run/x.json",
            spec: {
              a: { type: "string", pattern: "(" },
              b: { type: "boolean", pattern: "^x$" },
              c: { type: "number", default: "five" },
              d: { type: "string", required: true, optional: true },
              e: { type: "string", default: "{nobody}" },
              f: { type: "integer" },
            },
            derives: { a: "{login}", g: "{h}" },
            endpoint: { scheme: "pg", path: "/{nothing}" },
          },
        },
      }),
    );
    const fields = problems.map((p) => p.field);
    assert.deepEqual(fields, ["provides.x.spec.f.type"], "shape problems are reported before meaning");
    const meaning = problemsOf(
      json({
        name: "pg",
        provides: {
          x: {
            receives: "/run/x.json",
            spec: {
              a: { type: "string", pattern: "(" },
              b: { type: "boolean", pattern: "^x$" },
              c: { type: "number", default: "five" },
              d: { type: "string", required: true, optional: true },
              e: { type: "string", default: "{nobody}" },
            },
            derives: { a: "{login}", g: "{h}" },
            endpoint: { scheme: "pg", path: "/{nothing}" },
          },
        },
      }),
    ).map((p) => p.field);
    for (const field of [
      "provides.x.spec.a.pattern",
      "provides.x.spec.b.pattern",
      "provides.x.spec.c.default",
      "provides.x.spec.d.optional",
      "provides.x.spec.e.default",
      "provides.x.derives.a",
      "provides.x.derives.g",
      "provides.x.endpoint.path",
    ]) {
      assert.ok(meaning.includes(field), `${field} not reported; got ${meaning.join(", ")}`);
    }
  });

  it("refuses a receives path that is not absolute, and two interfaces sharing one file", () => {
    problemOf(json({ name: "pg", provides: { x: { receives: "x.json" } } }), "provides.x.receives");
    const p = problemOf(
      json({ name: "pg", provides: { x: { receives: "/run/a.json" }, y: { receives: "/run/a.json" } } }),
      "provides.y.receives",
    );
    assert.match(p.message, /same file/);
  });

  it("keeps a need value named __proto__ as data, so a check can report it", () => {
    const m = parseManifest(
      '{"name": "notes", "needs": {"x": {"values": {"__proto__": {"polluted": true}}}}}',
      FILE,
    );
    const values = m.needs.get("x")?.values ?? {};
    assert.ok(Object.hasOwn(values, "__proto__"));
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });
});

describe("a manifest's run", () => {
  it("reads the command and its arguments, and leaves run undefined when absent", () => {
    const m = parseManifest(json({ name: "notes", run: { command: "node", args: ["dist/main.js"] } }), FILE);
    assert.deepEqual(m.run, {
      command: "node",
      args: ["dist/main.js"],
      env: new Map(),
      files: new Map(),
      onNewPassword: { kind: "restart" },
    });
    assert.equal(parseManifest(json({ name: "notes" }), FILE).run, undefined);
  });

  it("takes a run without args as a command with no arguments", () => {
    const m = parseManifest(json({ name: "notes", run: { command: "./bin/notes" } }), FILE);
    assert.deepEqual(m.run?.args, []);
    assert.equal(m.run?.command, "./bin/notes");
  });

  it("refuses a run that is not an object, naming the file, the line and the field", () => {
    const p = problemOf('{\n  "name": "notes",\n  "run": "node src/main.ts"\n}', "run");
    assert.equal(p.file, FILE);
    assert.equal(p.line, 3);
    assert.match(p.message, /must be an object like \{ "command": "node"/);
  });

  it("says a run without a command is missing one", () => {
    const p = problemOf(json({ name: "notes", run: { args: ["x"] } }), "run.command");
    assert.match(p.message, /is missing: it must be a program to start/);
    assert.equal(p.fix, "add it");
  });

  it("refuses an empty command, a command with a line break and an argument with a NUL byte", () => {
    assert.match(problemOf(json({ name: "n", run: { command: "" } }), "run.command").message, /program/);
    assert.match(
      problemOf(json({ name: "n", run: { command: "node\nrm -rf /" } }), "run.command").message,
      /program/,
    );
    assert.match(
      problemOf(json({ name: "n", run: { command: "node", args: ["a", "b\u0000c"] } }), "run.args[1]")
        .message,
      /NUL/,
    );
  });

  it("refuses args that are not a list of strings, and a misspelt field inside run", () => {
    assert.match(
      problemOf(json({ name: "n", run: { command: "node", args: "src/main.ts" } }), "run.args").message,
      /must be a list of arguments/,
    );
    assert.match(
      problemOf(json({ name: "n", run: { command: "node", args: [1] } }), "run.args[0]").message,
      /must be an argument/,
    );
    assert.match(
      problemOf(json({ name: "n", run: { command: "node", argv: [] } }), "run.argv").fix,
      /command, args/,
    );
  });
});

describe("loadManifest", () => {
  const dirs: string[] = [];
  after(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it("names the file that does not exist and says to check the path", async () => {
    const path = join(tmpdir(), "mesh-no-such-dir", "module.json");
    await assert.rejects(
      loadManifest(path),
      (err: unknown) =>
        err instanceof ManifestError &&
        err.file === path &&
        /does not exist/.test(err.message) &&
        /path/.test(err.fix),
    );
  });

  it("reads a file and names it in a problem", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-manifest-"));
    dirs.push(dir);
    const path = join(dir, "module.json");
    await writeFile(path, '{\n  "name": "notes",\n  "needs": { "x": { "values": [] } }\n}\n');
    await assert.rejects(
      loadManifest(path),
      (err: unknown) =>
        err instanceof ManifestError &&
        err.message.startsWith(`${path}:3: needs.x.values must be an object of values`),
    );
  });
});
