// The `mesh` command line: its commands, and how every way of ending maps to an exit code.

import { Command, CommanderError } from "commander";
import { addCheckCommand } from "./check-command.ts";
import { CliExit, EXIT_OK, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { addExplainCommand } from "./explain-command.ts";
import type { CliIo } from "./io.ts";
import { processIo } from "./io.ts";
import { addLedgerCommand } from "./ledger-command.ts";
import { addPlanCommand } from "./plan-command.ts";
import { addProviderCommand } from "./provider-command.ts";
import { addToolCommand } from "./tool-command.ts";
import { addUpCommands } from "./up-command.ts";

/** The `mesh` program with every command, writing through `io`. Commander never exits the process. */
export function buildProgram(io: CliIo = processIo): Command {
  const program = new Command("mesh")
    .description("Mesh: self-hosted services wired together safely")
    .exitOverride()
    .configureOutput({ writeOut: io.out, writeErr: io.err })
    .addHelpText(
      "after",
      `
Examples:
  $ mesh up examples/fleet/mesh.yaml
  $ mesh status
  $ mesh provider postgres --receives /run/mesh/postgres-database.json --control /run/mesh/postgres.sock
  $ mesh tool postgres status
  $ mesh tool --control /run/mesh/postgres.sock status

Exit codes:
  0  done (a provider: stopped cleanly by Ctrl-C or SIGTERM)
  1  refused: the provider (or the mesh) refused the tool, or a part could not start
  2  usage error: a missing or bad flag or setting, or a deletion or approval not confirmed
  3  nothing answered: no provider at the control socket, or no mesh, agent or provider behind it`,
    );
  addProviderCommand(program, io);
  addToolCommand(program, io);
  addUpCommands(program, io);
  addExplainCommand(program, io);
  addCheckCommand(program, io);
  addLedgerCommand(program, io);
  addPlanCommand(program, io);
  return program;
}

/**
 * Runs `mesh` with `argv` (the arguments after the program name) and resolves with its exit code.
 * Never throws: every failure is said on `io.err`.
 */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  try {
    await buildProgram(io).parseAsync([...argv], { from: "user" });
    return EXIT_OK;
  } catch (err) {
    if (err instanceof CliExit) {
      if (err.message !== "") io.err(`error: ${err.message}\n`);
      return err.code;
    }
    if (err instanceof CommanderError) {
      // Commander has said what was wrong (or shown the help that was asked for).
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    io.err(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return EXIT_REFUSED;
  }
}
