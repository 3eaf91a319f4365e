import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { provider } from "../src/index.ts";
import { TRUSTED_EXTENSIONS } from "../src/adapter.ts";

interface Manifest {
  name: string;
  provides: Record<string, { receives: string; spec: { extensions: { items: { enum: string[] } } } }>;
  tools: string[];
}

const manifest = JSON.parse(await readFile(new URL("../module.json", import.meta.url), "utf8")) as Manifest;

void describe("the Postgres provider's manifest", () => {
  void it("names the provider and the interface the code provides", () => {
    assert.equal(manifest.name, provider.name);
    assert.deepEqual(Object.keys(manifest.provides), [provider.interface]);
  });

  void it("offers exactly the extensions the adapter allows", () => {
    const offered = manifest.provides[provider.interface]?.spec.extensions.items.enum ?? [];
    assert.deepEqual([...offered].sort(), [...TRUSTED_EXTENSIONS].sort());
  });

  void it("lists the tools a person may ask of it", () => {
    assert.deepEqual(manifest.tools, [
      "status",
      "retire list",
      "retire approve",
      "cleanup list",
      "cleanup delete",
    ]);
  });
});
