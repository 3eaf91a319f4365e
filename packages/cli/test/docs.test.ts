// The docs against the program: every `mesh …` line of a shell block in README.md and docs/*.md
// names a command and flags mesh really has, every relative link points at a file of the
// repository, and the read-only commands that need nothing running are run here, in this process.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import type { Command, Option } from "commander";
import { allCommands, buildProgram, commandPath } from "../src/cli.ts";
import type { CliIo } from "../src/io.ts";
import { meshInProcess as mesh } from "./run-mesh.ts";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const quietIo: CliIo = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };
const program = await buildProgram(quietIo);

/** The four guides README.md links; each must exist. */
const GUIDES = ["architecture.md", "writing-a-module.md", "writing-a-provider.md", "operating.md"];

/** The READMEs of the packages a module or provider author uses. */
const PACKAGE_READMES = ["packages/sdk/README.md", "packages/testkit/README.md", "packages/cli/README.md"];

/** README.md, every docs/*.md and the authors' package READMEs, as paths relative to the repository. */
function docFiles(): string[] {
  const docs = existsSync(join(ROOT, "docs"))
    ? readdirSync(join(ROOT, "docs"))
        .filter((f) => f.endsWith(".md"))
        .sort()
        .map((f) => `docs/${f}`)
    : [];
  return ["README.md", ...docs, ...PACKAGE_READMES.filter((f) => existsSync(join(ROOT, f)))];
}

/** One `mesh …` line of a shell block: where it is, and its words. */
interface DocumentedCommand {
  readonly doc: string;
  readonly line: number;
  readonly text: string;
  readonly words: readonly string[];
}

/**
 * The words of a shell line up to its first comment or control operator, quotes removed. Only as
 * much of the shell as the docs use: single and double quotes, `#` comments, `&&`, `|`, `;`, `>`.
 */
function shellWords(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  let quote: "'" | '"' | undefined;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i]!;
    if (quote !== undefined) {
      if (ch === quote) quote = undefined;
      else word = (word ?? "") + ch;
      continue;
    }
    if (ch === "'" || ch === '"') {
      quote = ch;
      word ??= "";
    } else if (/\s/.test(ch)) {
      if (word !== undefined) words.push(word);
      word = undefined;
    } else if (word === undefined && (ch === "#" || ch === ";" || ch === "|" || ch === "&" || ch === ">")) {
      break;
    } else {
      word = (word ?? "") + ch;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}

