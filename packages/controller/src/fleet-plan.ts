// Reading the fleet is all-or-nothing: the fleet file, every manifest, and the check that they hold
// together. Any problem refuses the whole reading, so a typo can never shrink the plan (and have
// providers retire consumers nobody meant to remove).
import type { RotationPeriods } from "./rotation-schedule.ts";
import { lstatSync, statSync } from "node:fs";
import { resolve } from "node:path";
import {
  compilePermissions,
  derivePlan,
  loadFleetManifests,
  parseFleet,
  readFleetText,
  readManifestText,
  ManifestError,
  ProblemsError,
  seatHolders,
  type Manifest,
  type ModulePermissions,
  type Plan,
  type Problem,
} from "@mesh/manifest";
import type { DeliveredModule } from "@mesh/manifest";

/** A fleet that was read whole and holds together: what the controller serves. */
export interface FleetPlan {
  /** Absolute path of mesh.yaml. */
  readonly fleetFile: string;
  readonly plan: Plan;
  /** Every node of the fleet file, by name. */
  readonly nodes: readonly string[];
  /** Every module with its node, by name. */
  readonly modules: readonly (DeliveredModule & { readonly node: string })[];
  /** ISO 8601: when it was read. */
  readonly readAt: string;
  /**
   * Each module's bus permissions, compiled from its manifest (it holds the seats its manifest
   * declares). Absent in a fleet stored before they were kept: no module credential is issued
   * from such a fleet until the fleet file is read again.
   */
  readonly permissions?: Readonly<Record<string, ModulePermissions>>;
  /**
   * What it was read from: the fleet file's text and every manifest's, inlined, so that any
   * controller derives the same fleet from the bus without a file of its own (absent in a fleet
   * stored before they were kept).
   */
  readonly source?: FleetSource;
  /** How often the controller rotates consumers' passwords (`rotate:` in the fleet file); absent: never by itself. */
  readonly rotation?: RotationPeriods;
}

/** A fleet as applied: the fleet file's text and the text of every manifest it names, by path. */
export interface FleetSource {
  /** Absolute path of the fleet file where it was read (manifest paths are resolved against it). */
  readonly fleetFile: string;
  readonly fleetText: string;
  /** Each manifest's text, by the absolute path the fleet names it at. */
  readonly manifests: Readonly<Record<string, string>>;
}

/** The fleet file (or a manifest it names) was refused; what was served before stays served. */
export class FleetRefusedError extends Error {
  override name = "FleetRefusedError";
  constructor(
    readonly fleetFile: string,
    readonly problems: readonly Problem[],
    keeping: string,
    options?: { cause?: unknown },
  ) {
    const detail =
      options?.cause instanceof ProblemsError
        ? options.cause.message
        : options?.cause instanceof Error
          ? options.cause.message
          : String(options?.cause);
    super(
      `the fleet file ${fleetFile} was refused, and ${keeping}; fix what follows and save it again:\n${detail}`,
      options,
    );
  }
}

/**
 * Reads the fleet file at `fleetFile`, every manifest it names, checks them together and derives
 * the plan. Read again with the fleet file and every manifest as they were, it is the fleet read
 * before (with a new `readAt`), without parsing them again, unless `options.reuse` is false.
 * @throws FleetError (the fleet file), ManifestError (a manifest) or FleetCheckError (they do not
 * hold together), each listing every problem with its file, line, field and fix.
 */
