// What a provider's tools answer, as schemas: the one description of each answer that both ends
// share. The sdk writes these answers (its types are checked against these schemas when it is
// compiled), and every reader parses what a module said against them before using any of it: the
// agent (its standings, the password gate, the tool runner), the controller's relay and the
// dashboard, and `mesh tool`. A module is untrusted: its answer is a value to check, never a shape
// to assume. Unknown fields are dropped, not refused, so a provider one release newer still speaks.
import { z } from "zod";
import { servedEndpointSchema } from "./served-address.ts";
import type { ToolName } from "./tools.ts";

/** The most a list or object in a free-form value (a consumer's `derived`) may nest. */
export const MAX_ANSWER_DEPTH = 16;

/** The longest login an answer may name (a mesh login is at most 32 characters; this only stops abuse). */
const MOST_LOGIN = 256;
/** The longest identifier-like field (an id, a class, a node, a date, a tag). */
const MOST_NAME = 256;

const isoDate = z
  .string()
  .max(64)
  .refine((s) => !Number.isNaN(Date.parse(s)), { message: "is not a date (ISO 8601)" });
const count = z.number().int().nonnegative();
const login = z.string().min(1).max(MOST_LOGIN);

/**
 * Any JSON value nested at most `MAX_ANSWER_DEPTH` deep: deeper would overflow the stack of whoever
 * walks it next (a scrubber, a printer), so it is refused here.
 */
export const boundedJson: z.ZodType<unknown> = z
  .unknown()
  .refine((v) => depthWithin(v, MAX_ANSWER_DEPTH), { message: `nests deeper than ${MAX_ANSWER_DEPTH}` });

function depthWithin(value: unknown, most: number): boolean {
  if (typeof value !== "object" || value === null) return true;
  if (most === 0) return false;
  const children = Array.isArray(value) ? value : Object.values(value);
  return children.every((c) => depthWithin(c, most - 1));
}

/** A consumer's place in its lifecycle, as `status` says it. */
export const consumerStateSchema = z.enum(["active", "failing", "unasked", "awaiting-approval", "retired"]);

/** A rotation under way on a consumer, as its provider says (no secret: its phase and times). */
export const rotationPhaseSchema = z.object({
  phase: z.enum(["add", "drain"]),
  since: isoDate,
  until: isoDate,
});

/** A rotation under way as a node reports it: the consumer's login beside its phase and times. */
export const reportedRotationSchema = rotationPhaseSchema.extend({ login });

/** One consumer in a `status` answer. */
export const consumerStatusSchema = z.object({
  login,
  state: consumerStateSchema,
  class: z.string().max(MOST_NAME).nullable(),
  since: isoDate,
  why: z.string(),
  node: z.string().max(MOST_NAME).optional(),
  attempts: count.optional(),
  applied: z.string().max(MOST_NAME).optional(),
  seen: z.boolean().optional(),
  appliedAt: isoDate.optional(),
  rotation: rotationPhaseSchema.optional(),
});

/** What `status` answers. */
export const statusReportSchema = z.object({
  interface: z.string().max(MOST_NAME),
  instance: z.string().max(MOST_NAME),
  receives: z.string(),
  lastPassAt: isoDate.nullable(),
  contributionsProblem: z.string().nullable(),
  overlaps: z.boolean().optional(),
  /** Where the provider serves its consumers (its admin URL's host and port); absent when it cannot say. */
  serves: servedEndpointSchema.optional(),
  consumers: z.array(consumerStatusSchema),
});

/** What `retire list` answers. */
export const retireListSchema = z.object({
  id: z.string().max(MOST_NAME).nullable(),
  logins: z.array(login),
  held: count,
  reason: z.string(),
});

/** What `retire approve` answers. */
export const retireApprovedSchema = z.object({
  id: z.string().max(MOST_NAME),
  retired: z.array(login),
});

/** One retired consumer in a `cleanup list` answer. */
export const cleanupEntrySchema = z.object({
  login,
  retiredAt: isoDate.nullable(),
  why: z.string(),
  derived: z.record(z.string(), boundedJson),
});

/** What `cleanup list` answers. */
export const cleanupListSchema = z.array(cleanupEntrySchema);

/** What `cleanup delete` answers. */
export const cleanupDeletedSchema = z.object({
  login,
  freedBytes: count,
});

/** The longest text of a tool reply kept (an error, why its ledger entry is missing). */
export const MAX_REPLY_TEXT = 4_000;

