// The format of a state directory, in `<state>/format.json`: settled at every start of `mesh up`,
// `mesh controller` and `mesh agent`, before the bus or any agent starts. A state of an older
// format (0.1.0 wrote none) is copied into a backup beside the directory, said, and migrated; a
// state of a newer format is refused, naming both versions and what to do.
import { execFile } from "node:child_process";
import { chmod, mkdir, readdir, readFile, rename, stat, writeFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { MESH_RELEASE, releaseOfFormat, STATE_FORMAT, UNVERSIONED_FORMAT } from "@mesh/manifest/versions";
import { CliExit, EXIT_REFUSED } from "./exit-codes.ts";

/** The file, in a state directory, that names its format. */
export const STATE_FORMAT_FILE = "format.json";

/** What `format.json` holds. */
export interface StateFormatRecord {
  readonly format: number;
  /** The release of the mesh that last started on it. */
  readonly release: string;
  /** ISO 8601: when it was written. */
  readonly at: string;
  /** The format a start migrated it from, and the backup written first. */
  readonly migratedFrom?: { readonly format: number; readonly backup: string };
}

/** What a state directory is, by its format file or, without one, by what is in it. */
export type FoundFormat =
  | { readonly kind: "empty" }
  | { readonly kind: "format"; readonly format: number; readonly release?: string };

/** What `settleStateFormat` did. */
export type SettledFormat =
  | { readonly kind: "new" | "current" }
  | { readonly kind: "migrated"; readonly from: number; readonly backup: string };

/** What a state directory of a mesh holds once it has run: a mesh up's or controller's, or an agent's. */
const STATE_MARKS = ["controller", "bus", "operator.creds", "keys.json", "node.creds"];

/**
 * The format of the state in `dir`: the one its format file names, or `UNVERSIONED_FORMAT` (0.1.0)
 * when it has none but holds a mesh's state; `empty` when it holds none.
 * @throws CliExit (refused) when the format file is not one the mesh wrote.
 */
export async function readStateFormat(dir: string): Promise<FoundFormat> {
  const file = join(dir, STATE_FORMAT_FILE);
  const text = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return undefined;
    throw new CliExit(EXIT_REFUSED, `cannot read ${file}: ${err.message}`);
  });
  if (text === undefined) {
    const names = await readdir(dir).catch(() => [] as string[]);
    let nodes: string[] = [];
    if (names.includes("nodes")) nodes = await readdir(join(dir, "nodes")).catch(() => []);
    return names.some((n) => STATE_MARKS.includes(n)) || nodes.length > 0
      ? { kind: "format", format: UNVERSIONED_FORMAT }
      : { kind: "empty" };
  }
  let record: Partial<StateFormatRecord>;
  try {
    record = JSON.parse(text) as Partial<StateFormatRecord>;
  } catch {
    record = {};
  }
  if (typeof record.format !== "number" || !Number.isInteger(record.format) || record.format < 1)
    throw new CliExit(
      EXIT_REFUSED,
      `${file} does not name a state format (it should be JSON like {"format": ${STATE_FORMAT}}): ` +
        `nothing was started; put back the file the mesh wrote, or restore the state from a backup`,
    );
  return {
    kind: "format",
    format: record.format,
    ...(typeof record.release === "string" ? { release: record.release.slice(0, 64) } : {}),
  };
}

/** The message that refuses a state of `format`, newer than this mesh knows. */
export function newerStateMessage(dir: string, format: number, release: string | undefined): string {
  const by = release ?? releaseOfFormat(format);
  return (
    `the state in ${dir} is format ${format}${by === undefined ? "" : ` (written by mesh ${by})`}, and this ` +
    `mesh ${MESH_RELEASE} reads formats up to ${STATE_FORMAT}: nothing was started. Run mesh ` +
    `${by ?? "of the release that wrote it"} or later on it; to go back to ${MESH_RELEASE}, restore the backup ` +
    `that the upgrade wrote beside the state (docs/operating.md, "Upgrading")`
  );
}

/**
 * Settles the format of the state in `dir` before anything starts on it (the caller holds its lock,
 * or it is an agent's state, locked as the agent starts): an empty one is given this mesh's format;
 * an older one is copied to a backup beside `dir` (`<dir>.format-<N>-<time>.tar.gz`, 0600), then
 * migrated, and both are said with `say`; a newer one is refused.
 * @throws CliExit (refused) for a newer format, a damaged format file, or a backup that cannot be written.
 */
