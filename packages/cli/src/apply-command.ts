// `mesh apply FILE` and `mesh fleet history|show|rollback`: the fleet lives in the mesh's bus, as
// revisions. An apply checks the fleet file and every manifest it names here, prints the plan against
// the revision the mesh stores, and sends the fleet, manifests inlined, to the leading controller,
// which stores it as the next revision unless the stored one moved since the plan. It works from
// any machine holding the operator's credential and a bus URL.
import { createHash, randomBytes } from "node:crypto";
import { resolve } from "node:path";
import type { Command } from "commander";
import type { FleetSource, FleetRevision } from "@mesh/controller";
import { FLEET_APPLY_SUBJECT, FLEET_HISTORY_SUBJECT } from "@mesh/bus/subjects";
import { askController, busOverride, stateDirOf, withAskFlags, type BusFlags } from "./controller-request.ts";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_STALE_REVISION, EXIT_UNREACHABLE, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { askServed, formatPlan, type PlanReport } from "./plan-command.ts";
import { osUserName } from "./who.ts";

/**
 * The largest apply sent in one bus message (NATS takes 1 MiB by default; the rest is headers); a
 * larger one is sent in parts first (see the controller's apply-uploads).
 */
export const APPLY_MAX_BYTES = 960 * 1024;

interface ApplyFlags extends BusFlags {
  readonly state?: string;
  readonly json?: boolean;
  readonly force?: boolean;
  readonly expectRevision?: string;
}

/** What the controller answers an apply with. */
interface ApplyAnswer {
  readonly ok: boolean;
  readonly code?: string;
  readonly error?: string;
  readonly revision?: number;
  readonly previous?: number;
  readonly unchanged?: boolean;
  readonly published?: number;
  readonly minted?: number;
  readonly expected?: number;
  readonly stored?: number;
}

