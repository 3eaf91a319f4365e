// `mesh tool`: asks a module's tools and shows the answer. Two ways to reach them, one output:
//   mesh tool <module> <tool> [args]          through the mesh: the controller relays the call to the
//                                              module's node, whose agent asks its control socket and
//                                              writes the call into the module's ledger
//   mesh tool --control <socket> <tool> [args] one provider's control socket on this machine

import { createInterface } from "node:readline/promises";
import type { Command } from "commander";
import { RELAY_UNANSWERED_CODES, RUNNER_UNANSWERED_CODES, TOOL_REQUEST_SUBJECT } from "@mesh/bus/subjects";
import { isModuleName, MODULE_NAME_RULE } from "@mesh/manifest/names";
import {
  isChangingTool,
  TOOL_GROUPS,
  TOOL_TABLE,
  toolDefinition,
  toolUsage,
  type ChangingToolName,
  type ToolDefinition,
} from "@mesh/manifest/tools";
import {
  BadControlRequestError,
  CONTROL_TOOLS,
  ControlUnreachableError,
  callControl,
  checkControlRequest,
  InvalidDurationError,
  InvalidLoginError,
  isValidLogin,
  parseDuration,
  ToolError,
  type ControlResults,
  type ControlTool,
} from "@mesh/sdk/client";
import { askController, busOverride, stateDirOf, withAskFlags } from "./controller-request.ts";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatBytes, formatJson, formatTable, formatTime, maskDeep, maskUrls } from "./format.ts";
import type { CliIo } from "./io.ts";
import { withProgress } from "./progress.ts";
import { osUserName } from "./who.ts";

/** The tools that change something, which ask for confirmation: "retire approve and cleanup delete". */
const CONFIRMED_TOOLS = TOOL_TABLE.filter((t) => !t.readOnly)
  .map((t) => t.name)
  .join(" and ");

interface ToolFlags {
  readonly control?: string;
  readonly state?: string;
  readonly json?: boolean;
  readonly timeout?: string;
  readonly yes?: boolean;
  readonly bus?: string[];
  readonly busCa?: string;
}

/**
 * The largest answer `mesh tool --control` reads: a person asking one provider directly may want
 * the status of 100,000 consumers (some 15 MB), more than the mesh's own askers take.
 */
const MAX_DIRECT_ANSWER_BYTES = 64 * 1024 * 1024;

/** Asks one tool and returns its answer; says why on failure with the right exit code. */
type Asker = <T extends ControlTool>(tool: T, args: readonly string[]) => Promise<ControlResults[T]>;

/** What `askThroughMesh` sends on `mesh.tool` and the controller answers. */
interface MeshToolReply {
  readonly ok: boolean;
  readonly answer?: unknown;
  readonly error?: string;
  readonly code?: string;
  readonly ledger?: string;
}

