// Reading the fleet is all-or-nothing: the fleet file, every manifest, and the check that they hold
// together. Any problem refuses the whole reading, so a typo can never shrink the plan (and have
// providers retire consumers nobody meant to remove).
import { resolve } from "node:path";
import {
  compilePermissions,
  derivePlan,
  loadFleet,
  loadFleetManifests,
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
 * the plan.
 * @throws FleetError (the fleet file), ManifestError (a manifest) or FleetCheckError (they do not
 * hold together), each listing every problem with its file, line, field and fix.
 */
export async function loadFleetPlan(fleetFile: string): Promise<FleetPlan> {
  const file = resolve(fleetFile);
  const fleet = await loadFleet(file);
  const manifests = await loadFleetManifests(fleet);
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
    }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return {
    fleetFile: file,
    plan,
    nodes: [...fleet.nodes.keys()].sort(),
    modules,
    readAt: new Date().toISOString(),
    permissions,
  };
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
