// `mesh logs MODULE [-f]`: one module's log, read from the node's state directory on this machine
// (`<state>/nodes/<node>/modules/<module>/log` for `mesh up`, `<state>/modules/<module>/log` for
// `mesh agent`). With -f it follows the file as it grows and across its rotation, until Ctrl-C.
import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { StringDecoder } from "node:string_decoder";
import type { Command } from "commander";
import { isModuleName } from "@mesh/manifest/names";
import { stateDirOf } from "./controller-request.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";

const HELP = `
Each line starts with when it was written and where from: out (standard output), err (standard error)
or mesh (the agent, about the module: its starts). Older lines are in log.1, log.2, … beside it.

Examples:
  $ mesh logs notes
  $ mesh logs postgres -f
  $ mesh logs postgres --node node-b --state /var/lib/mesh -n 100
  $ mesh logs notes --json | jq -r 'select(.stream == "err") | .msg'`;

/** How often `-f` looks at the file again. */
export const FOLLOW_EVERY_MS = 200;

/** The most of a log `mesh logs` reads at once: the file's end when it is larger. */
const MOST_READ = 64 * 1024 * 1024;

/** One line of a module's log, as `--json` prints it. */
export interface LogLine {
  /** ISO 8601, or null for a line written before lines were timestamped. */
  readonly time: string | null;
  /** `out`, `err` or `mesh`; null when the line does not say. */
  readonly stream: string | null;
  readonly msg: string;
}

const LINE = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) (out|err|mesh) ?\| (.*)$/;

/** A line of a module's log, read: a text line, or a JSON one (`--log-format json`). */
export function parseLogLine(line: string): LogLine {
  if (line.startsWith("{")) {
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (typeof o["msg"] === "string") {
        return {
          time: typeof o["time"] === "string" ? o["time"] : null,
          stream: typeof o["stream"] === "string" ? o["stream"] : null,
          msg: o["msg"],
        };
      }
    } catch {
      // Not JSON after all: a line the module wrote as it is.
    }
  }
  const m = LINE.exec(line);
  return m === null
    ? { time: null, stream: null, msg: line }
    : { time: m[1] ?? null, stream: m[2] ?? null, msg: m[3] ?? "" };
}

interface LogsFlags {
  readonly follow?: boolean;
  readonly state?: string;
  readonly node?: string;
  readonly lines?: string;
  readonly json?: boolean;
}

/** Adds `mesh logs` to `program`. */
export function addLogsCommand(program: Command, io: CliIo): void {
  program
    .command("logs")
    .summary("show one module's log on this machine (-f follows it)")
    .description("show one module's log, from the node state directory on this machine; -f follows it")
    .argument("<module>", "the module, as named in the fleet file")
    .option("-f, --follow", "keep printing what the module writes, across rotation, until Ctrl-C")
    .option("-n, --lines <n>", "only the last n lines (default: the whole current file)")
    .option("--node <node>", "the node whose module it is, when `mesh up` runs several nodes here")
    .option(
      "--state <dir>",
      "the state directory of mesh up or of mesh agent (default: $MESH_STATE_DIR, else ./.mesh-state)",
    )
    .option("--json", "print each line as a JSON object {time, stream, msg}, for scripts")
    .addHelpText("after", HELP)
    .action(async (module: string, flags: LogsFlags) => {
      const last = flags.lines === undefined ? undefined : Number(flags.lines);
      if (last !== undefined && (!/^\d+$/.test(String(flags.lines).trim()) || last < 1)) {
        throw new CliExit(EXIT_USAGE, `--lines ${flags.lines} is not a whole number of lines, 1 or more`);
      }
      const path = await findModuleLog(stateDirOf(flags.state, io), module, flags.node);
      const print = printer(io, flags.json === true);
      const position = printCurrent(path, last, print);
      if (flags.follow === true) await follow(path, position, print);
      print.flush();
    });
}