export async function settleStateFormat(dir: string, say: (line: string) => void): Promise<SettledFormat> {
  const found = await readStateFormat(dir);
  const now = new Date();
  if (found.kind === "empty") {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await writeRecord(dir, { format: STATE_FORMAT, release: MESH_RELEASE, at: now.toISOString() });
    return { kind: "new" };
  }
  if (found.format > STATE_FORMAT)
    throw new CliExit(EXIT_REFUSED, newerStateMessage(dir, found.format, found.release));
  if (found.format === STATE_FORMAT) {
    if (found.release !== MESH_RELEASE)
      await writeRecord(dir, { format: STATE_FORMAT, release: MESH_RELEASE, at: now.toISOString() });
    return { kind: "current" };
  }
  const from = found.format;
  const by = found.release ?? releaseOfFormat(from) ?? "?";
  const backup = await backUpBeside(dir, from, now);
  say(
    `the state in ${dir} is format ${from} (mesh ${by}); this mesh ${MESH_RELEASE} migrates it to format ` +
      `${STATE_FORMAT}. It was copied first, as it was, to ${backup} (0600): to go back to mesh ${by}, stop ` +
      `this mesh and unpack that file in place of the state (docs/operating.md, "Upgrading")`,
  );
  await migrate(dir, from);
  await writeRecord(dir, {
    format: STATE_FORMAT,
    release: MESH_RELEASE,
    at: new Date().toISOString(),
    migratedFrom: { format: from, backup },
  });
  say(`    the state in ${dir} is format ${STATE_FORMAT} now`);
  return { kind: "migrated", from, backup };
}

// Each step from one format to the next, run in order. Format 1 (0.1.0) to 2 changes no file of
// the directory: what 0.2.0 keeps beside (the mesh id, the cgroups' record, the HTTP tokens, the
// modules' users named with the mesh id) is made or moved by the start that follows, and the bus's
// buckets are migrated by the controller once the bus is up (`settleBusFormat`).
// Format 2 to 3 changes no file either: the modules' ledgers move, on the bus, from a stream and a
// bucket of each module's own into one of each they share; the controller copies them once the
// bus is up (`migrateLedgers`), after this backup (which holds the embedded bus's files).
const MIGRATIONS: Readonly<Record<number, (dir: string) => Promise<void>>> = {
  1: async () => {},
  2: async () => {},
};

async function migrate(dir: string, from: number): Promise<void> {
  for (let format = from; format < STATE_FORMAT; format++) await MIGRATIONS[format]?.(dir);
}

async function writeRecord(dir: string, record: StateFormatRecord): Promise<void> {
  const file = join(dir, STATE_FORMAT_FILE);
  await writeFile(`${file}.tmp`, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
  await rename(`${file}.tmp`, file);
}

/**
 * Copies the state in `dir` into `<dir>.format-<from>-<time>.tar.gz` beside it, 0600, with tar:
 * everything but the modules' homes (the apps' own data, which an upgrade does not touch), their
 * logs, sockets and the lock. Nothing runs on the state meanwhile (its bus has not started).
 * @throws CliExit (refused) when it cannot be written: nothing is migrated then.
 */
async function backUpBeside(dir: string, from: number, now: Date): Promise<string> {
  const stamp = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
  const file = join(dirname(dir), `${basename(dir)}.format-${from}-${stamp}.tar.gz`);
  try {
    // Made 0600 first: tar keeps the mode of a file it writes into.
    await writeFile(file, "", { mode: 0o600, flag: "wx" });
    await chmod(file, 0o600);
    await new Promise<void>((resolve, reject) => {
      execFile(
        "tar",
        [
          "--create",
          "--gzip",
          "--file",
          file,
          "--exclude=./nodes/*/modules/*/home",
          "--exclude=./nodes/*/modules/*/log",
          "--exclude=./nodes/*/modules/*/log.*",
          "--exclude=./modules/*/home",
          "--exclude=./modules/*/log",
          "--exclude=./modules/*/log.*",
          "--exclude=./lock",
          "--exclude=*.sock",
          "-C",
          dir,
          ".",
        ],
        { maxBuffer: 1024 * 1024 },
        (err, _stdout, stderr) => {
          // 1: a file changed as it was read (a module's file; the mesh is not running): kept.
          if (err !== null && (err as { code?: unknown }).code !== 1)
            reject(new Error(stderr.trim().split("\n").slice(-3).join("; ") || err.message));
          else resolve();
        },
      );
    });
    if ((await stat(file)).size === 0) throw new Error("tar wrote nothing");
  } catch (err) {
    const why =
      (err as NodeJS.ErrnoException).code === "ENOENT"
        ? "tar is not installed (the Debian package tar)"
        : (err as Error).message;
    throw new CliExit(
      EXIT_REFUSED,
      `the state in ${dir} is format ${from} and must be migrated, but its backup ${file} could not be ` +
        `written (${why}): nothing was migrated or started. Make room or fix the permissions of ` +
        `${dirname(dir)}, then start again`,
    );
  }
  return file;
}
