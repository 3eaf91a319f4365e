// The tools a person asks of a running provider (DESIGN §3 rules 7, 8, 10), as the harness handle
// answers them and as the control socket carries them.

import { createHash } from "node:crypto";
import type { FailureClass } from "./adapter.ts";

/** A consumer's place in its lifecycle, as `status` reports it. */
export type ConsumerState = "active" | "failing" | "unasked" | "awaiting-approval" | "retired";

/** One consumer in `status`. */
export interface ConsumerStatus {
  readonly login: string;
  readonly state: ConsumerState;
  /** The failure class while failing; null otherwise. */
  readonly class: FailureClass | null;
  /** ISO 8601: since when it has been in this state. */
  readonly since: string;
  /** Why it is in this state, in words (the scrubbed error while failing). */
  readonly why: string;
  readonly node?: string | undefined;
  /** Failed attempts in the current run of failures. */
  readonly attempts?: number | undefined;
  /**
   * `passwordTag` of the password the backend last accepted for this login in this process; absent
   * before the first apply. The agent compares it with the password it holds, so an app that does
   * not know the mesh is handed a new password only once the backend takes it.
   */
  readonly applied?: string | undefined;
  /**
   * Whether the backend has shown this login connected since its current password was applied;
   * absent when the provider cannot tell. With `appliedAt`, ISO 8601: since when that password stands.
   */
  readonly seen?: boolean | undefined;
  readonly appliedAt?: string | undefined;
  /**
   * The rotation of its password under way, on a backend that holds two at once: `add` until the
   * new one is valid beside the old, then `drain` until `until`, when the old one goes.
   */
  readonly rotation?:
    { readonly phase: "add" | "drain"; readonly since: string; readonly until: string } | undefined;
}

/**
 * A short tag of `password` that names it without revealing it: the first 128 bits of a SHA-256
 * under a fixed label. A mesh password holds 192 random bits, so the tag cannot be turned back.
 */
export function passwordTag(password: string): string {
  return createHash("sha256")
    .update("mesh applied password\0")
    .update(password)
    .digest("base64url")
    .slice(0, 22);
}

/** What `status` answers. */
export interface StatusReport {
  readonly interface: string;
  readonly instance: string;
  readonly receives: string;
  /** ISO 8601 of the last finished pass; null before the first. */
  readonly lastPassAt: string | null;
  /** Null when the contributions file was read; else why nothing is applied or retired. */
  readonly contributionsProblem: string | null;
  /**
   * Whether the backend holds two passwords on one login during a rotation (the adapter has
   * `overlap`): the agent then hands a consumer its new password only once the backend takes it
   * beside the old one. Absent from a provider older than rotations: taken as false.
   */
  readonly overlaps?: boolean | undefined;
  /**
   * Where it serves its consumers (its admin URL's host and port): a consumer of a provider the
   * fleet names no `endpoint:` for is given this address. Absent when it cannot say.
   */
  readonly serves?: { readonly host: string; readonly port: number } | undefined;
  readonly consumers: readonly ConsumerStatus[];
}

/** What `retire list` answers: the set waiting for a person, with the id `retire approve` takes. */
export interface RetireList {
  /** Null when nothing waits. */
  readonly id: string | null;
  readonly logins: readonly string[];
  /** Active consumers this provider made, counted before retiring. */
  readonly held: number;
  /** Why it waits (which bound it is past), or what is counting towards retirement. */
  readonly reason: string;
}

/** One retired consumer that `cleanup delete` could remove. */
export interface CleanupEntry {
  readonly login: string;
  /** ISO 8601, when known. */
  readonly retiredAt: string | null;
  readonly why: string;
  readonly derived: Readonly<Record<string, unknown>>;
}

/** Why a tool refused; `code` is stable for scripts. */
export type ToolErrorCode =
  | "unknown-login"
  | "not-made-here"
  | "still-asked"
  | "not-retired"
  | "nothing-waiting"
  | "set-changed"
  | "contributions-unreadable"
  | "bad-request"
  | "backend-failed"
  | "stopped";

/** A tool's refusal: a message for a person and a code for scripts. */
export class ToolError extends Error {
  override name = "ToolError";
  constructor(
    readonly code: ToolErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The tools the harness handle offers. Read-only ones answer from the last pass's snapshot. */
export interface ProvisionerTools {
  status(): StatusReport;
  retireList(): RetireList;
  /**
   * Approves the waiting set with this id (or the one waiting, when no id is given) and retires it.
   * @throws ToolError `nothing-waiting`, or `set-changed` when the set is no longer the one named.
   */
  retireApprove(
    id?: string,
    who?: string,
  ): Promise<{ readonly id: string; readonly retired: readonly string[] }>;
  cleanupList(): readonly CleanupEntry[];
  /**
   * Deletes one retired, unasked consumer this provider made.
   * @throws ToolError `unknown-login`, `not-made-here`, `still-asked`, `not-retired`, `backend-failed`.
   */
  cleanupDelete(
    login: string,
    who?: string,
  ): Promise<{ readonly login: string; readonly freedBytes: number }>;
}