/** Adds `mesh tool` and its subcommands to `program`. */
export function addToolCommand(program: Command, io: CliIo): void {
  const tool = withAskFlags(program.command("tool"))
    .summary("ask a module's tools: status, retire, cleanup")
    .description("ask a module's tools: through the mesh (mesh tool MODULE TOOL), or at a control socket")
    .argument("[module-and-tool...]", "the module, then its tool and the tool's arguments")
    .option("--control <socket>", "ask this provider's control socket directly (default: $MESH_CONTROL)")
    .option("--json", "print the answer as JSON, for scripts")
    .option("--timeout <duration>", "how long to wait for the answer", "2m")
    .option("--yes", "do not ask for confirmation before a deletion or an approval (for scripts)")
    .addHelpText(
      "after",
      `
Tools: ${CONTROL_TOOLS.map((t) => toolUsage(t)).join(", ")}.
${CONFIRMED_TOOLS} ask for confirmation on a terminal; with no terminal, pass --yes.

Examples:
  $ mesh tool postgres status
  $ mesh tool postgres retire list
  $ mesh tool postgres cleanup delete umami_db
  $ mesh tool --control /run/mesh/postgres.sock status
  $ MESH_CONTROL=/run/mesh/postgres.sock mesh tool cleanup list
  $ mesh tool postgres cleanup list --json | jq -r '.[].login'`,
    )
    .action(async (words: string[], _opts: unknown, cmd: Command) => {
      const flags = cmd.optsWithGlobals<ToolFlags>();
      if (controlPath(flags, io) !== undefined) {
        if (words.length === 0) {
          throw new CliExit(EXIT_USAGE, `which tool? the tools are ${CONTROL_TOOLS.join(", ")}`);
        }
        throw new CliExit(
          EXIT_USAGE,
          `unknown tool ${JSON.stringify(words.join(" "))}: the tools are ${CONTROL_TOOLS.join(", ")}; ` +
            `with --control (or MESH_CONTROL) name only the tool, since the socket says which provider`,
        );
      }
      const [module, ...rest] = words;
      if (module === undefined) {
        throw new CliExit(
          EXIT_USAGE,
          "which module and which tool? `mesh tool MODULE TOOL [ARGS]` (e.g. `mesh tool postgres status`), " +
            "or `mesh tool --control SOCKET TOOL` for one provider's control socket",
        );
      }
      if (!isModuleName(module)) {
        throw new CliExit(
          EXIT_USAGE,
          `${JSON.stringify(module)} cannot be a module: a module name is ${MODULE_NAME_RULE}`,
        );
      }
      const { name, args } = splitTool(module, rest);
      await perform(io, flags, meshAsker(io, flags, module), name, args, module);
    });

  const local = (name: ControlTool) => async (cmd: Command, args: readonly string[]) => {
    const flags = cmd.optsWithGlobals<ToolFlags>();
    await perform(io, flags, localAsker(io, flags), name, args);
  };

  // One subcommand per tool in the table, the two-word ones under their first word.
  const groups = new Map<string, Command>();
  for (const def of TOOL_TABLE as readonly (ToolDefinition & { readonly name: ControlTool })[]) {
    const words = def.name.split(" ");
    const last = words.pop() ?? def.name;
    let parent = tool;
    const group = words[0];
    if (group !== undefined) {
      parent =
        groups.get(group) ??
        tool
          .command(group)
          .description(TOOL_GROUPS[group] ?? `the ${group} tools`)
          .addHelpText(
            "after",
            `\nExamples:\n${TOOL_TABLE.filter((t) => t.name.startsWith(`${group} `))
              .map((t) => `  $ mesh tool postgres ${exampleCall(t)}`)
              .join("\n")}`,
          );
      groups.set(group, parent);
    }
    const sub = parent.command(last).description(def.summary);
    for (const arg of def.args) sub.argument(arg.optional ? `[${arg.name}]` : `<${arg.name}>`, arg.help);
    const examples = [
      `  $ mesh tool postgres ${exampleCall(def)}`,
      ...(def.readOnly ? [`  $ mesh tool postgres ${def.name} --json`] : []),
      `  $ mesh tool --control /run/mesh/postgres.sock ${exampleCall(def)}${def.confirm ? " --yes" : ""}`,
    ];
    if (def.confirm !== undefined) {
      sub.option("--yes", `do not ask to type ${def.confirm.typed} (for scripts)`);
      sub.addHelpText(
        "after",
        `\nAsks you to type ${def.confirm.typed} before it ${def.confirm.effect}; with no terminal, pass --yes.\n\nExamples:\n${examples.join("\n")}`,
      );
    } else {
      sub.addHelpText("after", `\nExamples:\n${examples.join("\n")}`);
    }
    sub.action((...params: unknown[]) => {
      const cmd = params.at(-1) as Command;
      const args = params.slice(0, def.args.length).filter((a): a is string => typeof a === "string");
      return local(def.name)(cmd, args);
    });
  }
}

/** The tool called with its arguments' example values: `cleanup delete app_umami`. */
function exampleCall(def: ToolDefinition): string {
  return [def.name, ...def.args.map((a) => a.example)].join(" ");
}

function controlPath(flags: ToolFlags, io: CliIo): string | undefined {
  const path = flags.control ?? io.env["MESH_CONTROL"];
  return path === undefined || path === "" ? undefined : path;
}

function timeoutOf(flags: ToolFlags): number {
  try {
    return parseDuration(flags.timeout ?? "2m");
  } catch (err) {
    if (err instanceof InvalidDurationError) throw new CliExit(EXIT_USAGE, `--timeout: ${err.message}`);
    throw err;
  }
}

// The tool's words after the module: the longest tool name they start with, then its arguments.
function splitTool(module: string, words: readonly string[]): { name: ControlTool; args: string[] } {
  for (const name of [...CONTROL_TOOLS].sort((a, b) => b.length - a.length)) {
    const parts = name.split(" ");
    if (parts.every((part, i) => words[i] === part)) return { name, args: words.slice(parts.length) };
  }
  const asked = words.length === 0 ? "no tool" : `unknown tool ${JSON.stringify(words.join(" "))}`;
  throw new CliExit(
    EXIT_USAGE,
    `${asked} for ${module}: the tools are ${CONTROL_TOOLS.join(", ")} (e.g. \`mesh tool ${module} status\`)`,
  );
}

