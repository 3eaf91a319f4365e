// `mesh tool`: asks a running provider's tools over its control socket and shows the answer.

import { createInterface } from "node:readline/promises";
import type { Command } from "commander";
import type { ControlResults, ControlTool } from "@mesh/sdk";
import {
  ControlUnreachableError,
  InvalidDurationError,
  InvalidLoginError,
  ToolError,
  callControl,
  isValidLogin,
  parseDuration,
} from "@mesh/sdk";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatBytes, formatTable, formatTime } from "./format.ts";
import type { CliIo } from "./io.ts";
import { osUserName } from "./who.ts";

const EXIT_CODES_HELP = `
Exit codes:
  0  done
  1  the provider refused (its message and code are printed on standard error)
  2  usage error, or a deletion that was not confirmed
  3  no provider answered at the control socket`;

interface ToolFlags {
  readonly control?: string;
  readonly json?: boolean;
  readonly timeout?: string;
  readonly yes?: boolean;
}

/** Adds `mesh tool` and its subcommands to `program`. */
export function addToolCommand(program: Command, io: CliIo): void {
  const tool = program
    .command("tool")
    .description("ask a running provider's tools over its control socket")
    .option("--control <socket>", "the provider's control socket (default: $MESH_CONTROL)")
    .option("--json", "print the provider's answer as JSON, for scripts")
    .option("--timeout <duration>", "how long to wait for the answer", "2m")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh tool --control /run/mesh/postgres.sock status
  $ mesh tool --control /run/mesh/postgres.sock retire list
  $ MESH_CONTROL=/run/mesh/postgres.sock mesh tool cleanup delete app_umami
${EXIT_CODES_HELP}`,
    );

  const ask = async <T extends ControlTool>(
    cmd: Command,
    name: T,
    args: string[] = [],
  ): Promise<ControlResults[T]> => {
    const flags = cmd.optsWithGlobals<ToolFlags>();
    const path = flags.control ?? io.env["MESH_CONTROL"];
    if (path === undefined || path === "") {
      throw new CliExit(
        EXIT_USAGE,
        "which provider? pass --control SOCKET or set MESH_CONTROL (the path `mesh provider` printed at start)",
      );
    }
    let timeoutMs: number;
    try {
      timeoutMs = parseDuration(flags.timeout ?? "2m");
    } catch (err) {
      if (err instanceof InvalidDurationError) throw new CliExit(EXIT_USAGE, `--timeout: ${err.message}`);
      throw err;
    }
    try {
      return await callControl(path, { tool: name, args, who: osUserName() }, { timeoutMs });
    } catch (err) {
      if (err instanceof ToolError) {
        throw new CliExit(EXIT_REFUSED, `the provider refused ${name} (${err.code}): ${err.message}`);
      }
      if (err instanceof ControlUnreachableError) throw new CliExit(EXIT_UNREACHABLE, err.message);
      throw err;
    }
  };
  const json = (cmd: Command): boolean => cmd.optsWithGlobals<ToolFlags>().json === true;
  const printJson = (value: unknown): void => io.out(`${JSON.stringify(value, null, 2)}\n`);

  tool
    .command("status")
    .description("every consumer: its state, failure class, since when and why")
    .addHelpText(
      "after",
      `\nExample:\n  $ mesh tool --control /run/mesh/postgres.sock status\n${EXIT_CODES_HELP}`,
    )
    .action(async (_opts: unknown, cmd: Command) => {
      const report = await ask(cmd, "status");
      if (json(cmd)) return printJson(report);
      io.out(
        `${report.interface} (instance ${report.instance}), contributions ${report.receives}, ` +
          `last pass ${report.lastPassAt === null ? "not yet" : formatTime(report.lastPassAt)}\n`,
      );
      if (report.contributionsProblem !== null) io.out(`contributions: ${report.contributionsProblem}\n`);
      if (report.consumers.length === 0) return io.out("no consumers\n");
      const rows = report.consumers.map((c) => [
        c.login,
        c.state,
        c.class ?? "-",
        formatTime(c.since),
        c.why,
      ]);
      io.out(`${formatTable(["LOGIN", "STATE", "CLASS", "SINCE", "WHY"], rows)}\n`);
    });

  const retire = tool.command("retire").description("the set of unasked consumers that waits for a person");
  retire
    .command("list")
    .description("show the set waiting for approval, its id, and the bound it is past")
    .addHelpText(
      "after",
      `\nExample:\n  $ mesh tool --control /run/mesh/postgres.sock retire list\n${EXIT_CODES_HELP}`,
    )
    .action(async (_opts: unknown, cmd: Command) => {
      const list = await ask(cmd, "retire list");
      if (json(cmd)) return printJson(list);
      if (list.id === null) {
        return io.out(`nothing waits for approval${list.reason === "" ? "" : ` (${list.reason})`}\n`);
      }
      io.out(
        `waiting for approval: set ${list.id}, ${list.logins.length} of the ${list.held} held\n` +
          `why it waits: ${list.reason}\n` +
          list.logins.map((login) => `  ${login}\n`).join("") +
          `approve exactly this set with: mesh tool retire approve ${list.id}\n`,
      );
    });
  retire
    .command("approve")
    .description("retire the waiting set (the one named by ID; refused if it has changed)")
    .argument("[id]", "the id `retire list` shows")
    .addHelpText(
      "after",
      `\nExample:\n  $ mesh tool --control /run/mesh/postgres.sock retire approve 3f9c2a\n${EXIT_CODES_HELP}`,
    )
    .action(async (id: string | undefined, _opts: unknown, cmd: Command) => {
      const approved = await ask(cmd, "retire approve", id === undefined ? [] : [id]);
      if (json(cmd)) return printJson(approved);
      const retired = approved.retired.length === 0 ? "nothing" : approved.retired.join(", ");
      io.out(`approved set ${approved.id}: retired ${retired}\n`);
    });

  const cleanup = tool.command("cleanup").description("retired consumers, and deleting one for good");
  cleanup
    .command("list")
    .description("retired consumers that `cleanup delete` could remove")
    .addHelpText(
      "after",
      `\nExample:\n  $ mesh tool --control /run/mesh/postgres.sock cleanup list\n${EXIT_CODES_HELP}`,
    )
    .action(async (_opts: unknown, cmd: Command) => {
      const entries = await ask(cmd, "cleanup list");
      if (json(cmd)) return printJson(entries);
      if (entries.length === 0) return io.out("nothing retired: nothing to clean up\n");
      const rows = entries.map((e) => [e.login, formatTime(e.retiredAt), e.why]);
      io.out(`${formatTable(["LOGIN", "RETIRED-AT", "WHY"], rows)}\n`);
    });
  cleanup
    .command("delete")
    .description("delete one retired, unasked consumer, login and data, for good")
    .argument("<login>", "the retired consumer's login")
    .option("--yes", "do not ask to type the login (for scripts)")
    .addHelpText(
      "after",
      `
Asks you to type the login again before it deletes anything; with no terminal, pass --yes.

Example:
  $ mesh tool --control /run/mesh/postgres.sock cleanup delete app_umami
${EXIT_CODES_HELP}`,
    )
    .action(async (login: string, _opts: unknown, cmd: Command) => {
      if (!isValidLogin(login)) throw new CliExit(EXIT_USAGE, new InvalidLoginError(login).message);
      if (cmd.optsWithGlobals<ToolFlags>().yes !== true) {
        if (io.stdin.isTTY !== true) {
          throw new CliExit(
            EXIT_USAGE,
            `cleanup delete removes ${login} and its data for good, and there is no terminal to confirm on: ` +
              `pass --yes to delete without asking`,
          );
        }
        const entry = (await ask(cmd, "cleanup list")).find((e) => e.login === login);
        if (entry !== undefined) {
          io.err(`${login}: retired ${formatTime(entry.retiredAt)}, ${entry.why}\n`);
        }
        await confirm(io, login);
      }
      const deleted = await ask(cmd, "cleanup delete", [login]);
      if (json(cmd)) return printJson(deleted);
      io.out(
        `deleted ${deleted.login}: freed ${formatBytes(deleted.freedBytes)} (${deleted.freedBytes} bytes)\n`,
      );
    });
}

async function confirm(io: CliIo, login: string): Promise<void> {
  const rl = createInterface({ input: io.stdin, output: process.stderr, terminal: true });
  // Ctrl-C at the prompt must end the command, not leave the question waiting.
  const interrupted = new AbortController();
  rl.on("SIGINT", () => interrupted.abort());
  let typed: string;
  try {
    typed = await rl.question(
      `This deletes ${login} and all its data for good. Type the login to confirm: `,
      {
        signal: interrupted.signal,
      },
    );
  } catch (err) {
    if (interrupted.signal.aborted) throw new CliExit(EXIT_USAGE, `\nnot deleted: interrupted`);
    throw err;
  } finally {
    rl.close();
  }
  if (typed.trim() !== login) {
    throw new CliExit(EXIT_USAGE, `not deleted: what was typed is not ${login}`);
  }
}
