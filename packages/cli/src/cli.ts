// The `mesh` command line: its commands, and how every way of ending maps to an exit code.

import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_OK, EXIT_REFUSED, EXIT_USAGE, exitCodesHelp } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";
import { processIo } from "./io.ts";
import { plainStatusFlags } from "./status-flags.ts";

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

/** Adds one module's commands to the program, writing through `io`. */
type AddCommands = (program: Command, io: CliIo) => void;

/**
 * Each module of commands, with the top-level commands it adds, in the order `mesh --help` lists
 * them. A module is loaded only when the program needs it: `mesh status` loads up-command.ts alone.
 */
export const COMMAND_MODULES: readonly (readonly [readonly string[], () => Promise<AddCommands>])[] = [
  [
    ["up", "controller", "agent", "rotate", "status"],
    async () => (await import("./up-command.ts")).addUpCommands,
  ],
  [["plan"], async () => (await import("./plan-command.ts")).addPlanCommand],
  [["apply", "fleet"], async () => (await import("./apply-command.ts")).addApplyCommands],
  [["tool"], async () => (await import("./tool-command.ts")).addToolCommand],
  [["ledger"], async () => (await import("./ledger-command.ts")).addLedgerCommand],
  [["dashboard"], async () => (await import("./dashboard-command.ts")).addDashboardCommand],
  [["logs"], async () => (await import("./logs-command.ts")).addLogsCommand],
  [["check"], async () => (await import("./check-command.ts")).addCheckCommand],
  [["explain"], async () => (await import("./explain-command.ts")).addExplainCommand],
  [["provider"], async () => (await import("./provider-command.ts")).addProviderCommand],
  [["bus-config"], async () => (await import("./bus-config-command.ts")).addBusConfigCommand],
  [["join-token"], async () => (await import("./join-token-command.ts")).addJoinTokenCommand],
  [["backup", "restore"], async () => (await import("./backup-command.ts")).addBackupCommands],
  // Made from the whole program, so never given a program of one module alone (see programFor).
  [["completion"], async () => (await import("./completion-command.ts")).addCompletionCommand],
];

/**
 * `mesh` itself, with no command yet: its description, version, help and how it says errors.
 * Commander is loaded here, not at the top: a plain `mesh status` runs without it (status-flags.ts).
 */
async function programRoot(io: CliIo): Promise<Command> {
  const [{ Command }, { formatsLine }] = await Promise.all([
    import("commander"),
    import("@mesh/manifest/versions"),
  ]);
  const red = paintFor(io, "err").red;
  return new Command("mesh")
    .description("Mesh: self-hosted services wired together safely")
    .version(
      `${MESH_VERSION}\n${formatsLine()}`,
      "-V, --version",
      "print the mesh's version, then the state format and protocol it speaks",
    )
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
}

/** `program` with the commands `adders` add, and every command's exit codes in its help. */
function withCommands(program: Command, adders: readonly AddCommands[], io: CliIo): Command {
  for (const add of adders) add(program, io);
  // Every command's exit codes come from exit-codes.ts, so they are written in one place.
  for (const command of allCommands(program))
    command.addHelpText("after", exitCodesHelp(commandPath(command)));
  return program;
}

/** The `mesh` program with every command, writing through `io`. Commander never exits the process. */
export async function buildProgram(io: CliIo = processIo): Promise<Command> {
  const adders = await Promise.all(COMMAND_MODULES.map(([, load]) => load()));
  return withCommands(await programRoot(io), adders, io);
}

/**
 * The program that parses `argv`: for a command named first (`mesh status …`), `mesh` with only the
 * commands of its module, each as the whole program has it; for anything else (`--help`, `help`, a
 * mistyped command, `completion`), the whole program.
 */
export async function programFor(argv: readonly string[], io: CliIo = processIo): Promise<Command> {
  const first = argv[0];
  const module = COMMAND_MODULES.find(([names]) => first !== undefined && names.includes(first));
  if (module === undefined || first === "completion") return buildProgram(io);
  return withCommands(await programRoot(io), [await module[1]()], io);
}

/**
 * Runs `mesh` with `argv` (the arguments after the program name) and resolves with its exit code.
 * Never throws: every failure is said on `io.err`.
 */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  const error = (message: string): void => io.err(`${paintFor(io, "err").red("error:")} ${message}\n`);
  try {
    // A plain `mesh status …` is asked at once, as its program would (the same action).
    const status = plainStatusFlags(argv);
    if (status !== undefined) {
      const { askStatus } = await import("./ask-status.ts");
      await askStatus(status, io);
      return EXIT_OK;
    }
    const program = await programFor(argv, io);
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
    // Loaded already whenever the program ran (a plain `mesh status` that failed loads it only here).
    const { CommanderError } = await import("commander");
    if (err instanceof CommanderError) {
      // Commander has said what was wrong (or shown the help that was asked for).
      return err.exitCode === 0 ? EXIT_OK : EXIT_USAGE;
    }
    error(err instanceof Error ? err.message : String(err));
    return EXIT_REFUSED;
  }
}