export async function loadFleetPlan(
  fleetFile: string,
  options: { readonly reuse?: boolean } = {},
): Promise<FleetPlan> {
  const file = resolve(fleetFile);
  const last = options.reuse === false ? undefined : lastReads.get(file);
  if (last !== undefined && (await unchangedSince(last)))
    return { ...last.read, readAt: new Date().toISOString() };
  // Each file's stamp is taken before its text is read: a change after the stamp shows in the next one.
  const stamps = new Map<string, Stamp | undefined>();
  stamps.set(file, stampOf(file));
  const fleetText = await readFleetText(file);
  // Every manifest's text as read now, each file read once (to compare, then to parse).
  const texts = new Map<string, string>();
  const readText = async (path: string): Promise<string> => {
    const kept = texts.get(path);
    if (kept !== undefined) return kept;
    stamps.set(path, stampOf(path));
    const text = await readManifestText(path);
    texts.set(path, text);
    return text;
  };
  if (last !== undefined && last.fleetText === fleetText && (await sameTexts(last.manifests, readText))) {
    lastReads.set(file, { ...last, stamps });
    return { ...last.read, readAt: new Date().toISOString() };
  }
  lastReads.delete(file);
  const read = await derive(file, fleetText, readText);
  const source: FleetSource = {
    fleetFile: file,
    fleetText,
    manifests: Object.fromEntries([...texts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
  };
  const withSource: FleetPlan = { ...read, source };
  lastReads.set(file, { file, fleetText, manifests: texts, read: withSource, stamps });
  return withSource;
}

/**
 * The fleet `source` makes, derived as `loadFleetPlan` derives it from files, reading nothing: a
 * manifest the source does not hold is a problem of the fleet, as a missing file is.
 * @throws FleetError, ManifestError or FleetCheckError, as `loadFleetPlan`.
 */
export async function fleetPlanOf(source: FleetSource): Promise<FleetPlan> {
  const readText = (path: string): Promise<string> => {
    const text = Object.hasOwn(source.manifests, path) ? source.manifests[path] : undefined;
    if (text !== undefined) return Promise.resolve(text);
    return Promise.reject(
      new ManifestError([
        {
          code: "unreadable",
          file: path,
          field: "(file)",
          message: "is not among the manifests applied with the fleet",
          fix: "apply the fleet with mesh apply from a machine that holds every manifest it names",
        },
      ]),
    );
  };
  const read = await derive(source.fleetFile, source.fleetText, readText);
  return { ...read, source };
}

async function derive(
  file: string,
  fleetText: string,
  readText: (path: string) => Promise<string>,
): Promise<FleetPlan> {
  const fleet = parseFleet(fleetText, file);
  const manifests = await loadFleetManifests(fleet, readText);
  const plan = derivePlan(fleet, manifests);
  const permissions = modulePermissions(manifests);
  const modules = [...fleet.modules.values()]
    .map((m) => ({
      name: m.name,
      node: m.node,
      manifest: resolve(m.manifest),
      ...(m.metrics === undefined ? {} : { metrics: m.metrics }),
      ...(m.env === undefined ? {} : { env: m.env }),
      ...(m.admin === undefined ? {} : { admin: m.admin }),
      ...(m.limits === undefined ? {} : { limits: m.limits }),
    }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const rotateModules = Object.fromEntries(
    [...fleet.modules.values()].flatMap((m) => (m.rotate === undefined ? [] : [[m.name, { ...m.rotate }]])),
  );
  const rotation: RotationPeriods = {
    ...(fleet.rotateEvery === undefined ? {} : { every: fleet.rotateEvery }),
    ...(Object.keys(rotateModules).length === 0 ? {} : { modules: rotateModules }),
  };
  return {
    fleetFile: file,
    plan,
    nodes: [...fleet.nodes.keys()].sort(),
    modules,
    readAt: new Date().toISOString(),
    permissions,
    ...(Object.keys(rotation).length === 0 ? {} : { rotation }),
  };
}

// The last fleet read whole from each fleet file, with the texts it was read from. Reading is pure:
// with the fleet file and every manifest as they were, the fleet is the one read then, and parsing
// them again (most of a reload's cost at thousands of modules) is skipped. Any text that differs,
// or any file that cannot be read now, reads everything again (and says what is wrong).
/** What a fleet file was last read as: its text, its manifests' texts, the fleet, each file's stamp. */
interface LastRead {
  readonly file: string;
  readonly fleetText: string;
  readonly manifests: ReadonlyMap<string, string>;
  readonly read: FleetPlan;
  /** Each file's stamp, taken before its text was read (undefined: it could not be taken). */
  readonly stamps: Map<string, Stamp | undefined>;
}

const lastReads = new Map<string, LastRead>();

/**
 * What the file system says of a file without reading it: which file it is (device, inode), its
 * size, and when it or its inode last changed. A write, a rename over it, a chmod or a link all
 * change its ctime, which no program can set back (unlike its mtime); when the path is a symbolic
 * link, both the link and what it points at count.
 */
interface Stamp {
  readonly key: string;
  /** The newest ctime among the link and its target, in nanoseconds since the epoch. */
  readonly changedNs: bigint;
  /** When the stamp was taken, in nanoseconds since the epoch. */
  readonly takenNs: bigint;
}

/**
 * A file changed within this long before its stamp was taken may change again within the same
 * tick of a coarse clock (file systems keep ctime from nanoseconds to seconds): its stamp is not
 * trusted, and its text is read and compared instead.
 */
const STAMP_SETTLED_NS = 2_000_000_000n;

// Synchronous: a stat answered from the inode cache takes microseconds, and ten thousand of them
// through the thread pool cost more in queueing than in the calls.
function stampOf(path: string): Stamp | undefined {
  try {
    const takenNs = BigInt(Date.now()) * 1_000_000n;
    const link = lstatSync(path, { bigint: true });
    const target = link.isSymbolicLink() ? statSync(path, { bigint: true }) : link;
    const key = [
      link.dev,
      link.ino,
      link.ctimeNs,
      target.dev,
      target.ino,
      target.size,
      target.mtimeNs,
      target.ctimeNs,
    ].join(":");
    const changedNs = link.ctimeNs > target.ctimeNs ? link.ctimeNs : target.ctimeNs;
    return { key, changedNs, takenNs };
  } catch {
    return undefined;
  }
}

/** How many files are stamped between two turns of the event loop. */
const STAMPED_AT_ONCE = 2_000;

/**
 * Whether the fleet file and every manifest of `last` are as they were read. A file whose stamp is
 * the same as when it was read, and was settled then, is not read again; any other is read and its
 * text compared, and when it is the same its new stamp is kept for the next time. A manifest the
 * fleet file no longer names cannot matter: the fleet file's own text would differ.
 */
async function unchangedSince(last: LastRead): Promise<boolean> {
  const toRead: [path: string, text: string, stamp: Stamp | undefined][] = [];
  const files: [string, string][] = [[last.file, last.fleetText], ...last.manifests];
  for (let from = 0; from < files.length; from += STAMPED_AT_ONCE) {
    if (from > 0) await new Promise((r) => setImmediate(r));
    for (const [path, text] of files.slice(from, from + STAMPED_AT_ONCE)) {
      const then = last.stamps.get(path);
      const now = stampOf(path);
      const settled = then !== undefined && then.changedNs + STAMP_SETTLED_NS <= then.takenNs;
      if (!settled || now === undefined || now.key !== then.key) toRead.push([path, text, now]);
    }
  }
  const same = await Promise.all(
    toRead.map(([path, text]) =>
      (path === last.file ? readFleetText(path) : readManifestText(path)).then(
        (now) => now === text,
        () => false,
      ),
    ),
  );
  if (!same.every(Boolean)) return false;
  for (const [path, , stamp] of toRead) last.stamps.set(path, stamp);
  return true;
}

async function sameTexts(
  texts: ReadonlyMap<string, string>,
  readText: (path: string) => Promise<string>,
): Promise<boolean> {
  const same = await Promise.all(
    [...texts].map(([path, text]) =>
      readText(path).then(
        (now) => now === text,
        () => false,
      ),
    ),
  );
  return same.every(Boolean);
}

/**
 * Every module's bus permissions: `compilePermissions` of its manifest, holding the seats its
 * manifest declares, with every seat of the fleet known.
 * @throws SeatConflictError when two modules declare one seat, or a seat has a module's name.
 */
export function modulePermissions(
  manifests: ReadonlyMap<string, Manifest>,
): Record<string, ModulePermissions> {
  const seats = new Set(seatHolders(manifests).keys());
  const out: Record<string, ModulePermissions> = {};
  for (const [module, manifest] of manifests) {
    out[module] = compilePermissions(manifest, module, manifest.seats, seats);
  }
  return out;
}
