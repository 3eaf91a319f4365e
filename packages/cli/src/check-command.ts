// `mesh check [DIR...]`: lints modules' manifests against their code and against each other, for
// a person at a terminal (one line per finding) and for CI (the exit code, or --json).
import { readdir, readFile } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import type { Command } from "commander";
import type { CheckTarget, Finding, Fleet } from "@mesh/manifest";
import { paintFor } from "./colour.ts";
import { CliExit, EXIT_REFUSED, EXIT_USAGE } from "./exit-codes.ts";
import { formatJson } from "./format.ts";
import type { CliIo } from "./io.ts";
import { withProgress } from "./progress.ts";

/** The modules `mesh check` looks at when none are named: the subdirectories of `dir` with a module.json. */
async function moduleDirsUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const found: string[] = [];
  for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    if (!e.isDirectory() || e.name === "node_modules" || e.name.startsWith(".")) continue;
    const inner = await readdir(join(dir, e.name)).catch(() => [] as string[]);
    if (inner.includes("module.json")) found.push(join(dir, e.name));
  }
  return found;
}

/** The fleet's modules, each under its fleet name, which is what the mesh derives subjects from. */
async function fleetTargets(file: string): Promise<CheckTarget[]> {
  const { FleetError, loadFleet } = await import("@mesh/manifest");
  try {
    const fleet = await loadFleet(file);
    return [...fleet.modules.values()].map((m) => ({
      dir: dirname(m.manifest),
      manifest: m.manifest,
      name: m.name,
    }));
  } catch (err) {
    if (err instanceof FleetError) throw new CliExit(EXIT_USAGE, err.message);
    throw err;
  }
}

/**
 * What `checkFleet` says of the fleet file, as findings: the same refusals `mesh plan` and the
 * controller make (two consumers asking one provider for the same database, say). A manifest that
 * cannot be read is left to `checkModules`, which reports it.
 */
async function fleetFindings(
  file: string,
  env: Readonly<Record<string, string | undefined>>,
): Promise<Finding[]> {
  const { checkFleet, endpointDisagreements, loadFleet, loadFleetManifests, ManifestError } =
    await import("@mesh/manifest");
  const fleet = await loadFleet(file);
  const manifests = await loadFleetManifests(fleet).catch((err: unknown) => {
    if (err instanceof ManifestError) return undefined;
    throw err;
  });
  if (manifests === undefined) return [];
  const problems: Finding[] = checkFleet(fleet, manifests).map((p) => ({
    kind: "fleet",
    severity: "error",
    file: p.file,
    line: p.line ?? 1,
    message: p.field === "(file)" ? p.message : `${p.field} ${p.message}`,
    fix: p.fix,
  }));
  const urls = await adminUrlsReadable(fleet, env);
  for (const d of endpointDisagreements(fleet, manifests, (m) => urls.get(m))) {
    const serves = d.providerServes;
    problems.push({
      kind: "fleet",
      // Said, not refused: without endpoint: consumers are sent where the running provider reports
      // it serves (its admin URL); a written one may be a public address that reaches the same server.
      severity: "warning",
      file: fleet.file,
      line: d.line ?? 1,
      message: d.endpointWritten
        ? `modules.${d.provider} tells its ${d.interface} consumers to connect to ${d.fleetSays} (its endpoint:), ` +
          `while its admin URL points at ${serves}, where it makes their logins`
        : `modules.${d.provider} has no endpoint:, so its ${d.interface} consumers are sent where its admin URL points, ` +
          `${serves}, as the running provider reports it (not its manifest's default ${d.fleetSays})`,
      fix: d.endpointWritten
        ? `correct endpoint: under modules.${d.provider} if ${d.fleetSays} is not how consumers reach ${serves}`
        : `nothing to do if consumers reach ${serves}; else write \`endpoint: { host: HOST, port: PORT }\` under modules.${d.provider}`,
    });
  }
  return problems;
}

/**
 * The admin URLs of the fleet's providers that this shell can read: a variable of its own
 * environment, or a file it may read. What it cannot read is left out (mesh check cannot know).
 */
export async function adminUrlsReadable(
  fleet: Fleet,
  env: Readonly<Record<string, string | undefined>>,
): Promise<Map<string, string>> {
  const urls = new Map<string, string>();
  for (const m of fleet.modules.values()) {
    if (m.admin === undefined) continue;
    if ("env" in m.admin) {
      const value = env[m.admin.env];
      if (value !== undefined && value.trim() !== "") urls.set(m.name, value);
      continue;
    }
    const text = await readFile(m.admin.file, "utf8").catch(() => undefined);
    if (text !== undefined && text.length <= 4096 && text.trim() !== "") urls.set(m.name, text.trim());
  }
  return urls;
}

/** Adds `mesh check` to `program`. */
export function addCheckCommand(program: Command, io: CliIo): void {
  program
    .command("check")
    .summary("lint modules' events: manifests against code, for CI")
    .description(
      "check modules' events: manifests against their code, and subscriptions against what is emitted",
    )
    .argument(
      "[dir...]",
      "module directories (default: the fleet's modules, else ./*/ holding a module.json)",
    )
    .option(
      "--fleet <file>",
      "check every module of this fleet file, each under its fleet name, and the fleet as mesh plan does",
    )
    .option("--json", "print the findings as JSON, for scripts")
    .addHelpText(
      "after",
      `
Examples:
  $ mesh check --fleet examples/fleet/mesh.yaml
  $ mesh check examples/fleet/notes examples/fleet/counter --json`,
    )
    .action(async (dirs: string[], flags: { fleet?: string; json?: boolean }) => {
      // Loaded only when the command runs, so building the program does not pay for the parsers.
      const { checkModules, formatFinding } = await import("@mesh/manifest");
      if (flags.fleet !== undefined && dirs.length > 0) {
        throw new CliExit(EXIT_USAGE, "give either --fleet or module directories, not both");
      }
      const targets: (string | CheckTarget)[] =
        flags.fleet !== undefined
          ? await fleetTargets(flags.fleet)
          : dirs.length > 0
            ? dirs
            : await moduleDirsUnder(process.cwd()).then((found) =>
                found.map((d) => relative(process.cwd(), d)),
              );
      if (targets.length === 0) {
        throw new CliExit(
          EXIT_USAGE,
          "no modules to check: name module directories, give --fleet mesh.yaml, or run it in a directory whose subdirectories hold module.json files",
        );
      }
      const plural = (n: number, word: string): string => `${n} ${word}${n === 1 ? "" : "s"}`;
      const fleet = flags.fleet;
      const findings = await withProgress(io, `checking ${plural(targets.length, "module")}`, async () => [
        ...(fleet === undefined ? [] : await fleetFindings(fleet, io.env)),
        ...(await checkModules(targets)),
      ]);
      const errors = findings.filter((f) => f.severity === "error").length;
      const warnings = findings.length - errors;
      if (flags.json === true) {
        io.out(formatJson({ modules: targets.length, errors, warnings, findings }));
      } else {
        const paint = paintFor(io, "out");
        for (const f of findings) {
          const line = formatFinding(f);
          const severity = `: ${f.severity}: `;
          const colour = f.severity === "error" ? paint.red : paint.yellow;
          io.out(`${line.replace(severity, `: ${colour(f.severity)}: `)}\n`);
        }
        const errorCount = plural(errors, "error");
        io.out(
          `${plural(targets.length, "module")} checked: ${errors > 0 ? paint.red(errorCount) : errorCount}, ${plural(warnings, "warning")}\n`,
        );
      }
      if (errors > 0) throw new CliExit(EXIT_REFUSED, "");
    });
}
