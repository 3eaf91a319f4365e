// `mesh explain`: whether a module may publish or subscribe to a subject, and which manifest line
// decides it. It reads the same manifests and compiles the same permissions the controller gives
// the NATS server, so its answer is the server's.

import { resolve } from "node:path";
import type { Command } from "commander";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";

interface ExplainFlags {
  readonly fleet: string;
  readonly json?: boolean;
}

/** Adds `mesh explain <module> publish|subscribe <subject>` to `program`. */
export function addExplainCommand(program: Command, io: CliIo): void {
  program
    .command("explain")
    .summary("may a module publish or subscribe to a subject, and why")
    .description(
      "say whether a module may publish or subscribe to a subject, and which manifest line decides it",
    )
    .argument("<module>", "the module's name in the fleet file")
    .argument("<action>", "publish or subscribe")
    .argument("<subject>", "a NATS subject, like mesh.events.notes.note.created")
    .option("--fleet <file>", "the fleet file", "mesh.yaml")
    .option("--json", "print the answer as JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh explain notes publish mesh.events.notes.note.created --fleet examples/fleet/mesh.yaml
  $ mesh explain counter subscribe 'mesh.events.notes.>' --fleet examples/fleet/mesh.yaml --json`,
    )
    .action(async (module: string, action: string, subject: string, flags: ExplainFlags) => {
      if (action !== "publish" && action !== "subscribe") {
        throw new CliExit(
          EXIT_USAGE,
          `the action must be "publish" or "subscribe", not ${JSON.stringify(action)}`,
        );
      }
      // Loaded only when the command runs, so building the program does not pay for the parsers.
      const {
        explain,
        FleetError,
        loadFleet,
        loadFleetManifests,
        ManifestError,
        SeatConflictError,
        seatHolders,
      } = await import("@mesh/manifest");
      const fleetFile = resolve(flags.fleet);
      let manifests;
      let seats;
      try {
        manifests = await loadFleetManifests(await loadFleet(fleetFile));
        seats = seatHolders(manifests);
      } catch (err) {
        if (err instanceof FleetError || err instanceof ManifestError || err instanceof SeatConflictError) {
          throw new CliExit(EXIT_USAGE, err.message);
        }
        throw err;
      }
      const answer = explain(manifests, seats, module, action, subject);
      if (flags.json === true) {
        io.out(formatJson({ module, action, subject, ...answer }));
      } else {
        const where =
          answer.file === undefined
            ? ""
            : `, ${answer.file}${answer.line === undefined ? "" : `:${answer.line}`}`;
        const paint = paintFor(io, "out");
        io.out(
          `${answer.allowed ? paint.green("allowed") : paint.red("denied")}: ${answer.because}${where}\n`,
        );
      }
      // The answer is already said; the exit code alone carries the denial.
      if (!answer.allowed) throw new CliExit(EXIT_REFUSED, "");
    });
}