/** One provider's control socket on this machine. */
function localAsker(io: CliIo, flags: ToolFlags): Asker {
  const path = controlPath(flags, io);
  if (path === undefined) {
    throw new CliExit(
      EXIT_USAGE,
      "which module? `mesh tool MODULE TOOL` asks through the running mesh (e.g. `mesh tool postgres status`); " +
        "to ask one provider directly, pass --control SOCKET or set MESH_CONTROL (the path `mesh provider` printed at start)",
    );
  }
  const timeoutMs = timeoutOf(flags);
  return async (name, args) => {
    try {
      // A consumer's why or a refusal may quote a driver's error, URL and all: masked like `mesh status`.
      return maskDeep(
        await withProgress(io, `waiting for the provider at ${path} to answer ${name}`, () =>
          callControl(
            path,
            { tool: name, args, who: osUserName() },
            { timeoutMs, maxBytes: MAX_DIRECT_ANSWER_BYTES },
          ),
        ),
      );
    } catch (err) {
      if (err instanceof ToolError) {
        throw new CliExit(
          EXIT_REFUSED,
          `the provider refused ${name} (${err.code}): ${maskUrls(err.message)}`,
        );
      }
      if (err instanceof ControlUnreachableError) throw new CliExit(EXIT_UNREACHABLE, err.message);
      throw err;
    }
  };
}

/** The running mesh: the controller relays the call to the module's node. */
function meshAsker(io: CliIo, flags: ToolFlags, module: string): Asker {
  const state = stateDirOf(flags.state, io);
  const timeoutMs = timeoutOf(flags);
  return async <T extends ControlTool>(name: T, args: readonly string[]): Promise<ControlResults[T]> => {
    const body = JSON.stringify({ module, tool: name, args, who: osUserName() });
    // A consumer's why or a refusal may quote a driver's error, URL and all: masked like `mesh status`.
    const reply = maskDeep(
      await askController<MeshToolReply>(state, TOOL_REQUEST_SUBJECT, body, {
        timeoutMs,
        name: "mesh tool",
        ...busOverride(flags),
        io,
        waiting: `waiting for ${module} to answer ${name} through the mesh`,
        timedOut:
          `no answer to ${name} for ${module} within ${flags.timeout ?? "2m"}; it may still be running: ` +
          `its result will be in ${module}'s ledger (\`mesh ledger ${module}\`)`,
      }),
    );
    if (typeof reply.ledger === "string")
      io.err(`${paintFor(io, "err").yellow("warning:")} ${reply.ledger}\n`);
    if (reply.ok === true) return reply.answer as ControlResults[T];
    const code = reply.code ?? "refused";
    const error = reply.error ?? "the mesh gave no reason";
    const unanswered = RELAY_UNANSWERED_CODES.has(code) || RUNNER_UNANSWERED_CODES.has(code);
    throw new CliExit(
      unanswered ? EXIT_UNREACHABLE : EXIT_REFUSED,
      `${module} did not run ${name} (${code}): ${error}`,
    );
  };
}

/**
 * Checks the arguments, asks for confirmation before a tool that changes something (unless --yes),
 * asks the tool and prints its answer.
 */
async function perform(
  io: CliIo,
  flags: ToolFlags,
  ask: Asker,
  name: ControlTool,
  args: readonly string[],
  module?: string,
): Promise<void> {
  const badLogin = toolDefinition(name).args.findIndex(
    (a, i) => a.name === "login" && args[i] !== undefined && !isValidLogin(args[i]),
  );
  if (badLogin !== -1) throw new CliExit(EXIT_USAGE, new InvalidLoginError(args[badLogin] ?? "").message);
  try {
    checkControlRequest({ tool: name, args, who: osUserName() });
  } catch (err) {
    if (err instanceof BadControlRequestError) throw new CliExit(EXIT_USAGE, err.message);
    throw err;
  }
  const json = flags.json === true;
  const printJson = (value: unknown): void => io.out(formatJson(value));
  const paint = paintFor(io, "out");
  const again = module === undefined ? "mesh tool" : `mesh tool ${module}`;
  let sent = args;
  if (isChangingTool(name) && flags.yes !== true) {
    sent = await confirmChange(io, ask, name, args);
  }
  switch (name) {
    case "status": {
      const report = await ask("status", sent);
      if (json) return printJson(report);
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
      // What needs a person stands out on a terminal: failing in red, waiting for approval in yellow.
      const state = (cell: string, _row: number, column: number): string =>
        column !== 1
          ? cell
          : cell === "failing"
            ? paint.red(cell)
            : cell === "awaiting-approval"
              ? paint.yellow(cell)
              : cell;
      return io.out(`${formatTable(["LOGIN", "STATE", "CLASS", "SINCE", "WHY"], rows, state)}\n`);
    }
    case "retire list": {
      const list = await ask("retire list", sent);
      if (json) return printJson(list);
      if (list.id === null) {
        return io.out(`nothing waits for approval${list.reason === "" ? "" : ` (${list.reason})`}\n`);
      }
      return io.out(
        `${paint.yellow("waiting for approval")}: set ${list.id}, ${list.logins.length} of the ${list.held} held\n` +
          `why it waits: ${list.reason}\n` +
          list.logins.map((login) => `  ${login}\n`).join("") +
          `approve exactly this set with: ${again} retire approve ${list.id}\n`,
      );
    }
    case "retire approve": {
      const approved = await ask("retire approve", sent);
      if (json) return printJson(approved);
      const retired = approved.retired.length === 0 ? "nothing" : approved.retired.join(", ");
      return io.out(`approved set ${approved.id}: retired ${retired}\n`);
    }
    case "cleanup list": {
      const entries = await ask("cleanup list", sent);
      if (json) return printJson(entries);
      if (entries.length === 0) return io.out("nothing retired: nothing to clean up\n");
      const rows = entries.map((e) => [e.login, formatTime(e.retiredAt), e.why]);
      return io.out(`${formatTable(["LOGIN", "RETIRED-AT", "WHY"], rows)}\n`);
    }
    case "cleanup delete": {
      const deleted = await ask("cleanup delete", sent);
      if (json) return printJson(deleted);
      return io.out(
        `deleted ${deleted.login}: freed ${formatBytes(deleted.freedBytes)} (${deleted.freedBytes} bytes)\n`,
      );
    }
  }
}

