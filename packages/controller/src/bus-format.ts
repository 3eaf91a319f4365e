// The format of what the mesh keeps on the bus, as a key of the controller's own bucket: a newer
// controller migrates an older bus at start and says so; an older one refuses a newer bus, naming
// both versions, before it writes anything there.
import type { BusLogger, BusState } from "@mesh/bus";
import { MESH_RELEASE, releaseOfFormat, STATE_FORMAT, UNVERSIONED_FORMAT } from "@mesh/manifest";

/** The key of the bus's format in the controller's bucket (`mesh-desired`). */
export const BUS_FORMAT_KEY = "format";

/** What `BUS_FORMAT_KEY` holds. */
export interface BusFormatRecord {
  /** The format of the buckets (`STATE_FORMAT` of the mesh that wrote them). */
  readonly format: number;
  /** The release of the controller that wrote this record. */
  readonly release: string;
  /** ISO 8601: when it was written. */
  readonly at: string;
  /** The format it was migrated from, when a start migrated it. */
  readonly migratedFrom?: number;
}

/** The bus holds a newer format than this controller knows: it starts nothing. */
export class BusFormatError extends Error {
  override name = "BusFormatError";
  constructor(
    readonly found: number,
    readonly foundRelease: string | undefined,
  ) {
    super(
      `the bus's buckets are state format ${found}${foundRelease === undefined ? "" : ` (written by mesh ${foundRelease})`}, ` +
        `newer than this controller knows: mesh ${MESH_RELEASE} reads state formats up to ${STATE_FORMAT}. ` +
        `Run mesh ${foundRelease ?? "of that release"} or later here; to go back to ${MESH_RELEASE}, restore the ` +
        `backup the upgrade wrote (docs/operating.md, "Upgrading")`,
    );
  }
}

/** What `settleBusFormat` found and did. */
export type BusFormatOutcome =
  | { readonly kind: "current" }
  | { readonly kind: "new" }
  | { readonly kind: "migrated"; readonly from: number };

/**
 * Reads the bus's format from `desired` (the controller's bucket) and settles it: a bus with
 * nothing in it gets this mesh's format; one of an older format (0.1.0 wrote none) is migrated
 * and said to `log`; the same format is left as it is.
 * @throws BusFormatError for a newer format (nothing is written); the bus's error when it cannot be read.
 */
export async function settleBusFormat(desired: BusState<unknown>, log: BusLogger): Promise<BusFormatOutcome> {
  const stored = await desired.entry(BUS_FORMAT_KEY).catch((err: unknown) => {
    // A value that is not JSON is not a format this mesh wrote: taken as unknown, refused.
    if ((err as Error).name === "StateValueError") return { revision: -1, value: undefined };
    throw err;
  });
  const value = stored?.value as Partial<BusFormatRecord> | undefined;
  let format: number;
  if (stored === undefined) {
    // No format written: a bus 0.1.0 used, or one that holds nothing yet.
    const kept = (await desired.keys()).filter((k) => k !== BUS_FORMAT_KEY);
    if (kept.length === 0) {
      await write(desired, { format: STATE_FORMAT, release: MESH_RELEASE, at: new Date().toISOString() }, 0);
      return { kind: "new" };
    }
    format = UNVERSIONED_FORMAT;
  } else if (typeof value?.format === "number" && Number.isInteger(value.format) && value.format >= 1) {
    format = value.format;
  } else {
    throw new BusFormatError(Number.NaN, undefined);
  }
  if (format > STATE_FORMAT) {
    throw new BusFormatError(format, typeof value?.release === "string" ? value.release : undefined);
  }
  if (format === STATE_FORMAT) return { kind: "current" };
  // Format 1 (0.1.0) to 3: the buckets keep their shape; what 0.2.0 adds (the deliveries' protocol,
  // the shared ledger, the format itself) is written as the controller serves. Format 2 to 3: each
  // module's own ledger stream and bucket are copied into the shared ones, in the background
  // (`migrateLedgers`, from what was copied before, so a start killed half-way is finished by the
  // next) and left as they were, unwritten: they are the backup of the ledgers this migration
  // took, on an external bus as well as an embedded one (whose files `mesh up` backed up first).
  await write(
    desired,
    { format: STATE_FORMAT, release: MESH_RELEASE, at: new Date().toISOString(), migratedFrom: format },
    stored?.revision ?? 0,
  );
  log.info(
    `the bus's buckets were state format ${format} (mesh ${releaseOfFormat(format) ?? "?"}): migrated to ` +
      `format ${STATE_FORMAT} (mesh ${MESH_RELEASE})` +
      (format >= 2
        ? `; each module's own ledger stream and bucket are copied into the shared ones and left as ` +
          `they were, as the backup of the ledgers (the operator may remove them once copied)`
        : "") +
      `; to go back, restore the backup of the state taken before the upgrade rather than start the ` +
      `older controller on them (docs/operating.md, "Upgrading")`,
  );
  return { kind: "migrated", from: format };
}

async function write(desired: BusState<unknown>, record: BusFormatRecord, revision: number): Promise<void> {
  try {
    await desired.update(BUS_FORMAT_KEY, record, revision);
  } catch (err) {
    // Another controller of the same release wrote it first (two started at once): theirs stands.
    if ((err as Error).name !== "StaleRevisionError") throw err;
  }
}
