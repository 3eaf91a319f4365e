// `mesh ledger <module>`: a module's history as a timeline — what its provider did to which
// consumer and why, and which tools were called by whom with what result — asked of the running
// controller with the operator's credentials, as `mesh status` asks.
import type { Command } from "commander";
import type { LedgerRecord } from "@mesh/bus";
import { LEDGER_READ_SUBJECT } from "@mesh/bus/subjects";
import { askController, busOverride, stateDirOf, withAskFlags } from "./controller-request.ts";
import { NO_PAINT, paintFor, type Paint } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatBytes, formatJson, formatTable, formatTime, maskDeep } from "./format.ts";
import type { CliIo } from "./io.ts";

const HELP = `
The newest entries come last. Each line: when, the kind of entry (action: what the provider did to a
consumer; tool: a tool called through the mesh), who asked, what was done, and why or with what result.

Examples:
  $ mesh ledger postgres
  $ mesh ledger postgres --limit 200 --json | jq '.entries[].entry.action'`;

/** What the controller answers on the ledger read subject. */
type LedgerAnswer =
  | { readonly ok: true; readonly limit?: number; readonly entries: readonly LedgerRecord[] }
  | { readonly ok: false; readonly error?: string };

/** Adds `mesh ledger` to `program`. */
export function addLedgerCommand(program: Command, io: CliIo): void {
  withAskFlags(program.command("ledger"))
    .summary("a module's ledger: what was done to it, by whom, when and why")
    .description(
      "show a module's ledger: its provider's actions and the tools called on it, who, when and why",
    )
    .argument("<module>", "the module, as named in the fleet file")
    .option("--limit <n>", "how many of the newest entries to show (at most 1000)", "50")
    .option("--json", "print the controller's answer as JSON, for scripts")
    .addHelpText("after", HELP)
    .action(
      async (
        module: string,
        flags: { limit: string; json?: boolean; state?: string; bus?: string[]; busCa?: string },
      ) => {
        const limit = Number(flags.limit);
        if (!/^\d+$/.test(flags.limit.trim()) || !Number.isInteger(limit) || limit < 1) {
          throw new CliExit(EXIT_USAGE, `--limit ${flags.limit} is not a whole number of entries, 1 or more`);
        }
        // A tool's refusal or an action's why may quote a driver's error, URL and all: masked either way.
        const answer = maskDeep(
          await askController<LedgerAnswer>(
            stateDirOf(flags.state, io),
            LEDGER_READ_SUBJECT,
            JSON.stringify({ module, limit }),
            {
              name: "mesh ledger",
              ...busOverride(flags),
              io,
              waiting: `waiting for ${module}'s ledger from the mesh`,
            },
          ),
        );
        if (!answer.ok)
          throw new CliExit(
            EXIT_REFUSED,
            answer.error ?? `the controller refused to read ${module}'s ledger`,
          );
        io.out(
          flags.json === true
            ? formatJson(answer)
            : formatLedger(module, answer.entries, paintFor(io, "out")),
        );
      },
    );
}

/** A module's entries as a timeline for a person, oldest first; `paint` colours a refused call red. */
export function formatLedger(
  module: string,
  entries: readonly LedgerRecord[],
  paint: Paint = NO_PAINT,
): string {
  if (entries.length === 0) return `${module}'s ledger has no entries yet\n`;
  const rows = entries.map((record) => {
    const e = record.entry;
    const at = typeof e["at"] === "string" ? e["at"] : record.at;
    const kind = text(e["kind"]) || "?";
    return [formatTime(at), kind, text(e["who"]) || "-", whatOf(kind, e), whyOf(kind, e)];
  });
  const shown = `${entries.length} entr${entries.length === 1 ? "y" : "ies"}`;
  const refused = (cell: string, _row: number, column: number): string =>
    column === 4 && cell.startsWith("refused:") ? paint.red(cell) : cell;
  return `${module}'s ledger, the newest ${shown} (oldest first):\n${formatTable(
    ["TIME", "KIND", "WHO", "WHAT", "WHY / RESULT"],
    rows,
    refused,
  )}\n`;
}

function whatOf(kind: string, e: Readonly<Record<string, unknown>>): string {
  if (kind === "action") {
    const iface = text(e["interface"]);
    const freed = typeof e["freedBytes"] === "number" ? `, freed ${formatBytes(e["freedBytes"])}` : "";
    return `${text(e["action"])} ${text(e["login"])}${iface ? ` (${iface})` : ""}${freed}`;
  }
  if (kind === "tool") {
    const args = Array.isArray(e["args"]) ? e["args"].map(text).join(" ") : "";
    return `${text(e["tool"])}${args ? ` ${args}` : ""}`;
  }
  const { kind: _kind, at: _at, who: _who, ...rest } = e;
  return clip(JSON.stringify(rest));
}

function whyOf(kind: string, e: Readonly<Record<string, unknown>>): string {
  if (kind !== "tool") return text(e["why"]) || "-";
  if (e["ok"] === false) {
    const code = text(e["code"]);
    return `refused: ${text(e["error"]) || "no reason given"}${code ? ` (${code})` : ""}`;
  }
  return e["answer"] === undefined ? "ok" : `ok: ${clip(JSON.stringify(e["answer"]))}`;
}

function text(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return "";
}

function clip(value: string, most = 80): string {
  return value.length <= most ? value : `${value.slice(0, most - 1)}…`;
}