/** Adds `mesh apply` and `mesh fleet` to `program`. */
export function addApplyCommands(program: Command, io: CliIo): void {
  withAskFlags(program.command("apply"))
    .summary("store a fleet file in the mesh as a new revision, from any machine")
    .description(
      "check a fleet file and every manifest it names, print the plan against the revision the mesh stores, " +
        "and store it (manifests inlined) as the next revision; every controller serves it",
    )
    .argument("<fleet>", "the fleet file to apply")
    .option(
      "--expect-revision <n>",
      "refuse unless the mesh stores this revision (default: the one the printed plan was made against)",
    )
    .option("--force", "apply even when the stored revision moved since the plan")
    .option("--json", "print the plan and the controller's answer as JSON")
    .addHelpText(
      "after",
      `
The plan names the stored revision; the apply is refused, naming both revisions, when another apply
stored a newer one in between (a machine with a stale file never writes over a newer revision).

Examples:
  $ mesh apply mesh.yaml
  $ mesh apply mesh.yaml --bus nats://10.0.0.2:4222 --state ~/mesh-operator   # from a laptop
  $ mesh apply mesh.yaml --expect-revision 7`,
    )
    .action(async (fleet: string, flags: ApplyFlags) => {
      const { loadFleetPlan } = await import("@mesh/controller");
      const { formatProblem, ProblemsError } = await import("@mesh/manifest");
      const file = resolve(fleet);
      let next;
      try {
        next = await loadFleetPlan(file, { reuse: false });
      } catch (err) {
        if (!(err instanceof ProblemsError)) throw err;
        throw new CliExit(
          EXIT_USAGE,
          `the fleet file ${file} is refused, so nothing was applied; fix these and apply again:\n` +
            err.problems.map(formatProblem).join("\n"),
        );
      }
      if (next.source === undefined) throw new Error(`the fleet file ${file} was read without its source`);
      await applySource(next.source, { ...flags, file }, io);
    });

  const fleet = program
    .command("fleet")
    .summary("the fleet's revisions kept in the mesh: history, show, rollback")
    .description("the applied revisions of the fleet, as the mesh keeps them (the last 100 by default)")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh fleet history
  $ mesh fleet show 6 > mesh.yaml
  $ mesh fleet rollback 6`,
    );

  withAskFlags(fleet.command("history"))
    .summary("every kept revision: who applied it, when, through what, and what it changed")
    .description("list the kept revisions of the fleet, oldest first; * marks the one served")
    .option("--json", "print them as JSON")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh fleet history
  $ mesh fleet history --json | jq '.history[] | {revision, who, at}'`,
    )
    .action(async (flags: BusFlags & { state?: string; json?: boolean }) => {
      const state = stateDirOf(flags.state, io);
      const answer = await askController<{
        ok: boolean;
        error?: string;
        revision?: number;
        history?: FleetRevision[];
      }>(state, FLEET_HISTORY_SUBJECT, "{}", { name: "mesh fleet history", ...busOverride(flags), io });
      if (!answer.ok || !Array.isArray(answer.history))
        throw new CliExit(EXIT_REFUSED, answer.error ?? "the controller did not answer with the history");
      if (flags.json === true) {
        io.out(formatJson({ revision: answer.revision, history: answer.history }));
        return;
      }
      io.out(formatHistory(answer.history, answer.revision ?? 0));
    });

  withAskFlags(fleet.command("show"))
    .summary("one kept revision: its fleet file (and, with --json, its manifests)")
    .description("print the fleet file of a kept revision (redirect it to a file to edit and apply it again)")
    .argument("<revision>", "the revision, as mesh fleet history lists it")
    .option("--json", "print the revision, who applied it, its fleet file and every manifest as JSON")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh fleet show 6
  $ mesh fleet show 6 > mesh.yaml   # then edit it and mesh apply mesh.yaml`,
    )
    .action(async (rev: string, flags: BusFlags & { state?: string; json?: boolean }) => {
      const state = stateDirOf(flags.state, io);
      const got = await askRevision(state, revisionOf(rev, "REVISION"), flags, io);
      if (flags.json === true) {
        io.out(formatJson(got));
        return;
      }
      const e = got.entry;
      io.err(
        `# revision ${e.revision}, applied by ${e.who} via ${e.via} at ${e.at} from ${e.fleetFile}: ${e.summary}\n` +
          `# manifests: ${Object.keys(got.source.manifests).join(", ") || "none"}\n`,
      );
      io.out(got.source.fleetText.endsWith("\n") ? got.source.fleetText : `${got.source.fleetText}\n`);
    });

  withAskFlags(fleet.command("rollback"))
    .summary("apply a kept revision again, as a new revision, through the plan")
    .description(
      "apply the fleet of a kept revision again, manifests as they were then: the plan against the stored " +
        "revision is printed, and the apply is refused when the stored revision moves meanwhile",
    )
    .argument("<revision>", "the revision to go back to, as mesh fleet history lists it")
    .option("--expect-revision <n>", "refuse unless the mesh stores this revision (default: the planned one)")
    .option("--force", "apply even when the stored revision moved since the plan")
    .option("--json", "print the plan and the controller's answer as JSON")
    .addHelpText(
      "after",
      `
A consumer that the rollback brings back comes back as it was: the mesh kept its password, and its
provider kept its data while it was retired.

Examples:
  $ mesh fleet history
  $ mesh fleet rollback 6`,
    )
    .action(async (rev: string, flags: ApplyFlags) => {
      const state = stateDirOf(flags.state, io);
      const revision = revisionOf(rev, "REVISION");
      const got = await askRevision(state, revision, flags, io);
      await applySource(got.source, { ...flags, file: got.source.fleetFile, rollback: revision }, io);
    });
}

function revisionOf(text: string, what: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(n))
    throw new CliExit(
      EXIT_USAGE,
      `${what} ${JSON.stringify(text)} is not a revision: give a number, as mesh fleet history lists them`,
    );
  return n;
}

async function askRevision(
  state: string,
  revision: number,
  flags: BusFlags,
  io: CliIo,
): Promise<{ entry: FleetRevision; source: FleetSource; revision: number }> {
  const answer = await askController<{
    ok: boolean;
    error?: string;
    revision?: number;
    entry?: FleetRevision;
    source?: FleetSource;
  }>(state, FLEET_HISTORY_SUBJECT, JSON.stringify({ revision }), {
    name: "mesh fleet",
    ...busOverride(flags),
    io,
  });
  if (!answer.ok || answer.entry === undefined || answer.source === undefined)
    throw new CliExit(EXIT_REFUSED, answer.error ?? `revision ${revision} is not kept`);
  return { entry: answer.entry, source: answer.source, revision: answer.revision ?? 0 };
}