/** Where `module`'s log is under `state`: a `mesh up` state (its nodes) or a `mesh agent` one. */
async function findModuleLog(state: string, module: string, node: string | undefined): Promise<string> {
  if (!isModuleName(module)) {
    throw new CliExit(
      EXIT_USAGE,
      `${JSON.stringify(module)} is not a module name (a-z, 0-9 and -, as in the fleet file)`,
    );
  }
  const nodesDir = join(state, "nodes");
  const nodes = (await readdir(nodesDir, { withFileTypes: true }).catch(() => []))
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
    .sort();
  const logOf = (dir: string): string => join(dir, "modules", module, "log");
  const exists = async (path: string): Promise<boolean> =>
    (await stat(path).catch(() => undefined))?.isFile() === true;
  if (node !== undefined) {
    if (!nodes.includes(node)) {
      throw new CliExit(
        EXIT_REFUSED,
        `no node ${node} under ${state}` +
          (nodes.length > 0
            ? ` (its nodes: ${nodes.join(", ")})`
            : " (it holds no nodes: for mesh agent's state, leave out --node)") +
          `: give the --state of the mesh that runs it`,
      );
    }
    const path = logOf(join(nodesDir, node));
    if (await exists(path)) return path;
    throw noLog(module, state, `node ${node} has not run it`);
  }
  const candidates: { where: string; path: string }[] = [];
  for (const n of nodes) {
    const path = logOf(join(nodesDir, n));
    if (await exists(path)) candidates.push({ where: `node ${n}`, path });
  }
  const own = logOf(state);
  if (await exists(own)) candidates.push({ where: "this agent", path: own });
  const [only, ...more] = candidates;
  if (only !== undefined && more.length === 0) return only.path;
  if (only !== undefined) {
    throw new CliExit(
      EXIT_USAGE,
      `${module} has a log on ${candidates.map((c) => c.where).join(" and ")}: say which with --node`,
    );
  }
  throw noLog(
    module,
    state,
    nodes.length > 0 ? `none of its nodes (${nodes.join(", ")}) has run it` : "no module has run there",
  );
}

function noLog(module: string, state: string, why: string): CliExit {
  return new CliExit(
    EXIT_REFUSED,
    `no log of module ${module} under ${state}: ${why}. Check its name and node with \`mesh status\`, ` +
      `and give the --state of the mesh up or mesh agent that runs it (a module that never started has no log)`,
  );
}

interface Printer {
  write(text: string): void;
  flush(): void;
}

// Text goes out as it is read; for --json, whole lines only, each one object.
function printer(io: CliIo, json: boolean): Printer {
  if (!json) return { write: (text) => (text === "" ? undefined : io.out(text)), flush: () => undefined };
  let pending = "";
  return {
    write(text) {
      pending += text;
      let out = "";
      let newline: number;
      while ((newline = pending.indexOf("\n")) !== -1) {
        out += `${JSON.stringify(parseLogLine(pending.slice(0, newline)))}\n`;
        pending = pending.slice(newline + 1);
      }
      if (out !== "") io.out(out);
    },
    flush() {
      if (pending !== "") io.out(`${JSON.stringify(parseLogLine(pending))}\n`);
      pending = "";
    },
  };
}

// Prints the file (its last `last` lines when given); returns where it ended, and in which file.
function printCurrent(path: string, last: number | undefined, print: Printer): { ino: number; at: number } {
  const fd = openSync(path, "r");
  try {
    const { size, ino } = fstatSync(fd);
    const from = Math.max(0, size - MOST_READ);
    const buffer = Buffer.alloc(size - from);
    const read = readSync(fd, buffer, 0, buffer.length, from);
    let text = buffer.subarray(0, read).toString("utf8");
    if (from > 0) text = text.slice(text.indexOf("\n") + 1);
    if (last !== undefined) {
      const lines = text.split("\n");
      const complete = text.endsWith("\n") ? lines.slice(0, -1) : lines;
      text = complete.slice(-last).join("\n") + (text.endsWith("\n") && complete.length > 0 ? "\n" : "");
    }
    print.write(text);
    return { ino, at: from + read };
  } finally {
    closeSync(fd);
  }
}

// Until SIGINT or SIGTERM: prints what is added to the file; when the file is rotated (a new file at
// the path), prints the rest of the old one, then the new one from its start.
async function follow(path: string, start: { ino: number; at: number }, print: Printer): Promise<void> {
  let stopped = false;
  let wake: (() => void) | undefined;
  const stop = (): void => {
    stopped = true;
    wake?.();
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  let fd: number | undefined = openSync(path, "r");
  let ino = fstatSync(fd).ino;
  let at = ino === start.ino ? start.at : 0;
  const decoder = new StringDecoder("utf8");
  const drain = (): void => {
    if (fd === undefined) return;
    const buffer = Buffer.alloc(64 * 1024);
    for (;;) {
      const read = readSync(fd, buffer, 0, buffer.length, at);
      if (read === 0) return;
      at += read;
      print.write(decoder.write(buffer.subarray(0, read)));
    }
  };
  try {
    while (!stopped) {
      drain();
      const now = (() => {
        try {
          return statSync(path);
        } catch {
          return undefined; // between the rename and the new file: looked at again next time
        }
      })();
      if (now !== undefined && now.ino !== ino) {
        drain();
        if (fd !== undefined) closeSync(fd);
        fd = openSync(path, "r");
        ino = fstatSync(fd).ino;
        at = 0;
        continue;
      }
      if (now !== undefined && now.size < at) at = 0; // cut short in place (truncated)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, FOLLOW_EVERY_MS);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    drain();
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
    if (fd !== undefined) closeSync(fd);
  }
}
