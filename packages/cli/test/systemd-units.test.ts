// The systemd units shipped in deploy/systemd: each runs a command and flags mesh really has, lets
// the mesh stop its own children (KillMode=mixed), and waits long enough for a stop to finish.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parseDuration } from "@mesh/sdk";
import { buildProgram } from "../src/cli.ts";
import type { CliIo } from "../src/io.ts";
import { DEFAULT_GRACE } from "../src/up-command.ts";

const UNITS = fileURLToPath(new URL("../../../deploy/systemd/", import.meta.url));
const quietIo: CliIo = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };

/** `Key=value` lines of a unit's [Service] section. */
function service(unit: string): Map<string, string> {
  const text = readFileSync(`${UNITS}${unit}`, "utf8");
  const section = text.split(/^\[Service\]$/m)[1]?.split(/^\[/m)[0] ?? "";
  const keys = new Map<string, string>();
  for (const line of section.split("\n")) {
    const m = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (m?.[1] !== undefined && m[2] !== undefined) keys.set(m[1], m[2]);
  }
  return keys;
}

describe("the systemd units", () => {
  for (const [unit, command] of [
    ["mesh-up.service", "up"],
    ["mesh-agent.service", "agent"],
  ] as const) {
    it(`${unit} runs mesh ${command} with flags it has, KillMode=mixed and a stop timeout beyond --grace plus 5 s`, async () => {
      const keys = service(unit);
      assert.equal(keys.get("KillMode"), "mixed", "systemd signals mesh alone; mesh stops its children");
      assert.equal(keys.get("Delegate"), "yes", "the mesh makes each module a cgroup of its own");
      const exec = (keys.get("ExecStart") ?? "").split(/\s+/);
      const at = exec.indexOf(command);
      assert.ok(at > 0 && exec[at - 1]?.endsWith("bin/mesh.js"), `ExecStart runs mesh ${command}`);
      const program = await buildProgram(quietIo);
      const sub = program.commands.find((c) => c.name() === command);
      assert.ok(sub, `mesh ${command} exists`);
      const known = new Set(sub.options.map((o) => o.long));
      for (const word of exec.slice(at + 1)) {
        if (word.startsWith("--")) assert.ok(known.has(word), `mesh ${command} has ${word}`);
      }
      const grace = exec.includes("--grace") ? exec[exec.indexOf("--grace") + 1] : DEFAULT_GRACE;
      const timeout = parseDuration(keys.get("TimeoutStopSec") ?? "0s");
      assert.ok(
        timeout >= parseDuration(grace ?? DEFAULT_GRACE) + 5_000,
        `TimeoutStopSec ${keys.get("TimeoutStopSec")} covers --grace ${grace} and 5 s more`,
      );
    });
  }

  it("pass systemd-analyze verify where systemd is installed", (t) => {
    const which = spawnSync("sh", ["-c", "command -v systemd-analyze"]);
    if (which.status !== 0) return t.skip("systemd-analyze is not installed here");
    const run = spawnSync(
      "systemd-analyze",
      ["verify", `${UNITS}mesh-up.service`, `${UNITS}mesh-agent.service`],
      {
        encoding: "utf8",
      },
    );
    assert.equal(run.status, 0, run.stderr);
  });
});
