// Every command's help, found by walking the program: a new command without examples, exit codes
// or a one-line summary fails here. In this process (a spawned mesh costs seconds to start).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { describe, it } from "node:test";
import type { Command } from "commander";
import { formatsLine, PROTOCOL_VERSION, STATE_FORMAT, TOOL_NAMES } from "@mesh/manifest";
import { allCommands, buildProgram, COMMAND_MODULES, commandPath, programFor } from "../src/cli.ts";
import { COMMAND_EXIT_CODES, EXIT_CODE_MEANINGS } from "../src/exit-codes.ts";
import type { CliIo } from "../src/io.ts";
import { meshInProcess as mesh, runMesh } from "./run-mesh.ts";

const quietIo: CliIo = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };
const commands = allCommands(await buildProgram(quietIo));

/** The words of `command` on the command line, `mesh` itself as "mesh". */
const shown = (command: Command): string => `mesh ${commandPath(command)}`.trim();

/** The commands that run something until stopped rather than read something: no --json for them. */
// `fleet` is a group: each of its commands takes --json.
const NOT_READING = new Set(["up", "controller", "agent", "provider", "completion", "fleet"]);

describe("mesh's help", () => {
  it("walks at least every command mesh has today", () => {
    const paths = commands.map(commandPath);
    for (const path of [
      "",
      "up",
      "agent",
      "rotate",
      "status",
      "plan",
      "tool",
      // Every tool of the table that the control socket answers, and the words grouping them.
      ...TOOL_NAMES.map((name) => `tool ${name}`),
      "tool retire",
      "tool cleanup",
      "ledger",
      "check",
      "explain",
      "provider",
    ])
      assert.ok(paths.includes(path), `mesh ${path}`);
  });

  for (const command of commands) {
    const path = commandPath(command);
    it(`${shown(command)} --help shows an example and its exit codes, from exit-codes.ts`, async () => {
      const run = await mesh([...path.split(" ").filter((w) => w !== ""), "--help"]);
      assert.equal(run.code, 0, run.stderr);
      assert.match(
        run.stdout,
        /^Examples:\n(?: {2}.*\n)*? {2}\$ mesh /m,
        "an Examples: block with a $ mesh line",
      );
      const meanings = COMMAND_EXIT_CODES[path];
      assert.ok(meanings !== undefined, `exit-codes.ts says what each exit code means for ${shown(command)}`);
      const block = run.stdout.slice(run.stdout.lastIndexOf("\nExit codes:\n"));
      assert.ok(block.length > 0, "an Exit codes: block");
      for (const [code, meaning] of Object.entries(meanings)) {
        assert.ok(
          block.includes(`  ${code}  ${String(meaning).split("\n")[0]}`),
          `${shown(command)}'s help says what ${code} means`,
        );
        assert.ok(code in EXIT_CODE_MEANINGS, `${code} is one of mesh's exit codes`);
      }
    });
  }

  it("exit-codes.ts names no command that does not exist", () => {
    const paths = new Set(commands.map(commandPath));
    for (const path of Object.keys(COMMAND_EXIT_CODES)) assert.ok(paths.has(path), `mesh ${path}`);
  });

  it("mesh --help lists every command with its one-line summary", async () => {
    const run = await mesh(["--help"]);
    assert.equal(run.code, 0, run.stderr);
    const lines = run.stdout.split("\n");
    const top = commands.filter((c) => c.parent !== null && c.parent.parent === null);
    assert.ok(top.length >= 10);
    for (const command of top) {
      const summary = command.summary();
      assert.ok(summary !== "" && !summary.includes("\n"), `${shown(command)} has a one-line summary`);
      assert.ok(
        lines.some((line) => line.startsWith(`  ${command.name()} `) && line.endsWith(`  ${summary}`)),
        `mesh --help shows ${shown(command)} on one line with "${summary}"`,
      );
    }
  });

  it("every command that reads something takes --json", () => {
    const takesJson = (c: Command | null): boolean =>
      c !== null && (c.options.some((o) => o.long === "--json") || takesJson(c.parent));
    for (const command of commands) {
      if (command.parent === null || NOT_READING.has(commandPath(command))) continue;
      assert.ok(takesJson(command), `${shown(command)} --json`);
    }
  });

  it("a mistyped command or flag is refused (exit 2) with the nearest one suggested", async () => {
    const command = await mesh(["stauts"]);
    assert.equal(command.code, 2);
    assert.match(command.stderr, /unknown command 'stauts'/);
    assert.match(command.stderr, /Did you mean status\?/);

    const flag = await mesh(["status", "--jsn"]);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /Did you mean --json\?/);

    const helpOfNothing = await mesh(["stauts", "--help"]);
    assert.equal(helpOfNothing.code, 2, "the help of a command that does not exist is an error");
    assert.match(helpOfNothing.stderr, /unknown command 'stauts'/);
    assert.equal(helpOfNothing.stdout, "", "not the top help");

    const none = await mesh([]);
    assert.equal(none.code, 2, "no command: the help, on standard error");
    assert.match(none.stderr, /Commands:/);
  });

  it("--version prints the CLI package's version on its first line, then the state format and protocol, and exits 0", async () => {
    const run = await mesh(["--version"]);
    assert.equal(run.code, 0);
    const { version } = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    assert.equal(run.stdout, `${version}\n${formatsLine()}\n`);
    assert.match(
      run.stdout.split("\n")[1] ?? "",
      new RegExp(`^state format ${STATE_FORMAT} .*protocol ${PROTOCOL_VERSION} `),
    );
    // bin/mesh.js answers --version (and -V) alone before loading the program: the same line.
    for (const flag of ["--version", "-V"]) {
      const spawned = await runMesh([flag]);
      assert.equal(spawned.code, 0, spawned.stderr);
      assert.equal(spawned.stdout, `${version}\n${formatsLine()}\n`, flag);
    }
  });

  it("names every top-level command once in COMMAND_MODULES, which mesh COMMAND loads alone", () => {
    const top = commands.filter((c) => c.parent !== null && c.parent.parent === null).map((c) => c.name());
    const named = COMMAND_MODULES.flatMap(([names]) => names);
    assert.deepEqual(named, top, "in the order mesh --help lists them");
  });

  it("gives each command, in the program of its module alone, the help the whole program gives it", async () => {
    /** Every help text under `command` (its own and its subcommands'), as `mesh … --help` prints it. */
    const helps = (command: Command, said: string[]): string[] =>
      allCommands(command).map((c) => {
        said.length = 0;
        c.outputHelp();
        return said.join("");
      });
    const wholeSaid: string[] = [];
    const whole = await buildProgram({ ...quietIo, out: (t) => void wholeSaid.push(t) });
    for (const name of COMMAND_MODULES.flatMap(([names]) => names)) {
      const aloneSaid: string[] = [];
      const alone = await programFor([name], { ...quietIo, out: (t) => void aloneSaid.push(t) });
      const inWhole = whole.commands.find((c) => c.name() === name);
      const inAlone = alone.commands.find((c) => c.name() === name);
      assert.ok(inWhole !== undefined && inAlone !== undefined, `mesh ${name}`);
      assert.deepEqual(helps(inAlone, aloneSaid), helps(inWhole, wholeSaid), `mesh ${name}'s help`);
    }
  });
});
