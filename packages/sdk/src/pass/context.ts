// What every stage of a pass reads and acts through: the book, the adapter, the settings, the
// collaborators, and the small parts that outlive one pass (what says things, what finishes the
// backend's changes, what wakes a pass at a rotation's grace bound).

import type { GuardedAdapter } from "../adapter-guard.ts";
import type { Clock, Logger } from "../collaborators.ts";
import type { ConsumerBook } from "../consumer-book.ts";
import type { PROVISIONER_DEFAULTS } from "../defaults.ts";
import type { ProvisionerObserver } from "../metrics.ts";
import type { RetirementCounter } from "../retirement.ts";
import type { SecretsDirectory } from "../secret-file.ts";
import type { Standings } from "../standing.ts";
import type { FileWatch } from "../watcher.ts";
import type { DrainWakes } from "./drain-wakes.ts";
import type { ReportStage } from "./report.ts";
import type { UnsavedChanges } from "./unsaved-changes.ts";

/** Settings of one provisioner loop; every duration is in milliseconds. */
export type Settings = {
  -readonly [K in keyof typeof PROVISIONER_DEFAULTS]: (typeof PROVISIONER_DEFAULTS)[K] extends number
    ? number
    : string;
};

/** Which kind of pass runs: `periodic` passes advance the retirement count, `watch` passes never do. */
export type PassKind = "periodic" | "watch";

/** What the stages share. Every change to a consumer goes through the book's transitions. */
export interface PassContext {
  readonly iface: string;
  /** The contributions file. */
  readonly receives: string;
  readonly settings: Settings;
  readonly adapter: GuardedAdapter;
  readonly clock: Clock;
  readonly log: Logger;
  readonly metrics: ProvisionerObserver;
  readonly book: ConsumerBook;
  readonly standings: Standings;
  readonly retirement: RetirementCounter;
  readonly secretsDir: SecretsDirectory;
  /** What watches the files; undefined when unwatched (every pass then reads everything). */
  readonly watcher: FileWatch | undefined;
  readonly report: ReportStage;
  readonly changes: UnsavedChanges;
  readonly wakes: DrainWakes;
  /** Whether the provisioner stopped: a verification under way stops at its next step. */
  isStopped(): boolean;
}
