// The tool table: what the control socket, the CLI and the dashboard read about each tool.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { READ_ONLY_TOOL_NAMES, TOOL_NAMES } from "../src/index.ts";
import { isChangingTool, isToolName, TOOL_GROUPS, TOOL_TABLE, toolArity, toolUsage } from "../src/tools.ts";
import { TOOL_PATTERN } from "../src/names.ts";

describe("the tool table", () => {
  it("says how each tool is called and how many arguments it takes", () => {
    assert.deepEqual(TOOL_NAMES.map(toolUsage), [
      "status",
      "retire list",
      "retire approve [ID]",
      "cleanup list",
      "cleanup delete LOGIN",
    ]);
    assert.deepEqual(toolArity("retire approve"), { least: 0, most: 1 });
    assert.deepEqual(toolArity("cleanup delete"), { least: 1, most: 1 });
    assert.deepEqual(toolArity("status"), { least: 0, most: 0 });
  });

  it("marks only the tools that change nothing as read-only, and has every changing one confirmed", () => {
    assert.deepEqual([...READ_ONLY_TOOL_NAMES], ["status", "retire list", "cleanup list"]);
    for (const def of TOOL_TABLE) {
      assert.equal(isChangingTool(def.name), "confirm" in def, `${def.name}: confirmed iff it changes`);
    }
  });

  it("names tools a manifest may list, and groups every two-word tool under a described word", () => {
    for (const name of TOOL_NAMES) {
      assert.match(name, TOOL_PATTERN);
      const [first, second] = name.split(" ");
      if (second !== undefined) assert.ok(first !== undefined && first in TOOL_GROUPS, name);
    }
    assert.ok(isToolName("cleanup delete"));
    assert.ok(!isToolName("cleanup"));
    assert.ok(!isToolName(["status"]));
  });
});
