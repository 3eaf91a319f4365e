// The tools every provider answers, once: their names, arguments, whether they only read, and the
// words that describe them. The control socket checks a request against this table, the agent and
// the controller's relay decide from it what a refreshing page may ask unrecorded, the CLI builds
// `mesh tool` and its help from it, and the dashboard hides read-only calls by it.

/** One argument a tool takes. */
export interface ToolArgument {
  /**
   * Its name in usage lines (`LOGIN`) and in `mesh tool … --help` (`<login>`). An argument named
   * `login` must be a login the mesh could have made, or the request is refused before it travels.
   */
  readonly name: string;
  readonly optional: boolean;
  /** What it is, in a few words. */
  readonly help: string;
  /** A value that shows its shape in examples. */
  readonly example: string;
}

/** One tool, as the table holds it. */
export interface ToolDefinition {
  /** One or two words: `status`, `retire approve`. */
  readonly name: string;
  readonly args: readonly ToolArgument[];
  /**
   * Whether it only reads. A read-only tool answers from the last pass and may be asked by a page
   * refreshing itself without a ledger entry each time; every other call is always recorded.
   */
  readonly readOnly: boolean;
  /** What it does, in one line. */
  readonly summary: string;
  /**
   * For a tool that changes something: what a person types to confirm it on a terminal (the
   * argument of that name, or the waiting set's id), and what it does, said before asking.
   */
  readonly confirm?: { readonly typed: string; readonly effect: string };
  /**
   * How long an asker waits for its answer and how large it may be, unless the asker says
   * otherwise. A read answers at once from the last pass; a change may drop a big database.
   */
  readonly answer: AnswerBounds;
}

/** The bounds on one tool's answer (see `ToolDefinition.answer`). */
export interface AnswerBounds {
  /** How long the whole answer may take, in milliseconds. */
  readonly timeoutMs: number;
  /** The largest answer, in bytes, from a provider of no consumers. */
  readonly bytes: number;
  /** How many bytes more for each consumer the asker knows the provider has (a list grows with them). */
  readonly bytesPerConsumer: number;
}

/** How long a read-only tool's answer may take: it answers from the last pass's snapshot at once. */
export const READ_ANSWER_MS = 5_000;

/** How long a changing tool's answer may take: a delete may drop a big database. */
export const CHANGE_ANSWER_MS = 95_000;

/** The largest answer of a provider of no consumers: 1 MiB. */
export const ANSWER_BYTES = 1024 * 1024;

/** Every tool a provider answers, in the order help texts list them. */
export const TOOL_TABLE = [
  {
    name: "status",
    args: [],
    readOnly: true,
    summary: "every consumer: its state, failure class, since when and why",
    answer: { timeoutMs: READ_ANSWER_MS, bytes: ANSWER_BYTES, bytesPerConsumer: 2048 },
  },
  {
    name: "retire list",
    args: [],
    readOnly: true,
    summary: "show the set waiting for approval, its id, and the bound it is past",
    answer: { timeoutMs: READ_ANSWER_MS, bytes: ANSWER_BYTES, bytesPerConsumer: 128 },
  },
  {
    name: "retire approve",
    args: [{ name: "id", optional: true, help: "the id `retire list` shows", example: "3f9c2a" }],
    readOnly: false,
    summary: "retire the waiting set (the one named by ID; refused if it has changed)",
    confirm: {
      typed: "the set's id",
      effect: "retires the waiting set of consumers (their access ends at once)",
    },
    answer: { timeoutMs: CHANGE_ANSWER_MS, bytes: ANSWER_BYTES, bytesPerConsumer: 128 },
  },
  {
    name: "cleanup list",
    args: [],
    readOnly: true,
    summary: "retired consumers that `cleanup delete` could remove",
    answer: { timeoutMs: READ_ANSWER_MS, bytes: ANSWER_BYTES, bytesPerConsumer: 2048 },
  },
  {
    name: "cleanup delete",
    args: [{ name: "login", optional: false, help: "the retired consumer's login", example: "app_umami" }],
    readOnly: false,
    summary: "delete one retired, unasked consumer, login and data, for good",
    confirm: { typed: "the login", effect: "removes the consumer and its data for good" },
    answer: { timeoutMs: CHANGE_ANSWER_MS, bytes: ANSWER_BYTES, bytesPerConsumer: 0 },
  },
] as const satisfies readonly ToolDefinition[];

/** A tool's name, as a request names it. */
export type ToolName = (typeof TOOL_TABLE)[number]["name"];

/** A tool that changes something (not read-only). */
export type ChangingToolName = Extract<(typeof TOOL_TABLE)[number], { readonly readOnly: false }>["name"];

/** Every tool's name, in the table's order. */
export const TOOL_NAMES: readonly ToolName[] = TOOL_TABLE.map((t) => t.name);

/** The tools that only read. */
export const READ_ONLY_TOOL_NAMES: ReadonlySet<ToolName> = new Set(
  TOOL_TABLE.filter((t) => t.readOnly).map((t) => t.name),
);

/**
 * The first word of each two-word tool, with what its tools are about, for `mesh tool retire` and
 * `mesh tool cleanup`.
 */
export const TOOL_GROUPS: Readonly<Record<string, string>> = {
  retire: "the set of unasked consumers that waits for a person",
  cleanup: "retired consumers, and deleting one for good",
};

/** Whether `name` is one of the tools. */
export function isToolName(name: unknown): name is ToolName {
  return typeof name === "string" && (TOOL_NAMES as readonly string[]).includes(name);
}

/** Whether the tool changes something (and so always leaves a ledger entry). */
export function isChangingTool(name: ToolName): name is ChangingToolName {
  return !READ_ONLY_TOOL_NAMES.has(name);
}

/** The tool's row of the table. */
export function toolDefinition(name: ToolName): ToolDefinition {
  return TOOL_TABLE.find((t) => t.name === name) as ToolDefinition;
}

/** How many arguments the tool takes: at least, at most. */
export function toolArity(name: ToolName): { readonly least: number; readonly most: number } {
  const { args } = toolDefinition(name);
  return { least: args.filter((a) => !a.optional).length, most: args.length };
}

/** The tool as it is called: `retire approve [ID]`, `cleanup delete LOGIN`. */
export function toolUsage(name: ToolName): string {
  const args = toolDefinition(name).args.map((a) =>
    a.optional ? `[${a.name.toUpperCase()}]` : a.name.toUpperCase(),
  );
  return [name, ...args].join(" ");
}

/**
 * The largest answer to `tool` an asker takes from a provider it knows has `consumers` consumers:
 * the tool's `answer.bytes`, and `answer.bytesPerConsumer` more for each.
 */
export function toolAnswerBytes(name: ToolName, consumers = 0): number {
  const { bytes, bytesPerConsumer } = toolDefinition(name).answer;
  return bytes + bytesPerConsumer * Math.max(0, Math.floor(consumers));
}