// Plans `source` against what the mesh serves, prints the plan, and applies it (or, with
// `rollback`, asks the controller to apply its own kept copy of that revision).
async function applySource(
  source: FleetSource,
  flags: ApplyFlags & { readonly file: string; readonly rollback?: number },
  io: CliIo,
): Promise<void> {
  const { diffFleetPlans, fleetPlanOf } = await import("@mesh/controller");
  const state = stateDirOf(flags.state, io);
  const expectFlag =
    flags.expectRevision === undefined ? undefined : revisionOf(flags.expectRevision, "--expect-revision");
  const served = await askServed(state, io, flags);
  if (served === undefined)
    throw new CliExit(
      EXIT_UNREACHABLE,
      `no operator credential in ${state}: give --state (a copy of the mesh's operator.creds and bus.json) and --bus`,
    );
  const next = await fleetPlanOf(source);
  const diff = diffFleetPlans(served.fleet, next, { keptPasswords: served.keptPasswords });
  const report: PlanReport = {
    fleetFile: flags.file,
    against: {
      kind: "mesh",
      state,
      fleetFile: served.fleet.fleetFile,
      readAt: served.fleet.readAt,
      ...(served.revision !== undefined ? { revision: served.revision } : {}),
    },
    ...diff,
  };
  if (flags.json !== true) io.out(formatPlan(report, paintFor(io, "out"), true));
  const expectRevision = expectFlag ?? served.revision;
  const asking = {
    ...(expectRevision !== undefined ? { expectRevision } : {}),
    force: flags.force === true,
    who: osUserName(),
  };
  const name = flags.rollback !== undefined ? "mesh fleet rollback" : "mesh apply";
  let body = JSON.stringify({
    ...(flags.rollback !== undefined ? { rollback: flags.rollback } : { source }),
    ...asking,
  });
  if (Buffer.byteLength(body) > APPLY_MAX_BYTES) {
    // More than one bus message takes: the source goes first, in parts, then the apply naming them.
    const { applyParts } = await import("@mesh/controller");
    const text = JSON.stringify(source);
    const parts = applyParts(text);
    const upload = randomBytes(12).toString("base64url");
    for (const [part, chunk] of parts.entries()) {
      const taken = await askController<{ ok: boolean; error?: string }>(
        state,
        FLEET_APPLY_SUBJECT,
        JSON.stringify({ upload, part, parts: parts.length, text: chunk }),
        {
          name,
          ...busOverride(flags),
          io,
          waiting: `sending the fleet (${Buffer.byteLength(text)} bytes) in ${parts.length} parts: part ${part + 1}`,
        },
      );
      if (!taken.ok)
        throw new CliExit(
          EXIT_REFUSED,
          `${taken.error ?? "a part of the fleet was refused"}: nothing was applied`,
        );
    }
    body = JSON.stringify({
      upload,
      parts: parts.length,
      sha256: createHash("sha256").update(text).digest("hex"),
      ...asking,
    });
  }
  const answer = await askController<ApplyAnswer>(state, FLEET_APPLY_SUBJECT, body, {
    name,
    ...busOverride(flags),
    timeoutMs: 60_000,
    io,
    waiting: `applying the fleet through the mesh in ${state}`,
  });
  if (flags.json === true) io.out(formatJson({ plan: report, answer }));
  if (!answer.ok) {
    const code =
      answer.code === "stale-revision"
        ? EXIT_STALE_REVISION
        : answer.code === "not-leader" || answer.code === "waits"
          ? EXIT_UNREACHABLE
          : EXIT_REFUSED;
    throw new CliExit(code, answer.error ?? "the controller refused the apply");
  }
  if (flags.json === true) return;
  io.out(
    answer.unchanged === true
      ? `unchanged: the mesh serves this fleet already, as revision ${answer.revision}\n`
      : `applied: revision ${answer.revision} (was ${answer.previous}); ${answer.published ?? 0} node(s) got a new delivery` +
          `${(answer.minted ?? 0) > 0 ? `, ${answer.minted} password(s) minted` : ""}\n`,
  );
}

/** The kept revisions as `mesh fleet history` prints them, `*` marking the one served. */
export function formatHistory(history: readonly FleetRevision[], served: number): string {
  if (history.length === 0) return "No revision applied yet: mesh apply FILE stores the first.\n";
  const lines = ["  REV  WHEN                      WHO          VIA                SUMMARY"];
  for (const e of history) {
    lines.push(
      `${e.revision === served ? "*" : " "} ${String(e.revision).padStart(3)}  ${e.at.padEnd(24)}  ${e.who.padEnd(11)}  ${e.via.padEnd(17)}  ${e.summary}`,
    );
  }
  return `${lines.join("\n")}\n`;
}
