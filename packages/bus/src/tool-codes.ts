// Why a tool call asked through the mesh (on TOOL_REQUEST_SUBJECT) was not answered, as the
// controller's relay and the node's tool runner say it in their replies. Here, beside the subject,
// so the CLI that reads the replies finds them without loading the controller or the agent.

/**
 * Why the controller itself did not get a tool answered: a bad request, a module the fleet does not
 * have, a node not enrolled, or an agent that does not answer (or not in time).
 */
export type ToolRelayCode =
  "bad-request" | "unknown-module" | "node-not-enrolled" | "agent-not-answering" | "agent-timeout" | "busy";

/** The relay's codes that mean nobody answered (worth trying again later), not that anyone refused. */
export const RELAY_UNANSWERED_CODES: ReadonlySet<string> = new Set<ToolRelayCode>([
  "agent-not-answering",
  "agent-timeout",
]);

/**
 * Why the agent did not get an answer from the module (besides the provider's own refusal codes):
 * `module-misbehaving` when the module answered with something malformed, too large, too slow or
 * cut off, which was not passed on.
 */
export type ToolRunnerCode =
  | "bad-request"
  | "module-not-here"
  | "provider-not-listening"
  | "provider-unreachable"
  | "module-misbehaving";

/** The runner's codes that mean the provider gave no usable answer, not that it refused. */
export const RUNNER_UNANSWERED_CODES: ReadonlySet<string> = new Set<ToolRunnerCode>([
  "provider-not-listening",
  "provider-unreachable",
  "module-misbehaving",
]);

/**
 * Through which of the operator's surfaces a tool call came, as the controller tells the agent and
 * the ledger keeps it: the CLI's `mesh tool` (on the bus, with `operator.creds`) or the dashboard.
 */
export type ToolSurface = "mesh tool" | "dashboard";

/** Every `ToolSurface`, for a reader that checks what it was told. */
export const TOOL_SURFACES: ReadonlySet<string> = new Set<ToolSurface>(["mesh tool", "dashboard"]);
