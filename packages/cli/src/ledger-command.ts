// `mesh ledger <module>`: a module's history as a timeline — what was asked of it through the mesh,
// by whom and through what, and what its provider says it did — asked of the running controller with
// the operator's credentials, as `mesh status` asks. The mesh's own records and the module's claims
// are shown apart: a claim is "<module> says: …", and one naming an operator's action that no request
// the mesh relayed bears out is flagged.
import type { Command } from "commander";
import type { LedgerRecord } from "@mesh/bus";
import { LEDGER_READ_SUBJECT, viewLedger, type LedgerView } from "@mesh/bus/subjects";
import { askController, busOverride, stateDirOf, withAskFlags } from "./controller-request.ts";
import { NO_PAINT, paintFor, type Paint } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatBytes, formatJson, formatTable, formatTime, maskDeep } from "./format.ts";
import type { CliIo } from "./io.ts";

const HELP = `
The newest entries come last. Each line: its number in the module's history, when, by whom, what was
done, and why or with what result. Two kinds of entry, shown apart:
  alice via mesh tool   the mesh's own record of a call it carried (mesh tool, the dashboard, mesh
                        rotate), and who asked: the CLI's Unix user or the dashboard's operator
  MODULE says:          a line of the module's own action journal: only what the module says
A claim of an operator's action (an approval, a deletion, or a person named as who) that no request
the mesh relayed bears out is marked FLAGGED, with why. --json gives each entry's "recorded" (who,
via) or "claim" (what the module says), and "flagged" or "matches" (the request's number).

Examples:
  $ mesh ledger postgres
  $ mesh ledger postgres --limit 200 --json | jq '.entries[] | select(.flagged)'`;

/** What the controller answers on the ledger read subject. */
type LedgerAnswer =
  | { readonly ok: true; readonly limit?: number; readonly entries: readonly LedgerView[] }
  | { readonly ok: false; readonly error?: string };

/** Adds `mesh ledger` to `program`. */
export function addLedgerCommand(program: Command, io: CliIo): void {
  withAskFlags(program.command("ledger"))
    .summary("a module's ledger: what was done to it, by whom, when and why")
    .description(
      "show a module's ledger: the tools and rotations the mesh carried for it (who asked, when, the " +
        "result), and what its provider says it did, flagged where no request bears it out",
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
        const entries = viewed(module, answer.entries);
        io.out(
          flags.json === true
            ? formatJson({ ...answer, entries })
            : formatLedger(module, entries, paintFor(io, "out")),
        );
      },
    );
}

/**
 * A module's entries as a timeline for a person, oldest first: the mesh's records as "<who> via
 * <surface>", the module's claims as "<module> says:", a flagged claim marked and its reason given.
 * Entries not read by `viewLedger` yet (an older controller's answer) are read here. `paint`
 * colours a refused call and a flagged claim red.
 */
export function formatLedger(
  module: string,
  entries: readonly (LedgerRecord | LedgerView)[],
  paint: Paint = NO_PAINT,
): string {
  if (entries.length === 0) return `${module}'s ledger has no entries yet\n`;
  const views = viewed(module, entries);
  const rows = views.map((view) => {
    const e = view.entry;
    const { claim, recorded } = view;
    if (claim !== undefined) {
      const flagged = view.flagged === undefined ? "" : `FLAGGED: ${view.flagged}; it says: `;
      const asked = view.matches === undefined ? "" : ` (asked in #${view.matches})`;
      return [
        `#${view.seq}`,
        formatTime(view.at),
        `${claim.module} says:`,
        claimed(claim, view.at),
        `${flagged}${claim.why || "-"}${asked}`,
      ];
    }
    if (recorded !== undefined) {
      const at = typeof e["at"] === "string" ? e["at"] : view.at;
      return [`#${view.seq}`, formatTime(at), `${recorded.who} via ${recorded.via}`, whatOf(e), resultOf(e)];
    }
    const { kind, at: _at, ...rest } = e;
    return [`#${view.seq}`, formatTime(view.at), text(kind) || "?", clip(JSON.stringify(rest)), "-"];
  });
  const flagged = views.filter((v) => v.flagged !== undefined).length;
  const shown = `${entries.length} entr${entries.length === 1 ? "y" : "ies"}`;
  const marked = (cell: string, _row: number, column: number): string =>
    column === 4 && /^(refused|failed|FLAGGED):/.test(cell) ? paint.red(cell) : cell;
  const table = formatTable(
    ["#", "TIME", "BY", "WHAT", "WHY / RESULT"],
    rows.map((row) => row.map(printable)),
    marked,
  );
  const footer =
    flagged === 0
      ? ""
      : `${flagged} claim${flagged === 1 ? "" : "s"} FLAGGED: ${module} says an operator acted, and no ` +
        `request the mesh relayed bears it out; it is only ${module}'s word\n`;
  return `${module}'s ledger, the newest ${shown} (oldest first):\n${table}\n${footer}`;
}

// The controller's answer read as views: an older controller answers the records alone.
function viewed(module: string, entries: readonly (LedgerRecord | LedgerView)[]): LedgerView[] {
  const read = entries.some((e) => "recorded" in e || "claim" in e);
  return read ? (entries as LedgerView[]) : viewLedger(module, entries);
}

// What a claim says, its who quoted (the module's words, never the mesh's), its own time when it
// is not the time the bus stored it.
function claimed(claim: NonNullable<LedgerView["claim"]>, storedAt: string): string {
  const iface = claim.interface ? ` (${claim.interface})` : "";
  const freed = claim.freedBytes === undefined ? "" : `, freed ${formatBytes(claim.freedBytes)}`;
  const who = claim.who === "" || claim.who === "provisioner" ? "" : `, by ${JSON.stringify(claim.who)}`;
  const apart = Math.abs(Date.parse(claim.at) - Date.parse(storedAt));
  const when = claim.at !== "" && !(apart <= 60_000) ? `, at ${JSON.stringify(claim.at)}` : "";
  return `${claim.action || "?"} ${claim.login || "?"}${iface}${freed}${who}${when}`;
}

function whatOf(e: Readonly<Record<string, unknown>>): string {
  if (e["kind"] === "rotate") {
    const login = text(e["login"]);
    const provider = text(e["provider"]);
    const at = login && provider ? ` (${login} at ${provider})` : "";
    return `rotate ${text(e["consumer"])} ${text(e["interface"])}${at}`;
  }
  const args = Array.isArray(e["args"]) ? e["args"].map(text).join(" ") : "";
  return `${text(e["tool"])}${args ? ` ${args}` : ""}`;
}

function resultOf(e: Readonly<Record<string, unknown>>): string {
  if (e["kind"] === "rotate") {
    return e["ok"] === false ? `failed: ${text(e["error"]) || "no reason given"}` : "ok: a new password";
  }
  if (e["ok"] === false) {
    const code = text(e["code"]);
    return `refused: ${text(e["error"]) || "no reason given"}${code ? ` (${code})` : ""}`;
  }
  return e["answer"] === undefined ? "ok" : `ok: ${clip(JSON.stringify(e["answer"]))}`;
}

// A module's words may hold what repaints a terminal: every control character is shown as one.
function printable(cell: string): string {
  return cell.replace(/\r?\n/g, " ").replace(/\p{Cc}/gu, "\uFFFD");
}

function text(value: unknown): string {
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return "";
}

function clip(value: string, most = 80): string {
  return value.length <= most ? value : `${value.slice(0, most - 1)}…`;
}
