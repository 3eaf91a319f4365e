// What a node's agent reports of each provider module on it, from the provider's own control socket,
// and what the controller takes in: one shape for both ends of the report.
import { z } from "zod";
import { MODULE_NAME_PATTERN } from "./names.ts";
import type { AnswerFault } from "./tool-answers.ts";

/** One consumer its provider says is failing, as the provider's node reports it. */
export interface ReportedFailure {
  readonly login: string;
  /** The consumer's node, as the provider knows it; null when it does not. */
  readonly node: string | null;
  readonly class: string;
  /** ISO 8601: when its run of failures began. */
  readonly since: string;
  readonly attempts: number;
  /** The last error, scrubbed of every secret the node holds, URLs masked, one line, clipped. */
  readonly error: string;
}

/** The retirement set of one provider that waits for a person (`retire list`). */
export interface ReportedWaiting {
  /** The id `retire approve` takes; null when the provider did not say it. */
  readonly id: string | null;
  /** Some of its logins (a node sends at most 20); `count` says how many there are. */
  readonly logins: readonly string[];
  readonly count: number;
  /** Active consumers the provider made, counted before retiring. */
  readonly held: number;
  readonly reason: string;
}

/** How many consumers of one provider are in each state. */
export interface ReportedCounts {
  readonly active: number;
  readonly failing: number;
  readonly unasked: number;
  readonly "awaiting-approval": number;
  readonly retired: number;
}

/** What one provider module says of its consumers, as its node reports it. */
export interface ReportedProvider {
  readonly module: string;
  /** Whether its control socket answered the node's last ask. */
  readonly answered: boolean;
  /** Why it did not answer, in words; null when it did. */
  readonly problem: string | null;
  /** ISO 8601: when its node last asked it. */
  readonly askedAt: string;
  /** ISO 8601 of the provider's last finished pass; null before the first (or when it did not answer). */
  readonly lastPassAt: string | null;
  /** Why its contributions file was not read, when it was not. */
  readonly contributionsProblem: string | null;
  readonly counts: ReportedCounts;
  /** At most a hundred, by login. */
  readonly failing: readonly ReportedFailure[];
  readonly waiting: ReportedWaiting | null;
  /**
   * Consumers whose current password its backend has never shown in use (no session seen since it
   * was applied), with since when that password stands; absent when the provider cannot tell.
   */
  readonly unseen?: readonly ReportedUnseen[];
  /**
   * Where the provider says it serves its consumers (from its admin URL), checked against
   * `servedEndpointSchema`; absent when it did not say.
   */
  readonly serves?: { readonly host: string; readonly port: number };
  /**
   * Consumers whose password is being rotated with an overlap (both valid), with the phase the
   * provider says; absent when none is (or the provider is older than rotations with phases).
   */
  readonly rotating?: readonly ReportedRotation[];
}

/** A rotation under way on a provider, as its node reports it (no secret: phase and times only). */
export interface ReportedRotation {
  readonly login: string;
  /** `add`: the new password is being made valid beside the old; `drain`: both valid, the apps move. */
  readonly phase: "add" | "drain";
  /** ISO 8601: when the rotation began on the provider. */
  readonly since: string;
  /** ISO 8601: when the old password goes (the grace bound). */
  readonly until: string;
}

/** A consumer its provider has not seen connected since its password was applied. */
export interface ReportedUnseen {
  readonly login: string;
  /** ISO 8601: since when its current password stands. */
  readonly since: string;
}

/**
 * One way a module of a node misbehaves, as its agent reports it: the answer it gave to a question
 * (`status`, `retire list`, …) was malformed, too large, too slow or cut off, and nothing of it was
 * used. Kept until the module's next good answer to the same question.
 */
export interface ReportedMisbehaviour {
  readonly module: string;
  /** What was asked: a tool's name. */
  readonly answer: string;
  readonly fault: AnswerFault;
  /** What was wrong, in words that quote nothing of what the module said. */
  readonly what: string;
  /** ISO 8601: since when (its first bad answer of the run). */
  readonly since: string;
}

/** The longest `what` of a misbehaviour kept; an agent says less. */
export const MAX_MISBEHAVIOUR_TEXT = 500;

/** The most misbehaviours one node's report carries that are kept (an agent reports one per module and question). */
export const MAX_REPORTED_MISBEHAVIOURS = 256;

/** One misbehaviour as a report carries it; `what` is clipped to one line of `MAX_MISBEHAVIOUR_TEXT`. */
export const reportedMisbehaviourSchema = z.object({
  module: z.string().regex(MODULE_NAME_PATTERN),
  answer: z.string().regex(/^[a-z][a-z0-9 .-]{0,63}$/),
  fault: z.enum(["malformed", "too-large", "slow", "hung-up"]),
  what: z.string().transform((text) => {
    const line = text.replace(/\s*[\r\n]+\s*/g, " ");
    return line.length <= MAX_MISBEHAVIOUR_TEXT ? line : `${line.slice(0, MAX_MISBEHAVIOUR_TEXT)}…`;
  }),
  since: z
    .string()
    .max(64)
    .refine((s) => !Number.isNaN(Date.parse(s)))
    .transform((s) => new Date(Date.parse(s)).toISOString()),
}) satisfies z.ZodType<ReportedMisbehaviour, ReportedMisbehaviour>;

/**
 * The well-formed misbehaviours of what a report says, at most `MAX_REPORTED_MISBEHAVIOURS`; a
 * malformed entry is dropped alone. Never throws.
 */
export function reportedMisbehaviours(value: unknown): ReportedMisbehaviour[] {
  if (!Array.isArray(value)) return [];
  const out: ReportedMisbehaviour[] = [];
  for (const entry of value.slice(0, MAX_REPORTED_MISBEHAVIOURS) as unknown[]) {
    const parsed = reportedMisbehaviourSchema.safeParse(entry);
    if (parsed.success) out.push(parsed.data);
  }
  return out;
}
