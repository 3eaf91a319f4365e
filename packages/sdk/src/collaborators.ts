// What the harness is handed rather than reaching for: a clock, a logger, an announcer and an action
// log. Tests pass fakes; the bus and the ledger plug in here later.

import type { Logger } from "@mesh/manifest";

/** Time as the harness sees it. `FakeClock` (clock.ts) drives it in tests. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Where the harness says what it does, in sentences for an operator: the mesh's one logger. */
export type { Logger } from "@mesh/manifest";

/** The standings events a provider announces (DESIGN §2). */
export type StandingEvent = "provisioner.failing" | "provisioner.recovered";

/** Publishes standings; the bus implements it later. Must not throw back into the loop. */
export interface Announcer {
  announce(event: StandingEvent, body: Readonly<Record<string, unknown>>): void;
}

/** The actions the action log records. */
export type ActionKind =
  | "created"
  | "re-applied"
  | "retired"
  | "approved"
  | "deleted"
  | "rotation-add"
  | "rotation-deliver"
  | "rotation-drain"
  | "rotation-remove"
  | "sessions-ended";

/** One line of the action log: what was done to which consumer, by whom, when and why. */
export interface ActionEntry {
  readonly action: ActionKind;
  readonly login: string;
  readonly interface: string;
  /** `provisioner` for the loop itself, else the person (or tool caller) who asked. */
  readonly who: string;
  /** ISO 8601. */
  readonly at: string;
  readonly why: string;
  /** Bytes freed, for `deleted`. */
  readonly freedBytes?: number;
}

/** Where actions are appended; the ledger implements it later. Must not throw back into the loop. */
export interface ActionLog {
  append(entry: ActionEntry): void;
}

/** The wall clock. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** Says everything to standard error, one line each, prefixed with its level. */
export const consoleLogger: Logger = {
  info: (m) => process.stderr.write(`${m}\n`),
  warn: (m) => process.stderr.write(`warning: ${m}\n`),
  error: (m) => process.stderr.write(`error: ${m}\n`),
};

/** Announces nothing (no bus yet). */
export const silentAnnouncer: Announcer = { announce: () => {} };

/** Keeps nothing (no ledger yet). */
export const discardActions: ActionLog = { append: () => {} };