/**
 * Asks the person at the terminal to confirm a deletion (by typing the login) or an approval (by
 * typing the waiting set's id, which is then exactly the set approved). Returns the arguments to send.
 * @throws CliExit (EXIT_USAGE) with no terminal, or when what is typed does not match.
 */
async function confirmChange(
  io: CliIo,
  ask: Asker,
  name: ChangingToolName,
  args: readonly string[],
): Promise<readonly string[]> {
  if (name === "cleanup delete") {
    const login = args[0] ?? "";
    if (io.stdin.isTTY !== true) {
      throw new CliExit(
        EXIT_USAGE,
        `cleanup delete removes ${login} and its data for good, and there is no terminal to confirm on: ` +
          `pass --yes to delete without asking`,
      );
    }
    const entry = (await ask("cleanup list", [])).find((e) => e.login === login);
    if (entry !== undefined) io.err(`${login}: retired ${formatTime(entry.retiredAt)}, ${entry.why}\n`);
    await confirm(
      io,
      `This deletes ${login} and all its data for good. Type the login to confirm: `,
      login,
      "deleted",
    );
    return args;
  }
  if (io.stdin.isTTY !== true) {
    throw new CliExit(
      EXIT_USAGE,
      `retire approve retires the waiting set of consumers (their access ends at once), and there is no ` +
        `terminal to confirm on: pass --yes to approve without asking`,
    );
  }
  const list = await ask("retire list", []);
  if (list.id === null) {
    throw new CliExit(
      EXIT_REFUSED,
      `nothing waits for approval${list.reason === "" ? "" : ` (${list.reason})`}: nothing was approved`,
    );
  }
  const asked = args[0];
  if (asked !== undefined && asked !== list.id) {
    throw new CliExit(
      EXIT_REFUSED,
      `the set waiting for approval is ${list.id}, not ${asked}: nothing was approved; ` +
        `see what it holds with retire list`,
    );
  }
  io.err(
    `set ${list.id} waits for approval, ${list.logins.length} of the ${list.held} held (${list.reason}):\n` +
      list.logins.map((login) => `  ${login}\n`).join(""),
  );
  await confirm(
    io,
    `This retires these consumers: their access ends, their data is kept. Type the set's id to confirm: `,
    list.id,
    "approved",
  );
  return [list.id];
}

async function confirm(io: CliIo, question: string, expected: string, done: string): Promise<void> {
  const rl = createInterface({ input: io.stdin, output: process.stderr, terminal: true });
  // Ctrl-C at the prompt must end the command, not leave the question waiting.
  const interrupted = new AbortController();
  rl.on("SIGINT", () => interrupted.abort());
  let typed: string;
  try {
    typed = await rl.question(question, { signal: interrupted.signal });
  } catch (err) {
    if (interrupted.signal.aborted) throw new CliExit(EXIT_USAGE, `\nnot ${done}: interrupted`);
    throw err;
  } finally {
    rl.close();
  }
  if (typed.trim() !== expected) {
    throw new CliExit(EXIT_USAGE, `not ${done}: what was typed is not ${expected}`);
  }
}
