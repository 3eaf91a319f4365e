// Prints the "Every command and flag" reference of docs/operating.md from the program itself:
//   node --conditions=source --import tsx scripts/command-reference.ts --write
// rewrites that section in place (docs.test.ts fails when a flag is missing from it).
import { readFileSync, writeFileSync } from "node:fs";
import { Readable } from "node:stream";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { allCommands, buildProgram, commandPath } from "../packages/cli/src/cli.ts";

const quiet = { out: () => {}, err: () => {}, env: {}, stdin: Readable.from([]) };
const program = await buildProgram(quiet);

function usageOf(command: Command): string {
  const args = command.registeredArguments.map((a) => {
    const name = `${a.name()}${a.variadic ? "..." : ""}`;
    return a.required ? `<${name}>` : `[${name}]`;
  });
  return [`mesh ${commandPath(command)}`, ...args].join(" ");
}

function table(command: Command): string[] {
  const rows = command.options.map((o) => {
    const dflt =
      o.defaultValue === undefined || o.defaultValue === false
        ? ""
        : ` (default: \`${String(o.defaultValue)}\`)`;
    return [`\`${o.flags}\``, `${o.description}${dflt}`.replace(/\|/g, "\\|")];
  });
  if (rows.length === 0) return [];
  const w0 = Math.max(4, ...rows.map((r) => r[0]!.length));
  const w1 = Math.max(12, ...rows.map((r) => r[1]!.length));
  return [
    `| ${"flag".padEnd(w0)} | ${"what it does".padEnd(w1)} |`,
    `| ${"-".repeat(w0)} | ${"-".repeat(w1)} |`,
    ...rows.map((r) => `| ${r[0]!.padEnd(w0)} | ${r[1]!.padEnd(w1)} |`),
    "",
  ];
}

const lines: string[] = [];
for (const command of allCommands(program)) {
  if (commandPath(command) === "") continue;
  const summary = command.summary() || command.description();
  lines.push(`### \`${usageOf(command)}\``, "", `${summary.charAt(0).toUpperCase()}${summary.slice(1)}.`, "");
  lines.push(...table(command));
}
const reference = lines.join("\n");

if (process.argv.includes("--write")) {
  const path = fileURLToPath(new URL("../docs/operating.md", import.meta.url));
  const text = readFileSync(path, "utf8");
  const start = text.indexOf("\n### `mesh ", text.indexOf("## Every command and flag"));
  const next = text.indexOf("\n## ", start + 1);
  writeFileSync(path, `${text.slice(0, start + 1)}${reference}${next < 0 ? "" : text.slice(next)}`);
} else process.stdout.write(`${reference}\n`);
