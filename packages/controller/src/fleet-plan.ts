// Reading the fleet is all-or-nothing: the fleet file, every manifest, and the check that they hold
// together. Any problem refuses the whole reading, so a typo can never shrink the plan (and have
// providers retire consumers nobody meant to remove).
import type { RotationPeriods } from "./rotation-schedule.ts";
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
  const fleetText = await readFleetText(file);
  // Every manifest's text as read now, each file read once (to compare, then to parse).
  const texts = new Map<string, string>();
  const readText = async (path: string): Promise<string> => {
    const text = texts.get(path) ?? (await readManifestText(path));
    texts.set(path, text);
    return text;
  };
  const last = options.reuse === false ? undefined : lastReads.get(file);
  if (last !== undefined && last.fleetText === fleetText && (await sameTexts(last.manifests, readText)))
    return { ...last.read, readAt: new Date().toISOString() };
  lastReads.delete(file);
  const read = await derive(file, fleetText, readText);
  const source: FleetSource = {
    fleetFile: file,
    fleetText,
    manifests: Object.fromEntries([...texts].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
  };
  const withSource: FleetPlan = { ...read, source };
  lastReads.set(file, { fleetText, manifests: texts, read: withSource });
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
const lastReads = new Map<
  string,
  { readonly fleetText: string; readonly manifests: ReadonlyMap<string, string>; readonly read: FleetPlan }
>();

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
