// Tools through the mesh: an operator's CLI asks on `mesh.tool`, the controller checks the request,
// finds the module's node in the fleet it serves and asks that node's agent on `toolSubject(node)`.
// The controller runs nothing itself: the agent calls the module's control socket and keeps the
// ledger entry, and the controller keeps it instead when no agent did (none answered, or it refused
// the call before running it, or could not write). Every refusal names what is wrong and what to
// check, so a person never has to read a log to know why a tool did not run.
import {
  RELAY_UNANSWERED_CODES,
  sendReceipt,
  toolSubject,
  type BusLogger,
  type ToolRelayCode,
  type ToolSurface,
} from "@mesh/bus";
import {
  isModuleName,
  MODULE_NAME_RULE,
  parseAnswer,
  parseToolAnswer,
  toolCallReplySchema,
} from "@mesh/manifest";
import {
  BadControlRequestError,
  checkControlRequest,
  READ_ONLY_TOOLS,
  type ControlTool,
} from "@mesh/sdk/provider";
import {
  NoRespondersError,
  RequestError,
  TimeoutError,
  type Msg,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import type { FleetPlan } from "./fleet-plan.ts";
import type { LedgerRecords } from "./ledger-recorder.ts";
import { TOOL_REQUEST_SUBJECT } from "./node-permissions.ts";

/** One tool call: what an operator sends on `mesh.tool`, and what the controller relays to the node. */
export interface ToolCall {
  /** The module whose tool is asked, by its fleet name. */
  readonly module: string;
  readonly tool: ControlTool;
  readonly args: readonly string[];
  /** Who asks (the operator's user name), kept in the module's ledger. */
  readonly who: string;
  /**
   * Through which surface: `mesh tool` for a request on `mesh.tool` (set by the relay, whatever the
   * request says), `dashboard` for the dashboard's. Kept in the ledger with who.
   */
  readonly via?: ToolSurface;
  /**
   * False for a read-only tool (`READ_ONLY_TOOLS`) asked by a page refreshing itself: no ledger
   * entry. Refused for any other tool, so an action is always recorded. Absent means recorded.
   */
  readonly record?: false;
}

/**
 * The answer to a tool call. `ledger`, when present, says that the call's ledger entry was not
 * written and why: the tool ran (or refused) all the same. `ledgerWaits`: the agent keeps the entry
 * and appends it once the module's ledger takes it, so the controller records nothing of its own.
 */
export type ToolReply =
  | { readonly ok: true; readonly answer: unknown; readonly ledger?: string; readonly ledgerWaits?: true }
  | {
      readonly ok: false;
      readonly error: string;
      readonly code?: string;
      readonly ledger?: string;
      readonly ledgerWaits?: true;
    };

// Its codes, defined with the bus's subjects (the CLI reads them there); exported here too.
export { RELAY_UNANSWERED_CODES, type ToolRelayCode };

/** The largest tool request the controller reads (the body sent on `mesh.tool`). */
export const MAX_TOOL_REQUEST_BYTES = 8 * 1024;

/** The longest argument a tool call may carry (an id, a login). */
export const MAX_TOOL_ARG_CHARS = 256;

/** How long the controller waits for a node's agent by default: a delete may drop a big database. */
export const DEFAULT_RELAY_TIMEOUT_MS = 110_000;

/** How many tool calls the controller relays at once; more are refused as `busy`. */
export const MAX_CALLS_IN_FLIGHT = 64;

const REQUEST_EXAMPLE = '{"module":"postgres","tool":"status","args":[],"who":"alice"}';

/** A tool request the controller refuses before it travels; `code` says which kind of problem. */
export class ToolCallRefusedError extends Error {
  override name = "ToolCallRefusedError";
  constructor(
    readonly code: ToolRelayCode,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Reads and checks a tool request: JSON no larger than `MAX_TOOL_REQUEST_BYTES`, a module name,
 * a tool a control socket answers with the right number of string arguments (each at most
 * `MAX_TOOL_ARG_CHARS`), a valid login for `cleanup delete`, and who asks.
 * @throws ToolCallRefusedError (code `bad-request`) naming what is wrong.
 */
export function parseToolCall(data: Uint8Array): ToolCall {
  if (data.length > MAX_TOOL_REQUEST_BYTES) {
    throw new ToolCallRefusedError(
      "bad-request",
      `the tool request is ${data.length} bytes, more than the ${MAX_TOOL_REQUEST_BYTES} a tool call needs: ` +
        `send ${REQUEST_EXAMPLE}`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(data));
  } catch {
    throw new ToolCallRefusedError("bad-request", `the tool request is not JSON: send ${REQUEST_EXAMPLE}`);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ToolCallRefusedError(
      "bad-request",
      `the tool request is not a JSON object: send ${REQUEST_EXAMPLE}`,
    );
  }
  const { module, who, args, record } = raw as Record<string, unknown>;
  if (!isModuleName(module)) {
    throw new ToolCallRefusedError(
      "bad-request",
      `the tool request names no module, or ${JSON.stringify(module)}, which cannot be one (a module name is ` +
        `${MODULE_NAME_RULE}): send ${REQUEST_EXAMPLE}`,
    );
  }
  if (who === undefined) {
    throw new ToolCallRefusedError(
      "bad-request",
      `the tool request does not say who asks: send ${REQUEST_EXAMPLE}`,
    );
  }
  if (Array.isArray(args) && args.some((a) => typeof a === "string" && a.length > MAX_TOOL_ARG_CHARS)) {
    throw new ToolCallRefusedError(
      "bad-request",
      `a tool argument is longer than ${MAX_TOOL_ARG_CHARS} characters; no tool takes one that long`,
    );
  }
  try {
    const checked = checkControlRequest(raw);
    if (record !== undefined && (record !== false || !READ_ONLY_TOOLS.has(checked.tool))) {
      throw new ToolCallRefusedError(
        "bad-request",
        `"record": false is only for the read-only tools (${[...READ_ONLY_TOOLS].join(", ")}); ` +
          `${checked.tool} is always recorded in the module's ledger: leave "record" out`,
      );
    }
    return {
      module,
      tool: checked.tool,
      args: checked.args,
      who: checked.who,
      via: "mesh tool",
      ...(record === false ? { record } : {}),
    };
  } catch (err) {
    if (err instanceof BadControlRequestError) throw new ToolCallRefusedError("bad-request", err.message);
    throw err;
  }
}

/** What the relay reads of the controller's state, each time it is asked. */
export interface ToolRelaySources {
  /** The fleet being served. */
  fleet(): FleetPlan;
  /** Whether `node` has enrolled (has credentials, so its agent can answer). */
  isEnrolled(node: string): boolean;
  /** Where the relay records a call no agent recorded. Absent: it records nothing itself. */
  readonly records?: LedgerRecords;
}

/**
 * The replies after which no agent wrote the call's ledger entry: nobody answered, the node was not
 * enrolled, the agent refused the call before running it.
 */
const UNRECORDED_CODES: ReadonlySet<string> = new Set([
  "node-not-enrolled",
  "agent-not-answering",
  "agent-timeout",
  "module-not-here",
  "bad-request",
]);

/** The most of an answer the controller keeps in its own record of a call. */
const MAX_RECORDED_ANSWER_BYTES = 16 * 1024;

/**
 * Relays one checked call to the module's node and returns the agent's answer, or why there is none.
 * A call of a fleet module that no agent recorded (see `UNRECORDED_CODES`, or a reply whose `ledger`
 * says the agent's entry is missing) is recorded by the controller in `sources.records`, unless it is
 * a read asked not to be. Never throws: every problem is an `{ok: false}` reply that names it.
 */
export async function relayToolCall(
  nc: NatsConnection,
  call: ToolCall,
  sources: ToolRelaySources,
  timeoutMs = DEFAULT_RELAY_TIMEOUT_MS,
): Promise<ToolReply> {
  const at = new Date().toISOString();
  const reply = await relayOnce(nc, call, sources, timeoutMs);
  // An entry its agent keeps to append later is the agent's to write: recorded here too, it would be there twice.
  const unrecorded =
    (reply.ledger !== undefined && reply.ledgerWaits !== true) ||
    (!reply.ok && UNRECORDED_CODES.has(reply.code ?? ""));
  if (!unrecorded || call.record === false || sources.records === undefined) return reply;
  if (!sources.fleet().modules.some((m) => m.name === call.module)) return reply;
  const problem = await sources.records.record(call.module, "tool", recordOf(call, reply, at));
  const { ledger: _agents, ...answered } = reply;
  return problem === undefined ? answered : { ...answered, ledger: problem };
}

// The controller's record of a call: as the agent's, with what the controller saw of its outcome.
function recordOf(call: ToolCall, reply: ToolReply, at: string): object {
  const outcome = reply.ok
    ? { ok: true, answer: boundedAnswer(reply.answer) }
    : { ok: false, error: reply.error, ...(reply.code === undefined ? {} : { code: reply.code }) };
  return {
    tool: call.tool,
    args: call.args,
    who: call.who,
    ...(call.via === undefined ? {} : { via: call.via }),
    at,
    ...outcome,
    recordedBy: "controller",
  };
}

function boundedAnswer(answer: unknown): unknown {
  const bytes = Buffer.byteLength(JSON.stringify(answer) ?? "null");
  return bytes <= MAX_RECORDED_ANSWER_BYTES
    ? answer
    : {
        summarised: true,
        bytes,
        note: `the answer was larger than the ${MAX_RECORDED_ANSWER_BYTES} bytes kept`,
      };
}

async function relayOnce(
  nc: NatsConnection,
  call: ToolCall,
  sources: ToolRelaySources,
  timeoutMs: number,
): Promise<ToolReply> {
  const fleet = sources.fleet();
  const module = fleet.modules.find((m) => m.name === call.module);
  if (module === undefined) {
    const known = fleet.modules.map((m) => m.name).join(", ");
    return refusal(
      "unknown-module",
      `${call.module} is not a module of the fleet being served (${fleet.fleetFile}); its modules are: ` +
        `${known === "" ? "none" : known}`,
    );
  }
  const { node } = module;
  if (!sources.isEnrolled(node)) {
    return refusal(
      "node-not-enrolled",
      `${call.module} runs on node ${node}, which has not enrolled, so no agent there can run its tools: ` +
        `start node ${node}'s agent with its join token (\`mesh agent --node ${node} --join FILE\`)`,
    );
  }
  const body = JSON.stringify({
    module: call.module,
    tool: call.tool,
    args: call.args,
    who: call.who,
    ...(call.via === undefined ? {} : { via: call.via }),
    ...(call.record === false && READ_ONLY_TOOLS.has(call.tool) ? { record: false } : {}),
  });
  let msg: Msg;
  try {
    msg = await nc.request(toolSubject(node), body, { timeout: timeoutMs });
  } catch (err) {
    if (isNoResponders(err)) {
      return refusal(
        "agent-not-answering",
        `no agent answers for node ${node}, where ${call.module} runs: check that node ${node}'s agent is ` +
          `running and connected to the bus (\`mesh status\` shows when it last reported)`,
      );
    }
    if (isTimeout(err)) {
      return refusal(
        "agent-timeout",
        `node ${node}'s agent did not answer ${call.tool} for ${call.module} within ${Math.round(timeoutMs / 1000)} s; ` +
          `the tool may still be running: its result will be in ${call.module}'s ledger (\`mesh ledger ${call.module}\`), ` +
          `and node ${node}'s log may say why it is slow`,
      );
    }
    return refusal(
      "agent-not-answering",
      `could not ask node ${node}'s agent: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  return readReply(msg.data, node, call.tool);
}

/** A serving relay. */
export interface ToolRelay {
  /** Stops taking calls and waits for those in flight to be answered. */
  stop(): Promise<void>;
}

/** How to serve the relay. */
export interface ToolRelayOptions extends ToolRelaySources {
  /** The controller's connection. */
  readonly nc: NatsConnection;
  readonly logger: BusLogger;
  /** The queue group the controller's subscriptions share (one controller of several answers). */
  readonly queue?: string;
  /** How long to wait for a node's agent (default `DEFAULT_RELAY_TIMEOUT_MS`). */
  readonly timeoutMs?: number;
}

/**
 * Answers tool calls on `TOOL_REQUEST_SUBJECT` (the operator's credential is the only one allowed to
 * send them): each is checked, relayed to its module's node and answered, several at once, so a
 * slow delete never holds up a status.
 */
export function serveToolRelay(options: ToolRelayOptions): ToolRelay {
  const { nc, logger } = options;
  const inFlight = new Set<Promise<void>>();
  const sub: Subscription = nc.subscribe(
    TOOL_REQUEST_SUBJECT,
    options.queue === undefined ? {} : { queue: options.queue },
  );
  const answer = async (msg: Msg): Promise<void> => {
    let reply: ToolReply;
    let call: ToolCall | undefined;
    try {
      call = parseToolCall(msg.data);
      reply = await relayToolCall(nc, call, options, options.timeoutMs);
    } catch (err) {
      reply =
        err instanceof ToolCallRefusedError
          ? refusal(err.code, err.message)
          : refusal("bad-request", err instanceof Error ? err.message : String(err));
    }
    const what =
      call === undefined
        ? "a tool call"
        : `${[call.tool, ...call.args].join(" ")} on ${call.module} for ${call.who}`;
    if (reply.ok) logger.info(`relayed ${what}`);
    else logger.warn(`${what} was not answered: ${reply.error}`);
    if (msg.reply !== undefined && msg.reply !== "") msg.respond(JSON.stringify(reply));
  };
  const loop = (async () => {
    for await (const msg of sub) {
      // Taken: the asker waits for the answer (a delete may take minutes) rather than asking again.
      sendReceipt(nc, msg);
      if (inFlight.size >= MAX_CALLS_IN_FLIGHT) {
        msg.respond(
          JSON.stringify(
            refusal(
              "busy",
              `the controller is relaying ${MAX_CALLS_IN_FLIGHT} tool calls already: ask again shortly`,
            ),
          ),
        );
        continue;
      }
      const done: Promise<void> = answer(msg)
        .catch((err: unknown) => logger.error(`a tool call was not answered: ${(err as Error).message}`))
        .finally(() => inFlight.delete(done));
      inFlight.add(done);
    }
  })();
  let stopped: Promise<void> | undefined;
  return {
    stop() {
      stopped ??= (async () => {
        sub.unsubscribe();
        await loop;
        await Promise.all(inFlight);
      })();
      return stopped;
    },
  };
}

function refusal(code: string, error: string): ToolReply {
  return { ok: false, error, code };
}

// An agent answers with a ToolReply, parsed as one, whose answer has the tool's shape: an agent is
// trusted more than a module, but what it relays is a module's words, and the page and the CLI
// that read this reply are owed what they expect. Anything else is said as what it is.
function readReply(data: Uint8Array, node: string, tool: ControlTool): ToolReply {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch {
    raw = undefined;
  }
  const reply = parseAnswer(toolCallReplySchema, raw);
  if (!reply.ok) {
    return refusal(
      "agent-not-answering",
      `node ${node}'s agent answered something that is not a tool reply (${reply.problem}); ` +
        `is it an agent of this version of the mesh?`,
    );
  }
  const r = reply.answer;
  // Kept by the agent to append later: said as such, so the relay does not record the call too.
  const ledger =
    r.ledger === undefined
      ? {}
      : { ledger: r.ledger, ...(r.ledgerWaits === true ? { ledgerWaits: true as const } : {}) };
  if (!r.ok)
    return { ok: false, error: r.error, ...(r.code === undefined ? {} : { code: r.code }), ...ledger };
  const answer = parseToolAnswer(tool, r.answer);
  if (!answer.ok) {
    return refusal(
      "agent-not-answering",
      `node ${node}'s agent relayed an answer to ${tool} that is not one (${answer.problem}); ` +
        `is it an agent of this version of the mesh?`,
    );
  }
  return { ok: true, answer: answer.answer, ...ledger };
}

// nats.js rejects a request nobody is subscribed to with a RequestError caused by NoRespondersError.
function isNoResponders(err: unknown): boolean {
  return (
    err instanceof NoRespondersError ||
    (err instanceof RequestError && (err.isNoResponders() || err.cause instanceof NoRespondersError))
  );
}

function isTimeout(err: unknown): boolean {
  return err instanceof TimeoutError || (err instanceof Error && err.cause instanceof TimeoutError);
}
