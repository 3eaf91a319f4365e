// `mesh plan [mesh.yaml]`: what applying a fleet file will do — consumers created, changed and
// retired (and which retirements wait for a person), passwords minted, modules started, stopped or
// moved, nodes added or removed — compared with what the running mesh serves. It touches nothing.
import { access } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import type { ComparedFleet, FleetPlanDiff, ModuleChange, ProviderPlan } from "@mesh/controller";
import { DEFAULT_MODULE_LIMITS, formatLimit, formatLimits, LIMIT_NAMES } from "@mesh/manifest/limit-values";
import { askController, busOverride, stateDirOf, withAskFlags } from "./controller-request.ts";
import { NO_PAINT, paintFor, type Paint } from "./colour.ts";
import { CliExit, EXIT_PLAN_CHANGES, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";

const HELP = `
A fleet file saved where the mesh reads it is applied at once: plan a copy, then move it into place.

With --json, a refused fleet file prints {"refused": true, "problems": [...]} (and exits 2).

Examples:
  $ cp mesh.yaml mesh.next.yaml && $EDITOR mesh.next.yaml
  $ mesh plan mesh.next.yaml
  $ mv mesh.next.yaml mesh.yaml        # the controller applies it now
  $ mesh plan mesh.next.yaml --json --detailed-exitcode   # in CI: exit ${EXIT_PLAN_CHANGES} when something would change`;

/** What the plan was compared with. */
export type PlanBaseline =
  | {
      readonly kind: "mesh";
      /** The mesh's state directory. */
      readonly state: string;
      /** The fleet file the mesh serves, and when it read it. */
      readonly fleetFile: string;
      readonly readAt: string;
      /** The revision stored in the mesh (0: none applied yet); absent from an older controller. */
      readonly revision?: number;
    }
  | { readonly kind: "empty"; readonly why: string };

/** What `mesh plan --json` prints: the comparison, and what it compared. */
export interface PlanReport extends FleetPlanDiff {
  /** The fleet file planned. */
  readonly fleetFile: string;
  readonly against: PlanBaseline;
}

interface PlanFlags {
  readonly state?: string;
  readonly json?: boolean;
  readonly detailedExitcode?: boolean;
  readonly empty?: boolean;
  readonly bus?: string[];
  readonly busCa?: string;
}

/** Adds `mesh plan` to `program`. */
export function addPlanCommand(program: Command, io: CliIo): void {
  withAskFlags(program.command("plan"))
    .summary("what applying a fleet file will do, touching nothing")
    .description(
      "say what applying a fleet file will do — consumers created, changed, retired (and which wait for a person), modules moved — touching nothing",
    )
    .argument("[fleet]", "the fleet file to plan", "mesh.yaml")
    .option("--json", "print the plan as JSON, for scripts")
    .option(
      "--detailed-exitcode",
      `exit ${EXIT_PLAN_CHANGES} when something would change, 0 when nothing would (default: 0 either way)`,
    )
    .option("--empty", "plan against an empty mesh without asking a running one")
    .addHelpText("after", HELP)
    .action(async (fleet: string, flags: PlanFlags) => {
      const report = await planFleet(resolve(fleet), stateDirOf(flags.state, io), flags, io);
      io.out(flags.json === true ? formatJson(report) : formatPlan(report, paintFor(io, "out")));
      await warnEndpointDisagreements(resolve(fleet), io);
      if (flags.detailedExitcode === true && report.changed) throw new CliExit(EXIT_PLAN_CHANGES, "");
    });
}

// Where this shell can read a provider's admin URL, a consumer told another address than it points
// at is said on standard error, naming both (standard output stays the plan).
async function warnEndpointDisagreements(fleetFile: string, io: CliIo): Promise<void> {
  const { endpointDisagreements, loadFleet, loadFleetManifests } = await import("@mesh/manifest");
  const { adminUrlsReadable } = await import("./check-command.ts");
  const fleet = await loadFleet(fleetFile);
  const manifests = await loadFleetManifests(fleet);
  const urls = await adminUrlsReadable(fleet, io.env);
  const paint = paintFor(io, "err");
  for (const d of endpointDisagreements(fleet, manifests, (m) => urls.get(m))) {
    io.err(
      d.endpointWritten
        ? `${paint.yellow("warning:")} ${fleetFile}:${d.line ?? 1}: ${d.provider}'s ${d.interface} consumers are told ` +
            `${d.fleetSays} (its endpoint:), while its admin URL points at ${d.providerServes}\n`
        : `note: ${fleetFile}:${d.line ?? 1}: ${d.provider} has no endpoint:, so its ${d.interface} consumers are sent ` +
            `where its admin URL points, ${d.providerServes}, once it runs (not its manifest's default ${d.fleetSays})\n`,
    );
  }
}

async function planFleet(fleetFile: string, state: string, flags: PlanFlags, io: CliIo): Promise<PlanReport> {
  const { diffFleetPlans, EMPTY_FLEET, loadFleetPlan } = await import("@mesh/controller");
  const { formatProblem, ProblemsError } = await import("@mesh/manifest");
  let next: ComparedFleet;
  try {
    next = await loadFleetPlan(fleetFile);
  } catch (err) {
    if (!(err instanceof ProblemsError)) throw err;
    if (flags.json === true) {
      io.out(formatJson({ fleetFile, refused: true, problems: err.problems }));
    }
    throw new CliExit(
      EXIT_USAGE,
      `the fleet file ${fleetFile} is refused, so applying it would change nothing (the mesh keeps ` +
        `serving what it serves); fix these and plan again:\n${err.problems.map(formatProblem).join("\n")}`,
    );
  }
  const served = flags.empty === true ? undefined : await askServed(state, io, flags);
  const against: PlanBaseline =
    served !== undefined
      ? {
          kind: "mesh",
          state,
          fleetFile: served.fleet.fleetFile,
          readAt: served.fleet.readAt,
          ...(served.revision !== undefined ? { revision: served.revision } : {}),
        }
      : {
          kind: "empty",
          why:
            flags.empty === true
              ? "--empty was given"
              : `no mesh has run with state in ${state} (start one with \`mesh up\`, or pass --state)`,
        };
  const diff = diffFleetPlans(served?.fleet ?? EMPTY_FLEET, next, {
    keptPasswords: served?.keptPasswords ?? [],
  });
  return { fleetFile, against, ...diff };
}

/** What the running mesh serves, as `mesh plan` and `mesh apply` compare with it. */
export interface Served {
  readonly fleet: ComparedFleet & { readonly fleetFile: string; readonly readAt: string };
  readonly keptPasswords: readonly string[];
  /** The revision stored (absent from an older controller). */
  readonly revision?: number;
}

/**
 * What the mesh whose state is in `state` serves, or undefined when no mesh has run there.
 * @throws CliExit (EXIT_UNREACHABLE) when one has but does not answer; (EXIT_REFUSED) when its
 * answer cannot be used.
 */
export async function askServed(
  state: string,
  io: CliIo,
  flags: { readonly bus?: string[]; readonly busCa?: string },
): Promise<Served | undefined> {
  const hasRun = await access(join(state, "operator.creds")).then(
    () => true,
    () => false,
  );
  if (!hasRun) return undefined;
  const { parseStoredFleet, SERVED_FLEET_SUBJECT } = await import("@mesh/controller");
  let answer: { ok?: unknown; fleet?: unknown; keptPasswords?: unknown; error?: unknown; revision?: unknown };
  try {
    answer = await askController(state, SERVED_FLEET_SUBJECT, "{}", {
      name: "mesh plan",
      ...busOverride(flags),
      // The controller answers between changes: a large fleet's change in progress takes seconds.
      timeoutMs: 30_000,
      io,
      waiting: `asking the mesh in ${state} what it serves`,
    });
  } catch (err) {
    if (err instanceof CliExit) {
      throw new CliExit(
        err.code,
        `${err.message}\nmesh plan compares with what the running mesh serves; pass --empty to plan against an empty mesh instead`,
      );
    }
    throw err;
  }
  const fleet = parseStoredFleet(answer?.fleet);
  const kept = answer?.keptPasswords;
  if (answer?.ok !== true || fleet === undefined || !Array.isArray(kept)) {
    throw new Error(
      `the controller of the mesh in ${state} did not answer with the fleet it serves` +
        `${typeof answer?.error === "string" ? ` (${answer.error})` : ""}: restart \`mesh up\` with this version of mesh`,
    );
  }
  return {
    fleet,
    keptPasswords: kept.filter((k): k is string => typeof k === "string"),
    ...(typeof answer.revision === "number" ? { revision: answer.revision } : {}),
  };
}

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;
const shown = (value: unknown): string => (value === null ? "none" : JSON.stringify(value));

function providerLines(p: ProviderPlan, paint: Paint): string[] {
  const where = p.change === "moved" ? `moves ${p.previousNode ?? "?"} → ${p.node}` : `on ${p.node}`;
  const state =
    p.change === "new"
      ? "new: starts"
      : p.change === "removed"
        ? "leaves the fleet: stops"
        : `serves ${plural(p.holds, "consumer")} now`;
  const lines = [`${p.provider} (${p.interface}, ${where}): ${state}`];
  const width = Math.max(
    0,
    ...[...p.creates, ...p.changes, ...p.retires, ...p.leftInBackend].map((c) => c.login.length),
  );
  const login = (s: string): string => s.padEnd(width);
  if (p.endpoint !== null) {
    lines.push(
      `  ~ endpoint ${p.endpoint.from ?? "none"} → ${p.endpoint.to ?? "none"} (every consumer's credential file changes)`,
    );
  }
  for (const c of p.creates) {
    const password =
      c.password === "mint" ? "a new password is minted" : "the password the mesh keeps for it comes back";
    lines.push(`  ${paint.green("+")} ${login(c.login)}  ${c.consumer} on ${c.node}: created; ${password}`);
  }
  for (const c of p.changes) {
    const what = c.changes.map((f) =>
      f.what === "node"
        ? `runs on ${String(f.to)}, not ${String(f.from)} (its credential and password files move)`
        : f.what === "provider-node"
          ? `its provider runs on ${String(f.to)}, not ${String(f.from)}`
          : f.what === "address"
            ? `its node's address ${shown(f.from)} → ${shown(f.to)}`
            : `${f.what} ${shown(f.from)} → ${shown(f.to)}`,
    );
    const backend = c.reapplied
      ? "applied again in the backend, same password"
      : "nothing changes in the backend";
    lines.push(`  ${paint.yellow("~")} ${login(c.login)}  ${c.consumer}: ${what.join("; ")}; ${backend}`);
  }
  const r = p.retirement;
  for (const c of p.retires) {
    const outcome =
      r?.needsApproval === true
        ? "no longer asked for; stays active until a person approves its retirement"
        : `retired after ${r?.limits.stablePasses ?? "?"} passes unasked: access off, data kept, marked to delete`;
    lines.push(`  ${paint.red("-")} ${login(c.login)}  ${c.consumer} on ${c.node}: ${outcome}`);
  }
  if (r !== null) {
    lines.push(
      r.needsApproval
        ? `    ${paint.yellow("WAITS FOR APPROVAL")}: ${r.reason ?? "past the bound"}; \`retire list\` on ${p.provider} will show the set, \`retire approve\` retires it`
        : `    retires on its own: ${r.logins.length} of ${r.held} held is within the bound (more than ${r.limits.retireAtOnce} at once, or more than ${Math.round(r.limits.retireFraction * 100)}% of those held, waits for a person)`,
    );
  }
  for (const c of p.leftInBackend) {
    lines.push(
      `  ! ${login(c.login)}  ${c.consumer}: not retired — its provider stops, so its login and data stay in the backend as they are`,
    );
  }
  return lines;
}

// One module's change: what happens to it, and the limits it runs under (all of them as it
// starts, those that change otherwise).
function moduleLine(m: ModuleChange, name: string): string {
  const limits = m.limits;
  const changed =
    limits?.from == null
      ? ""
      : LIMIT_NAMES.filter((k) => limits.from?.[k] !== limits.to[k])
          .map(
            (k) =>
              `${formatLimit(k, limits.from?.[k] ?? null)} → ${formatLimit(k, limits.to[k]).replace(`${k} `, "")}`,
          )
          .join(", ");
  switch (m.change) {
    case "start":
      return `  + ${name}  starts on ${m.node}${limits === undefined ? "" : ` (limits: ${formatLimits(limits.to)})`}`;
    case "stop":
      return `  - ${name}  stops on ${m.node}`;
    case "move":
      return (
        `  > ${name}  moves ${m.previousNode ?? "?"} → ${m.node} (stops on ${m.previousNode ?? "?"}, starts on ${m.node}` +
        `${limits === undefined ? "" : `; limits: ${formatLimits(limits.to)}`})`
      );
    case "limits":
      return `  ~ ${name}  runs on under new limits: ${changed} (set on its cgroup as it runs, no restart)`;
    case "restart":
      return (
        `  ~ ${name}  restarts on ${m.node} with ${m.manifest}` +
        (m.metrics === undefined
          ? ""
          : ` (metrics ${m.metrics.from ?? "a free port"} → ${m.metrics.to ?? "a free port"})`) +
        (changed === "" ? "" : ` (limits ${changed})`)
      );
  }
}

/** The one-line summary of a plan. */
export function summarizePlan(diff: FleetPlanDiff): string {
  const s = diff.summary;
  if (!diff.changed) return "No changes.";
  const parts = [
    `${plural(s.create, "consumer")} to create (${plural(s.mint, "password")} to mint)`,
    `${s.change} to change`,
    `${s.retire} to retire${s.retire > 0 ? ` (${s.awaitingApproval} waiting for approval)` : ""}`,
  ];
  if (s.leftInBackend > 0) parts.push(`${s.leftInBackend} left in the backend`);
  const modules = [
    s.moduleStart > 0 ? `${s.moduleStart} to start` : "",
    s.moduleStop > 0 ? `${s.moduleStop} to stop` : "",
    s.moduleMove > 0 ? `${s.moduleMove} to move` : "",
    s.moduleRestart > 0 ? `${s.moduleRestart} to restart` : "",
    s.moduleLimits > 0 ? `${s.moduleLimits} with new limits` : "",
  ].filter((m) => m !== "");
  const nodes = [
    s.nodesAdded > 0 ? `${s.nodesAdded} added` : "",
    s.nodesRemoved > 0 ? `${s.nodesRemoved} removed` : "",
  ].filter((m) => m !== "");
  return (
    `Plan: ${parts.join(", ")}; modules: ${modules.length > 0 ? modules.join(", ") : "no change"}; ` +
    `nodes: ${nodes.length > 0 ? nodes.join(", ") : "no change"}.`
  );
}

/**
 * A plan as a person reads it: grouped by provider, then modules and nodes, then the summary.
 * `paint` colours the marks: + green, ~ yellow, - red, and what waits for approval.
 */
export function formatPlan(report: PlanReport, paint: Paint = NO_PAINT, applying = false): string {
  const lines: string[] = [];
  const against = report.against;
  lines.push(`Plan for ${report.fleetFile}`);
  if (against.kind === "mesh") {
    lines.push(
      `compared with what the mesh in ${against.state} serves (` +
        (against.revision !== undefined ? `revision ${against.revision}, ` : "") +
        `${against.fleetFile}, read ${against.readAt})`,
    );
  } else {
    lines.push(`compared with an empty mesh, so everything is new: ${against.why}`);
  }
  if (!applying) lines.push("Nothing has been changed.");
  lines.push("");
  if (!report.changed && applying) {
    lines.push("No changes: the mesh serves this fleet already.");
    return `${lines.join("\n")}\n`;
  }
  if (!report.changed) {
    const same = against.kind === "mesh" && against.fleetFile === report.fleetFile;
    lines.push(
      same
        ? "No changes: the mesh already serves this file (a save on the machine of `mesh up FILE` applies it: plan a copy before saving it)."
        : "No changes: applying this fleet file would change nothing.",
    );
    return `${lines.join("\n")}\n`;
  }
  for (const p of report.providers) lines.push(...providerLines(p, paint), "");
  if (report.modules.length > 0) {
    lines.push("modules");
    const width = Math.max(...report.modules.map((m) => m.module.length));
    for (const m of report.modules) {
      const name = m.module.padEnd(width);
      lines.push(moduleLine(m, name));
    }
    if (report.modules.some((m) => m.change === "start")) {
      lines.push(
        `  (limits the fleet file leaves out take the defaults: ${formatLimits(DEFAULT_MODULE_LIMITS)}; none is no bound)`,
      );
    }
    lines.push("");
  }
  if (report.nodes.length > 0) {
    lines.push("nodes");
    for (const n of report.nodes) {
      lines.push(
        n.change === "add"
          ? `  + ${n.node}  added: its agent joins with the token \`mesh up\` writes for it`
          : `  - ${n.node}  removed: its agent is given nothing to run and stops its modules`,
      );
    }
    lines.push("");
  }
  if (!applying && against.kind === "mesh") {
    lines.push(
      `To apply it: mesh apply ${report.fleetFile}` +
        (against.revision !== undefined ? ` --expect-revision ${against.revision}` : "") +
        ` (from any machine with the operator's credential).`,
    );
  }
  lines.push(summarizePlan(report));
  return `${lines.join("\n")}\n`;
}
