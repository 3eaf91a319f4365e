// The `mesh` command line: its commands, and how every way of ending maps to an exit code.

import { readFileSync } from "node:fs";
import { Command, CommanderError } from "commander";
import { addBusConfigCommand } from "./bus-config-command.ts";
import { addCheckCommand } from "./check-command.ts";
import { addCompletionCommand } from "./completion-command.ts";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, exitCodesHelp } from "./exit-codes.ts";
import { addExplainCommand } from "./explain-command.ts";
import { addJoinTokenCommand } from "./join-token-command.ts";
import type { CliIo } from "./io.ts";
import { processIo } from "./io.ts";
import { addLedgerCommand } from "./ledger-command.ts";
import { addLogsCommand } from "./logs-command.ts";
import { addPlanCommand } from "./plan-command.ts";
import { addProviderCommand } from "./provider-command.ts";
import { addToolCommand } from "./tool-command.ts";
import { addUpCommands } from "./up-command.ts";

/** The words after `mesh` that name `command` (`""` for `mesh` itself), as exit-codes.ts keys them. */
export function commandPath(command: Command): string {
  const words: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) words.unshift(c.name());
  return words.join(" ");
}

/** `command` and every command under it, depth first. */
export function allCommands(command: Command): Command[] {
  return [command, ...command.commands.flatMap((c) => allCommands(c))];
}

/** This mesh's version: the CLI package's own (package.json sits one level above src/ and dist/ alike). */
export const MESH_VERSION = (
  JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string }
).version;

/** The `mesh` program with every command, writing through `io`. Commander never exits the process. */
export function buildProgram(io: CliIo = processIo): Command {
  const red = paintFor(io, "err").red;
  const program = new Command("mesh")
    .description("Mesh: self-hosted services wired together safely")
    .version(MESH_VERSION, "-V, --version", "print the mesh's version")
    .exitOverride()
    .showSuggestionAfterError(true)
    .configureOutput({
      writeOut: io.out,
      writeErr: io.err,
      outputError: (text, write) => write(text.replace(/^error:/, red("error:"))),
    })
    .addHelpText(
      "after",
      `
Every command that reads something prints it as JSON with --json (errors stay text on standard
error); colours only on a terminal (NO_COLOR=1 turns them off, FORCE_COLOR=1 on).
\`mesh help COMMAND\` or \`mesh COMMAND --help\` shows a command's flags, examples and exit codes.

Examples:
  $ mesh up examples/fleet/mesh.yaml
  $ mesh status
  $ mesh plan mesh.next.yaml
  $ mesh tool postgres status --json
  $ mesh logs postgres -f
  $ mesh provider postgres --receives /run/mesh/postgres-database.json --control /run/mesh/postgres.sock
  $ mesh tool --control /run/mesh/postgres.sock status`,
    );
  addUpCommands(program, io);
  addPlanCommand(program, io);
  addToolCommand(program, io);
  addLedgerCommand(program, io);
  addLogsCommand(program, io);
  addCheckCommand(program, io);
  addExplainCommand(program, io);
  addProviderCommand(program, io);
  addBusConfigCommand(program, io);
  addJoinTokenCommand(program, io);
  addCompletionCommand(program, io);
  // Every command's exit codes come from exit-codes.ts, so they are written in one place.
  for (const command of allCommands(program))
    command.addHelpText("after", exitCodesHelp(commandPath(command)));
  return program;
}

/**
 * Runs `mesh` with `argv` (the arguments after the program name) and resolves with its exit code.
 * Never throws: every failure is said on `io.err`.
 */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const error = (message: string): void => io.err(`${paintFor(io, "err").red("error:")} ${message}\n`);
  try {
    const program = buildProgram(io);
    // `mesh unknown --help` is a mistyped command, not a request for the top help: drop the help
    // flag so it is refused (exit 2) with the nearest command suggested.
    const first = argv[0];
    const known = (word: string) =>
      program.commands.some((c) => c.name() === word || c.aliases().includes(word));
    const args =
      first !== undefined && !first.startsWith("-") && !known(first)
        ? argv.filter((a) => a !== "--help" && a !== "-h")
        : argv;
    await program.parseAsync([...args], { from: "user" });
    return EXIT_OK;
  } catch (err) {
    if (err instanceof CliExit) {
      if (err.message !== "") error(err.message);
      return err.code;
    }
    if (err instanceof CommanderError) {
      // Commander has said what was wrong (or shown the help that was asked for).
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    error(err instanceof Error ? err.message : String(err));
    return EXIT_REFUSED;
  }
}
