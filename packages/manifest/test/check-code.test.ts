import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkModules, formatFinding, type Finding } from "@mesh/manifest";

const fixtures = join(import.meta.dirname, "fixtures", "check");
const repo = join(import.meta.dirname, "..", "..", "..");

function kinds(findings: readonly Finding[]): string[] {
  return findings.map((f) => f.kind).sort();
}

describe("checkModules", () => {
  const temps: string[] = [];
  after(async () => {
    for (const dir of temps) await rm(dir, { recursive: true, force: true });
  });

  async function module(manifest: object, code: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), "mesh-check-"));
    temps.push(dir);
    await writeFile(join(dir, "module.json"), JSON.stringify(manifest, null, 2));
    await mkdir(join(dir, "src"));
    await writeFile(join(dir, "src", "main.ts"), code);
    return dir;
  }

  it("finds each of the five kinds of mistake in the fixture set exactly once", async () => {
    // A dependency's code under node_modules is never scanned. Made here, not committed: the
    // repository keeps no node_modules.
    const dependency = join(fixtures, "mistakes", "shop", "node_modules");
    await mkdir(join(dependency, "dep"), { recursive: true });
    await writeFile(join(dependency, "dep", "index.js"), 'emit("dependency.event");\n');
    temps.push(dependency);
    const findings = await checkModules([
      join(fixtures, "mistakes", "shop"),
      join(fixtures, "mistakes", "billing"),
    ]);
    assert.deepEqual(kinds(findings), [
      "foreign-event",
      "routing-key-name",
      "subject-mismatch",
      "undeclared-emit",
      "unheard-subscription",
    ]);
    assert.ok(findings.every((f) => f.severity === "error"));
    const by = (kind: string): Finding => findings.find((f) => f.kind === kind)!;
    const code = join(fixtures, "mistakes", "shop", "src", "main.ts");
    assert.equal(by("undeclared-emit").file, code);
    assert.equal(by("undeclared-emit").line, 12);
    assert.match(by("undeclared-emit").fix, /add "order\.shipped" to emits/);
    assert.equal(by("subject-mismatch").line, 13);
    assert.match(by("subject-mismatch").fix, /call emit\("order\.placed"\)/);
    assert.equal(by("unheard-subscription").file, join(fixtures, "mistakes", "billing", "module.json"));
    assert.equal(by("unheard-subscription").line, 4);
    assert.match(by("routing-key-name").fix, /declare it locally as "paid"/);
    assert.match(by("foreign-event").message, /named after the module "billing"/);
  });

  it("finds nothing in a clean set, with seat events, wildcards and template literals", async () => {
    const findings = await checkModules([
      join(fixtures, "clean", "shop"),
      join(fixtures, "clean", "billing"),
    ]);
    assert.deepEqual(findings.map(formatFinding), []);
  });

  it("finds nothing in the example fleet's modules and providers", async () => {
    const findings = await checkModules(
      ["examples/fleet/notes", "examples/fleet/counter", "providers/postgres", "providers/redis"].map((d) =>
        join(repo, d),
      ),
    );
    assert.deepEqual(findings.map(formatFinding), []);
  });

  it("reports code that subscribes to what the manifest does not list, naming the closest declared subscription", async () => {
    const dir = await module(
      { name: "audit", emits: [], subscribes: ["shop.order-placed"] },
      'declare function on(p: string, h: () => void): void;\non("shop.order_placed", () => {});\n',
    );
    const findings = await checkModules([dir]);
    const mismatch = findings.find((f) => f.kind === "subject-mismatch");
    assert.ok(mismatch, findings.map(formatFinding).join("\n"));
    assert.equal(mismatch.file, join(dir, "src", "main.ts"));
    assert.equal(mismatch.line, 2);
    assert.match(mismatch.fix, /on\("shop\.order-placed"\)/);
  });

  it("reports old routing-key names in subscriptions and code, with the local name to use", async () => {
    const dir = await module(
      { name: "audit", emits: ["paid"], subscribes: ["module.shop.paid"] },
      'declare function emit(n: string): void;\nemit("module.audit.paid");\n',
    );
    const findings = await checkModules([dir]);
    assert.deepEqual(kinds(findings), ["routing-key-name", "routing-key-name"]);
    assert.ok(findings.some((f) => f.fix.includes('subscribe to "shop.paid"')));
    assert.ok(findings.some((f) => f.fix.includes('call emit("paid")')));
  });

  it("warns, without an error, about a subscription to a module outside the checked set", async () => {
    const dir = await module({ name: "audit", subscribes: ["elsewhere.thing.done", "**"] }, "export {};\n");
    const findings = await checkModules([dir]);
    assert.deepEqual(
      findings.map((f) => [f.kind, f.severity]),
      [["unheard-subscription", "warning"]],
    );
  });

  it("reports a manifest that cannot be read as an error finding instead of throwing", async () => {
    const dir = await mkdtemp(join(tmpdir(), "mesh-check-"));
    temps.push(dir);
    const findings = await checkModules([dir]);
    assert.equal(findings.length, 1);
    assert.equal(findings[0]?.kind, "manifest");
    assert.equal(findings[0]?.severity, "error");
  });
});