/** Every `mesh …` line of the ```sh (or bash, shell) blocks of `doc`. */
function documentedCommands(doc: string): DocumentedCommand[] {
  const found: DocumentedCommand[] = [];
  let inShell = false;
  let inBlock = false;
  const lines = readFileSync(join(ROOT, doc), "utf8").split("\n");
  // A line ending in a backslash goes on in the next one, as in a shell.
  const joined = lines.map((line, i) => {
    if (i > 0 && lines[i - 1]?.trimEnd().endsWith("\\")) return "";
    let text = line;
    for (let j = i; text.trimEnd().endsWith("\\") && j + 1 < lines.length; j++) {
      text = `${text.trimEnd().slice(0, -1)} ${lines[j + 1]?.trim() ?? ""}`;
    }
    return text;
  });
  joined.forEach((raw, index) => {
    const fence = /^\s*```(\w*)/.exec(raw);
    if (fence) {
      inShell = !inBlock && ["sh", "bash", "shell"].includes(fence[1] ?? "");
      inBlock = !inBlock;
      return;
    }
    const text = raw.trim().replace(/^\$ /, "");
    if (!inShell || !text.startsWith("mesh ")) return;
    found.push({ doc, line: index + 1, text, words: shellWords(text).slice(1) });
  });
  return found;
}

/** What `words` (after `mesh`) ask for: the command, its positional words, the flags it was given. */
interface Parsed {
  readonly command: Command;
  readonly positional: readonly string[];
  readonly flags: ReadonlyMap<string, string | undefined>;
}

/** The options `command` accepts: its own and its parents' (commander reads those after a subcommand too). */
function optionsOf(command: Command): Option[] {
  const own = [...command.options];
  return command.parent === null ? own : [...own, ...optionsOf(command.parent)];
}

/**
 * Reads `words` as commander would: subcommands first, then flags and their values, the rest
 * positional.
 * @throws Error naming the flag or command mesh does not have.
 */
function parse(words: readonly string[]): Parsed {
  let command = program;
  let i = 0;
  for (; i < words.length; i++) {
    const next = command.commands.find((c) => c.name() === words[i] || c.aliases().includes(words[i]!));
    if (next === undefined) break;
    command = next;
  }
  const options = optionsOf(command);
  const positional: string[] = [];
  const flags = new Map<string, string | undefined>();
  for (; i < words.length; i++) {
    const word = words[i]!;
    if (!word.startsWith("-") || word === "-") {
      positional.push(word);
      continue;
    }
    const [name, inline] = word.includes("=")
      ? [word.slice(0, word.indexOf("=")), word.slice(word.indexOf("=") + 1)]
      : [word, undefined];
    if (name === "--help" || name === "-h") {
      flags.set("--help", undefined);
      continue;
    }
    const option = options.find((o) => o.long === name || o.short === name);
    if (option === undefined)
      throw new Error(`mesh ${commandPath(command)} has no flag ${name}`.replace("mesh  ", "mesh "));
    const key = option.long ?? option.short ?? name;
    if (inline !== undefined || !(option.required || option.optional)) {
      flags.set(key, inline);
      continue;
    }
    // A flag that takes a value takes the next word; a variadic one every word up to the next flag.
    const values: string[] = [];
    while (i + 1 < words.length && !words[i + 1]!.startsWith("-")) {
      values.push(words[++i]!);
      if (!option.variadic) break;
    }
    if (values.length === 0 && option.required) throw new Error(`${name} needs a value`);
    flags.set(key, values.join(" "));
  }
  const args = command.registeredArguments;
  if (!flags.has("--help")) {
    if (args.length === 0 && command.commands.length > 0 && positional.length > 0)
      throw new Error(`mesh ${commandPath(command)} has no subcommand ${positional[0]}`);
    const required = args.filter((a) => a.required).length;
    assert.ok(
      positional.length >= required,
      `mesh ${commandPath(command)} takes at least ${required} argument(s), given ${positional.length}`,
    );
    if (!args.some((a) => a.variadic))
      assert.ok(
        positional.length <= args.length,
        `mesh ${commandPath(command)} takes at most ${args.length} argument(s), given ${positional.length}`,
      );
  }
  return { command, positional, flags };
}

/**
 * The words to run a documented line with here, or undefined when it is not one to run: only
 * read-only commands that need no running mesh (check, explain with a --fleet, plan --empty,
 * completion), and only when every file it names is in this repository (made absolute, since the
 * docs name them from its top).
 */
function runnable(words: readonly string[], parsed: Parsed): string[] | undefined {
  const path = commandPath(parsed.command);
  const cheap =
    (path === "" && parsed.flags.has("--version")) ||
    path === "check" ||
    path === "completion" ||
    (path === "explain" && parsed.flags.has("--fleet")) ||
    (path === "plan" && parsed.flags.has("--empty"));
  if (!cheap || parsed.flags.has("--help")) return undefined;
  const looksLikeFile = (w: string): boolean =>
    !w.startsWith("-") && (w.includes("/") || /\.(ya?ml|json)$/.test(w));
  const files = words.filter(looksLikeFile);
  if (!files.every((f) => existsSync(join(ROOT, f)))) return undefined;
  return words.map((w) => (looksLikeFile(w) ? join(ROOT, w) : w));
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, "")
    .replace(/[^a-z0-9 _-]/g, "")
    .replace(/ /g, "-");
}

/** The targets of the Markdown links of `text` outside code, with their line numbers. */
function linksOf(text: string): { target: string; line: number }[] {
  const links: { target: string; line: number }[] = [];
  let inBlock = false;
  text.split("\n").forEach((raw, index) => {
    if (/^\s*```/.test(raw)) inBlock = !inBlock;
    if (inBlock) return;
    const outsideCode = raw.replace(/`[^`]*`/g, "");
    for (const match of outsideCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g))
      links.push({ target: match[1]!, line: index + 1 });
  });
  return links;
}

const docs = docFiles();
const commands = docs.flatMap(documentedCommands);

describe("the docs in the repository", () => {
  it("README.md links each of the four guides, and each exists", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    for (const guide of GUIDES) {
      assert.ok(existsSync(join(ROOT, "docs", guide)), `docs/${guide} exists`);
      assert.ok(readme.includes(`](docs/${guide})`), `README.md links docs/${guide}`);
    }
  });

  it("the packages an author uses each have a README", () => {
    for (const readme of PACKAGE_READMES) assert.ok(existsSync(join(ROOT, readme)), readme);
  });

  it("the sdk's runnable example runs: a provider over a Map makes the consumer it is given", () => {
    const run = spawnSync(
      process.execPath,
      ["--conditions=source", "--import", "tsx", "examples/hello-provider/main.ts"],
      { cwd: ROOT, encoding: "utf8", timeout: 120_000 },
    );
    assert.equal(run.status, 0, `${run.stderr}${run.stdout}`);
    assert.match(run.stdout, /^notes_hello: active /m);
    assert.match(run.stdout, /the backend holds: notes_hello/);
  });

  it("docs/operating.md gives every command mesh has, with each of its flags", () => {
    const text = readFileSync(join(ROOT, "docs", "operating.md"), "utf8");
    for (const command of allCommands(program)) {
      const path = commandPath(command);
      if (path === "") continue;
      const start = text.indexOf(`\n### \`mesh ${path}`);
      assert.ok(start >= 0, `a "### \`mesh ${path}" heading`);
      const end = text.indexOf("\n### ", start + 1);
      const section = text.slice(start, end < 0 ? undefined : end);
      for (const option of command.options)
        assert.ok(section.includes(`\`${option.flags}\``), `mesh ${path}'s ${option.flags} is in its table`);
    }
  });

  it("the checker itself refuses a flag, a subcommand or arguments mesh does not have", () => {
    assert.throws(() => parse(shellWords("status --jsn")), /mesh status has no flag --jsn/);
    assert.throws(() => parse(shellWords("tool retire lsit")), /has no subcommand lsit/);
    assert.throws(() => parse(shellWords("rotate notes")), /takes at least 2 argument/);
    assert.deepEqual(shellWords(`logs notes -f   # follow it; "quoted # not a comment"`), [
      "logs",
      "notes",
      "-f",
    ]);
    assert.equal(
      commandPath(parse(shellWords("tool postgres cleanup delete umami_db --yes")).command),
      "tool",
    );
  });

  it("documents enough mesh command lines to be worth checking", () => {
    assert.ok(commands.length >= 20, `found ${commands.length}`);
  });

  for (const doc of docs) {
    const text = readFileSync(join(ROOT, doc), "utf8");

    it(`${doc} sends the reader nowhere outside the repository`, () => {
      assert.ok(!text.includes("../shared"), `${doc} mentions ../shared, which a clone does not have`);
      for (const { target, line } of linksOf(text))
        assert.ok(!/^[a-z]+:/i.test(target), `${doc}:${line} links outside the repository: ${target}`);
    });

    it(`every relative link of ${doc} points at a file that exists`, () => {
      for (const { target, line } of linksOf(text)) {
        if (/^[a-z]+:/i.test(target)) continue;
        const [file, anchor] = target.split("#") as [string, string | undefined];
        const path = file === "" ? join(ROOT, doc) : resolve(dirname(join(ROOT, doc)), file);
        assert.ok(
          !relative(ROOT, path).startsWith(`..${sep}`),
          `${doc}:${line}: ${target} is outside the repository`,
        );
        assert.ok(existsSync(path), `${doc}:${line}: ${target} does not exist`);
        if (anchor !== undefined && path.endsWith(".md")) {
          const headings = readFileSync(path, "utf8")
            .split("\n")
            .filter((l) => /^#{1,6} /.test(l))
            .map((l) => anchorOf(l.replace(/^#+ /, "")));
          assert.ok(headings.includes(anchor), `${doc}:${line}: no heading #${anchor} in ${file || doc}`);
        }
      }
    });
  }

  for (const documented of commands) {
    const where = `${documented.doc}:${documented.line}`;
    it(`${where} \`${documented.text.split(" #")[0]!.trim()}\` names a command and flags mesh has`, () => {
      parse(documented.words);
    });
  }

  const runs = commands.flatMap((documented) => {
    const words = runnable(documented.words, parse(documented.words));
    return words === undefined ? [] : [{ documented, words }];
  });

  it("runs every documented check, explain --fleet, plan --empty and completion it can", () => {
    assert.ok(runs.length >= 6, `found ${runs.length}`);
  });

  for (const { documented, words } of runs) {
    it(`${documented.doc}:${documented.line} \`${documented.text.split(" #")[0]!.trim()}\` succeeds here`, async () => {
      const run = await mesh(words);
      const ok = documented.words.includes("--detailed-exitcode") ? [0, 4] : [0];
      assert.ok(ok.includes(run.code), `exit ${run.code}\n${run.stderr}${run.stdout}`);
      assert.ok(run.stdout.length > 0, "it printed something");
    });
  }
});