const replyText = z
  .string()
  .transform((t) => (t.length <= MAX_REPLY_TEXT ? t : `${t.slice(0, MAX_REPLY_TEXT)}…`));

/**
 * What a node's agent answers a tool call relayed to it (the sdk's `ToolCallReply`), as the
 * controller reads it before passing it on: its `answer` is then checked against the tool's schema.
 */
export const toolCallReplySchema = z.union([
  z.object({
    ok: z.literal(true),
    answer: z.unknown(),
    ledger: replyText.optional(),
    ledgerWaits: z.literal(true).optional(),
  }),
  z.object({
    ok: z.literal(false),
    error: replyText,
    code: z
      .string()
      .regex(/^[a-z][a-z0-9-]{0,63}$/)
      .optional(),
    ledger: replyText.optional(),
    ledgerWaits: z.literal(true).optional(),
  }),
]);

/** Each tool's answer schema, by the tool's name. */
export const TOOL_ANSWER_SCHEMAS = {
  status: statusReportSchema,
  "retire list": retireListSchema,
  "retire approve": retireApprovedSchema,
  "cleanup list": cleanupListSchema,
  "cleanup delete": cleanupDeletedSchema,
} as const satisfies Record<ToolName, z.ZodType>;

/** What each tool answers once parsed: the types every reader works with. */
export type ToolAnswers = { readonly [T in ToolName]: z.output<(typeof TOOL_ANSWER_SCHEMAS)[T]> };

/** What each tool may be given to answer: the types the writer (the sdk) must satisfy. */
export type ToolAnswerInputs = { readonly [T in ToolName]: Frozen<z.input<(typeof TOOL_ANSWER_SCHEMAS)[T]>> };

/** `T` with every list and object read-only, however deep: a writer may hand frozen values. */
export type Frozen<T> = T extends (infer E)[]
  ? readonly Frozen<E>[]
  : T extends object
    ? { readonly [K in keyof T]: Frozen<T[K]> }
    : T;

/**
 * What may be wrong with an answer, as a reader tells it: not the shape the tool answers
 * (`malformed`), larger than the reader takes (`too-large`), not whole within the time the reader
 * waits (`slow`), or cut off by the module hanging up (`hung-up`).
 */
export type AnswerFault = "malformed" | "too-large" | "slow" | "hung-up";

/** A checked answer, or what is wrong with it in words that quote nothing of it. */
export type ParsedAnswer<T> =
  { readonly ok: true; readonly answer: T } | { readonly ok: false; readonly problem: string };

/**
 * Checks `value`, what a module answered to `tool`, against that tool's schema. Never throws: a
 * value that is not the answer comes back with its first problems named by where they are
 * (`consumers[0]: expected object, received null`), never by what the module put there (which
 * may be anything, a password included).
 */
export function parseToolAnswer<T extends ToolName>(tool: T, value: unknown): ParsedAnswer<ToolAnswers[T]> {
  return parseAnswer(TOOL_ANSWER_SCHEMAS[tool] as unknown as z.ZodType<ToolAnswers[T]>, value);
}

/** Checks `value` against `schema` as `parseToolAnswer` does; never throws. */
export function parseAnswer<T>(schema: z.ZodType<T>, value: unknown): ParsedAnswer<T> {
  let result;
  try {
    result = schema.safeParse(value);
  } catch (err) {
    // Only a value not read from JSON (a getter that throws) gets here.
    return { ok: false, problem: `cannot be read (${err instanceof Error ? err.name : "error"})` };
  }
  if (result.success) return { ok: true, answer: result.data };
  return { ok: false, problem: describeIssues(result.error.issues) };
}

/** The most issues one description names; the rest are counted. */
const MOST_ISSUES = 3;

/** Zod's issues as one line: where each is and what is wrong, never the value found there. */
export function describeIssues(issues: readonly z.core.$ZodIssue[]): string {
  const said = issues.slice(0, MOST_ISSUES).map((iss) => {
    const where = answerPath(iss.path);
    return where === "" ? iss.message : `${where}: ${iss.message}`;
  });
  const more = issues.length - MOST_ISSUES;
  return `${said.join("; ")}${more > 0 ? ` (and ${more} more)` : ""}`;
}

// A key is shown only when it looks like a field name: a module chooses its keys, and a key could
// carry a password or a wall of text.
const SHOWN_KEY = /^[A-Za-z][A-Za-z0-9_-]{0,23}$/;

function answerPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else if (typeof part === "string" && SHOWN_KEY.test(part)) out += out === "" ? part : `.${part}`;
    else out += "[…]";
  }
  return out;
}
