// `mesh completion`: the script it prints, sourced by a real bash, completes commands, subcommands
// and flags as the program has them.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { describe, it } from "node:test";
import { meshInProcess as mesh } from "./run-mesh.ts";

/** What bash completes for `line` (the words typed so far, the last one being completed). */
function complete(script: string, line: string, shell = "bash"): string[] {
  const words = line.split(" ");
  const program = `${script}
COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")})
COMP_CWORD=${words.length - 1}
_mesh
printf '%s\\n' "\${COMPREPLY[@]}"`;
  const run = spawnSync(shell, ["-c", program], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout.split("\n").filter((w) => w !== "");
}

describe("mesh completion", () => {
  it("bash: completes commands, a command's subcommands and each command's own flags", async () => {
    const run = await mesh(["completion", "bash"]);
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(complete(run.stdout, "mesh sta"), ["status"]);
    assert.ok(complete(run.stdout, "mesh ").includes("join-token"), "every command");
    assert.deepEqual(complete(run.stdout, "mesh tool ret"), ["retire"]);
    assert.deepEqual(complete(run.stdout, "mesh tool retire app"), ["approve"]);
    assert.ok(complete(run.stdout, "mesh up --gr").includes("--grace"));
    assert.ok(complete(run.stdout, "mesh up examples/fleet/mesh.yaml --iso").includes("--isolation"));
    assert.ok(!complete(run.stdout, "mesh status --").includes("--grace"), "only the command's own flags");
  });

  it("zsh: loads bashcompinit, then the same completion function", async () => {
    const run = await mesh(["completion", "zsh"]);
    assert.equal(run.code, 0, run.stderr);
    const [comment, load, ...rest] = run.stdout.split("\n");
    assert.match(comment ?? "", /^# zsh completion for mesh/);
    assert.equal(load, "autoload -U +X bashcompinit && bashcompinit");
    // What bashcompinit runs is bash's completion: the rest completes as the bash script does.
    assert.deepEqual(complete(rest.join("\n"), "mesh join"), ["join-token"]);
  });

  it("refuses a shell it has no script for (exit 2)", async () => {
    const run = await mesh(["completion", "fish"]);
    assert.equal(run.code, 2);
    assert.match(run.stderr, /no completion for "fish": say bash or zsh/);
  });
});
