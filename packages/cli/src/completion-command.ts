// `mesh completion bash|zsh`: a shell completion script, made from the program itself, so that a
// new command or flag completes without anyone remembering to add it here.
import type { Command } from "commander";
import { CliExit, EXIT_USAGE } from "./exit-codes.ts";
import type { CliIo } from "./io.ts";

/** The shells `mesh completion` writes a script for. */
export const COMPLETION_SHELLS = ["bash", "zsh"] as const;

/** Each command path (`""` for mesh itself, `"tool retire"`…) with its subcommands and long flags. */
function completionTable(program: Command): Map<string, string[]> {
  const table = new Map<string, string[]>();
  const walk = (command: Command, path: string): void => {
    const words = [
      ...command.commands.map((c) => c.name()),
      ...command.options.map((o) => o.long).filter((l): l is string => l !== undefined),
      "--help",
    ];
    table.set(
      path,
      [...new Set(words)].filter((w) => w !== "help" || path === ""),
    );
    for (const sub of command.commands) walk(sub, path === "" ? sub.name() : `${path} ${sub.name()}`);
  };
  walk(program, "");
  return table;
}

// Only names of commands and flags go into the script: they are plain words (checked), never quoted input.
function shellWords(words: readonly string[]): string {
  for (const w of words) {
    if (!/^[A-Za-z0-9-]+$/.test(w)) throw new Error(`not a plain word for a completion script: ${w}`);
  }
  return words.join(" ");
}

/** The bash completion script for `program`: `source <(mesh completion bash)`. */
export function bashCompletion(program: Command): string {
  const cases = [...completionTable(program)]
    .map(([path, words]) => `    "${path}") words="${shellWords(words)}" ;;`)
    .join("\n");
  return `# bash completion for mesh: source <(mesh completion bash), or save it in
# /etc/bash_completion.d/mesh
_mesh() {
  local cur path="" word i words
  cur="\${COMP_WORDS[COMP_CWORD]}"
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="\${COMP_WORDS[i]}"
    [[ "$word" == -* ]] && continue
    case "\${path:+$path }$word" in
${[...completionTable(program).keys()]
  .filter((p) => p !== "")
  .map((p) => `      "${p}") path="${p}" ;;`)
  .join("\n")}
    esac
  done
  case "$path" in
${cases}
    *) words="" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
  [[ \${#COMPREPLY[@]} -eq 0 ]] && COMPREPLY=($(compgen -f -- "$cur"))
  return 0
}
complete -F _mesh mesh
`;
}

/** The zsh completion script for `program`: `source <(mesh completion zsh)`. */
export function zshCompletion(program: Command): string {
  return `# zsh completion for mesh: source <(mesh completion zsh), or save it as _mesh on $fpath
autoload -U +X bashcompinit && bashcompinit
${bashCompletion(program).replace(/^# bash completion[^\n]*\n[^\n]*\n/, "")}`;
}

/** Adds `mesh completion bash|zsh` to `program`. */
export function addCompletionCommand(program: Command, io: CliIo): void {
  program
    .command("completion")
    .summary("print a shell completion script for bash or zsh")
    .description("print a completion script for mesh's commands and flags, for bash or zsh")
    .argument("<shell>", `the shell: ${COMPLETION_SHELLS.join(" or ")}`)
    .addHelpText(
      "after",
      `
Examples:
  $ source <(mesh completion bash)                  # this shell only
  $ mesh completion bash > /etc/bash_completion.d/mesh
  $ mesh completion zsh > "\${fpath[1]}/_mesh"`,
    )
    .action((shell: string) => {
      if (shell === "bash") io.out(bashCompletion(program));
      else if (shell === "zsh") io.out(zshCompletion(program));
      else throw new CliExit(EXIT_USAGE, `no completion for ${JSON.stringify(shell)}: say bash or zsh`);
    });
}
