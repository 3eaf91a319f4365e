// The agent's half of tools through the mesh: it answers the calls the controller relays on
// `toolSubject(node)` by asking the module's own control socket on this machine, and appends each
// call and its result to the module's ledger on the module's own ledger connection. A ledger that
// cannot be written never hides what the tool did, nor holds up its answer: the entry waits in the
// agent's backlog (a module's ledger is made beside it, maybe after it starts) and the answer says so.
// The entry is the mesh's record, not the module's word: who asked and through what come from the
// relayed call (only the controller may send one), the module supplies only its answer.
import { randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { basename, join } from "node:path";
import {
  RUNNER_UNANSWERED_CODES,
  TOOL_SURFACES,
  toolSubject,
  type BusLogger,
  type LedgerKind,
  type ToolRunnerCode,
  type ToolSurface,
} from "@mesh/bus";
import { toolAnswerBytes, toolDefinition } from "@mesh/manifest";
import { ToolError } from "@mesh/sdk";
import {
  BadControlRequestError,
  callControl,
  checkControlRequest,
  ControlAnswerError,
  ControlUnreachableError,
  isServerUrl,
  NoProviderListeningError,
  READ_ONLY_TOOLS,
  redactSecrets,
  secretsOfUrl,
  type ControlTool,
  type ToolCallReply,
} from "@mesh/sdk/provider";
import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";
import { whatOf, type MisbehavingModules } from "./misbehaving-modules.ts";
import { moduleControlPath } from "./module-launch.ts";
import { checkModuleSocket, UnsafeModuleFileError } from "./safe-open.ts";

// A type, not an interface: a ledger takes any JSON object, which an interface is not known to be.
/** What a tool call leaves in the module's ledger (never a password: every string is scrubbed). */
export type ToolLedgerEntry = {
  readonly kind: "tool";
  readonly tool: ControlTool;
  readonly args: readonly string[];
  /** Who asked, as the controller relayed it: the CLI's Unix user, or the dashboard's operator. */
  readonly who: string;
  /** Through which of the operator's surfaces (absent from a controller that did not say). */
  readonly via?: ToolSurface;
  /** ISO 8601: when the call was asked. */
  readonly at: string;
  readonly ok: boolean;
  /** The tool's answer when it ran; a summary when it is larger than `MAX_LEDGER_ANSWER_BYTES`. */
  readonly answer?: unknown;
  /** Why it did not run, or what the provider refused. */
  readonly error?: string;
  readonly code?: string;
};

/**
 * A module's ledger as the tool runner writes it: one entry appended, its sequence number back; an
 * entry whose `id` the ledger holds already is stored once.
 */
export interface ToolLedger {
  append(kind: LedgerKind, entry: ToolLedgerEntry, options?: { readonly id?: string }): Promise<number>;
}

/** Where an entry the ledger did not take waits to be appended (`LedgerBacklog`). */
export interface ToolLedgerBacklog {
  /** Keeps the entry for `module`'s ledger; false when it cannot be kept. */
  add(module: string, kind: LedgerKind, entry: ToolLedgerEntry, id: string): boolean;
}

/** The answer the agent gives the controller: the sdk's one shape for a tool call's reply. */
export type ToolRunReply = ToolCallReply;

// Its codes, defined with the bus's subjects (the CLI reads them there); exported here too.
export { RUNNER_UNANSWERED_CODES, type ToolRunnerCode };

/** Answers larger than this (as JSON) are summarised in the ledger; the caller still gets them whole. */
export const MAX_LEDGER_ANSWER_BYTES = 16 * 1024;

/**
 * How long the agent waits for a module's control socket at most, whatever the tool: with the
 * ledger append, less than the relay waits. A read-only tool is waited for less (the tool table's
 * `answer.timeoutMs`, 5 s).
 */
export const DEFAULT_TOOL_TIMEOUT_MS = 95_000;

/** How long the agent waits for a ledger append before answering without it. */
export const LEDGER_APPEND_TIMEOUT_MS = 10_000;

/** How to run tools for a node. */
export interface ToolRunnerOptions {
  /** The node's own connection (it may subscribe to `toolSubject(node)` and answer, nothing of another node's). */
  readonly nc: NatsConnection;
  readonly node: string;
  /** The node's state directory: control sockets at `moduleControlPath(stateDir, module)`. */
  readonly stateDir: string;
  /** The modules this node runs now (its last delivery's). */
  modules(): readonly string[];
  /**
   * The module's ledger, on its own ledger connection.
   * @throws when the module has no ledger credential (the message says what is missing).
   */
  ledger(module: string): Promise<ToolLedger>;
  /** Keeps an entry the ledger did not take and appends it later; without it, such an entry is lost. */
  readonly backlog?: ToolLedgerBacklog;
  readonly logger: BusLogger;
  /**
   * The secrets that must never leave the node in an answer or a ledger entry. Default: every
   * password in the node's secret files, and the passwords in `env`'s URLs (a provider's admin URL).
   */
  secrets?(): Promise<readonly string[]>;
  /** The environment the node's modules inherit, for `secrets`' default. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** How long to wait for the control socket (default: the tool's own bound, at most `DEFAULT_TOOL_TIMEOUT_MS`). */
  readonly timeoutMs?: number;
  /** The node's book of misbehaving modules: a module whose answer is bad is counted there. */
  readonly misbehaving?: MisbehavingModules;
  /** How many consumers the delivery gives `module`: its answers may be larger by so much. */
  consumers?(module: string): number;
}

/** A node's tool runner at work. */
export interface ToolRunner {
  /** Stops taking calls and waits (a few seconds at most) for those in flight to be answered. */
  stop(): Promise<void>;
}

/**
 * Answers the tool calls relayed to `options.node`, several at once.
 * @throws InvalidNodeNameError for an invalid node name.
 */
export function serveTools(options: ToolRunnerOptions): ToolRunner {
  const { nc, logger } = options;
  const sub: Subscription = nc.subscribe(toolSubject(options.node));
  const inFlight = new Set<Promise<void>>();
  const answer = async (msg: Msg): Promise<void> => {
    const reply = await runToolCall(msg.data, options);
    if (msg.reply === undefined || msg.reply === "") return;
    let text = JSON.stringify(reply);
    const most = nc.info?.max_payload;
    if (most !== undefined && Buffer.byteLength(text) > most) {
      text = JSON.stringify({
        ok: false,
        code: "answer-too-large",
        error:
          `the answer is ${Buffer.byteLength(text)} bytes, more than the bus carries in one message (${most}): ` +
          `ask the module's control socket on node ${options.node} directly with \`mesh tool --control\``,
        ...(reply.ledger === undefined ? {} : { ledger: reply.ledger }),
      });
    }
    try {
      msg.respond(text);
    } catch (err) {
      logger.warn(`node ${options.node} could not answer a tool call: ${(err as Error).message}`);
    }
  };
  const loop = (async () => {
    for await (const msg of sub) {
      const done: Promise<void> = answer(msg)
        .catch((err: unknown) =>
          logger.error(`node ${options.node} failed a tool call: ${(err as Error).message}`),
        )
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
        let timer: NodeJS.Timeout | undefined;
        const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, 5_000)));
        await Promise.race([Promise.all(inFlight), bound]);
        clearTimeout(timer);
      })();
      return stopped;
    },
  };
}

/**
 * Runs one relayed call (`{module, tool, args, who}` as JSON): checks it, asks the module's control
 * socket, appends a `tool` entry to the module's ledger and returns the answer, scrubbed of every
 * secret the node holds. Never throws: every problem is an `{ok: false}` reply that names it.
 */
export async function runToolCall(data: Uint8Array, options: ToolRunnerOptions): Promise<ToolRunReply> {
  const { node, logger } = options;
  const at = new Date().toISOString();
  let module: string;
  let request: { tool: ControlTool; args: string[]; who: string };
  let via: ToolSurface | undefined;
  let record = true;
  try {
    const raw = JSON.parse(new TextDecoder().decode(data)) as unknown;
    request = checkControlRequest(raw);
    // Only a read may go unrecorded (a page refreshing itself); an action always lands in the ledger.
    record = !((raw as { record?: unknown }).record === false && READ_ONLY_TOOLS.has(request.tool));
    const named = (raw as { module?: unknown }).module;
    if (typeof named !== "string" || named === "")
      throw new BadControlRequestError("the call names no module");
    module = named;
    const surface = (raw as { via?: unknown }).via;
    if (typeof surface === "string" && TOOL_SURFACES.has(surface)) via = surface as ToolSurface;
  } catch (err) {
    const why = err instanceof BadControlRequestError ? err.message : "the call is not JSON";
    logger.warn(`node ${node} refused a tool call: ${why}`);
    return { ok: false, error: `node ${node} refused the tool call: ${why}`, code: "bad-request" };
  }
  const running = options.modules();
  if (!running.includes(module)) {
    return {
      ok: false,
      code: "module-not-here",
      error:
        `${module} does not run on node ${node} ` +
        (running.length === 0
          ? "(this node has applied no delivery yet)"
          : `(it runs ${running.join(", ")})`) +
        `: the node may not have applied its latest delivery yet; \`mesh status\` shows its generation`,
    };
  }

  const { tool, args, who } = request;
  const path = moduleControlPath(options.stateDir, module);
  let outcome: { ok: true; answer: unknown } | { ok: false; error: string; code: string };
  try {
    // The socket is in the module's own directory: never a link to another module's socket.
    await checkModuleSocket(path);
    // Parsed against the tool's schema and bounded in size and time by callControl: a malformed,
    // huge, slow or cut-off answer is never relayed, and counts against the module.
    const answer = await callControl(
      path,
      { tool, args, who },
      {
        timeoutMs:
          options.timeoutMs ?? Math.min(toolDefinition(tool).answer.timeoutMs, DEFAULT_TOOL_TIMEOUT_MS),
        maxBytes: toolAnswerBytes(tool, options.consumers?.(module) ?? 0),
      },
    );
    options.misbehaving?.good(module, tool);
    outcome = { ok: true, answer };
  } catch (err) {
    if (err instanceof ToolError) {
      options.misbehaving?.good(module, tool);
      outcome = { ok: false, error: err.message, code: err.code };
    } else if (err instanceof ControlAnswerError) {
      options.misbehaving?.failed(module, tool, err);
      const misbehaves = options.misbehaving?.isMisbehaving(module) !== false;
      outcome = {
        ok: false,
        code: misbehaves ? "module-misbehaving" : "provider-unreachable",
        error:
          `${module} on node ${node}${misbehaves ? " misbehaves" : ""}: its answer to ${tool} was not passed on ` +
          `(${whatOf(err)})${misbehaves ? "; `mesh status` shows since when" : ""}`,
      };
    } else if (err instanceof UnsafeModuleFileError) {
      outcome = {
        ok: false,
        code: "provider-unreachable",
        error: `${module} on node ${node}: ${err.message}`,
      };
    } else if (err instanceof NoProviderListeningError) {
      outcome = {
        ok: false,
        code: "provider-not-listening",
        error:
          `${module} on node ${node} answers no tools: nothing listens at its control socket ${path}; ` +
          `it is not a provider, or it is not running (\`mesh status\` shows its state, its log is beside the socket)`,
      };
    } else if (err instanceof ControlUnreachableError) {
      outcome = {
        ok: false,
        code: "provider-unreachable",
        error: `${module} on node ${node}: ${err.message}`,
      };
    } else
      outcome = {
        ok: false,
        code: "provider-unreachable",
        error: err instanceof Error ? err.message : String(err),
      };
  }

  const secrets = await (options.secrets?.() ?? nodeSecrets(options.stateDir, options.env ?? {})).catch(
    (): readonly string[] => [],
  );
  const scrubbed = scrubValue(outcome, secrets) as typeof outcome;
  const entry: ToolLedgerEntry = {
    kind: "tool",
    tool,
    args: scrubValue(args, secrets) as string[],
    who,
    ...(via === undefined ? {} : { via }),
    at,
    ...(scrubbed.ok
      ? { ok: true, answer: forLedger(scrubbed.answer) }
      : { ok: false, error: scrubbed.error, code: scrubbed.code }),
  };
  const appended = record ? await appendEntry(options, module, entry) : undefined;
  const ledgerProblem = appended?.problem;
  // The scrubbed arguments: the log is no more trusted with a password than the ledger is.
  const said = `${who}${via === undefined ? "" : ` (${via})`} asked ${[tool, ...entry.args].join(" ")} of ${module} on node ${node}`;
  if (scrubbed.ok) logger.info(`${said}: answered`);
  else logger.warn(`${said}: ${scrubbed.code}: ${scrubbed.error}`);
  if (ledgerProblem !== undefined) logger.warn(`${said}: ${ledgerProblem}`);
  const ledger =
    ledgerProblem === undefined
      ? {}
      : { ledger: ledgerProblem, ...(appended?.waits === true ? { ledgerWaits: true as const } : {}) };
  return scrubbed.ok
    ? { ok: true, answer: scrubbed.answer, ...ledger }
    : { ok: false, error: scrubbed.error, code: scrubbed.code, ...ledger };
}

// Undefined when the entry was written; else why it was not, in words for the operator, and whether
// it waits in the backlog.
async function appendEntry(
  options: ToolRunnerOptions,
  module: string,
  first: ToolLedgerEntry,
): Promise<{ readonly problem: string; readonly waits: boolean } | undefined> {
  // One id for every try, here and in the backlog: an append whose answer was lost is stored once.
  const id = `tool.${options.node}.${randomUUID()}`;
  let entry = first;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`the ledger did not take the entry within ${LEDGER_APPEND_TIMEOUT_MS / 1000} s`)),
      LEDGER_APPEND_TIMEOUT_MS,
    );
  });
  try {
    const append = async (): Promise<void> => {
      const ledger = await options.ledger(module);
      try {
        await ledger.append("tool", entry, { id });
      } catch (err) {
        // The ledger refuses an answer holding something password-like; the call is kept without it.
        if (!(err instanceof Error && err.name === "LedgerEntryError") || entry.answer === undefined)
          throw err;
        entry = { ...entry, answer: { omitted: err.message } };
        await ledger.append("tool", entry, { id });
      }
    };
    await Promise.race([append(), timeout]);
    return undefined;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    const refused = err instanceof Error && err.name === "LedgerEntryError";
    if (!refused && options.backlog?.add(module, "tool", entry, id) === true) {
      return {
        problem: `the ledger entry for this call is not written yet (${why}): the agent keeps it and appends it once ${module}'s ledger takes it`,
        waits: true,
      };
    }
    return {
      problem: `the ledger entry for this call was not written to ${module}'s ledger: ${why}`,
      waits: false,
    };
  } finally {
    clearTimeout(timer);
  }
}

// The ledger keeps what a person reads back later; a very large answer (a status of thousands of
// consumers) is summarised rather than refused, so the call itself is never lost.
function forLedger(answer: unknown): unknown {
  const bytes = Buffer.byteLength(JSON.stringify(answer) ?? "null");
  if (bytes <= MAX_LEDGER_ANSWER_BYTES) return answer;
  const count = Array.isArray(answer)
    ? { entries: answer.length }
    : Array.isArray((answer as { consumers?: unknown } | null)?.consumers)
      ? { consumers: (answer as { consumers: unknown[] }).consumers.length }
      : {};
  return {
    summarised: true,
    bytes,
    ...count,
    note: `the answer was larger than the ${MAX_LEDGER_ANSWER_BYTES} bytes the ledger keeps`,
  };
}

/** `value` with every string scrubbed of `secrets` (raw and escaped forms), however deep. */
export function scrubValue(value: unknown, secrets: readonly string[]): unknown {
  if (secrets.length === 0) return value;
  if (typeof value === "string") return redactSecrets(value, secrets);
  if (Array.isArray(value)) return value.map((v) => scrubValue(v, secrets));
  if (typeof value === "object" && value !== null) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubValue(v, secrets)]));
  }
  return value;
}

/**
 * Every secret this node holds: the passwords in its secret files (each module's `passwords/` and `secrets/`)
 * and the passwords of the server URLs in `env` (a provider's admin URL). Unreadable files are skipped.
 */
export async function nodeSecrets(
  stateDir: string,
  env: Readonly<Record<string, string | undefined>>,
): Promise<string[]> {
  const found = new Set<string>();
  for (const value of Object.values(env)) {
    if (value !== undefined && isServerUrl(value)) for (const s of secretsOfUrl(value)) found.add(s);
  }
  // Every copy of a password on this node: each consumer's own, each provider's, and an older agent's.
  const files: string[] = [];
  const modules = join(stateDir, "modules");
  for (const module of await readdir(modules).catch((): string[] => [])) {
    for (const kind of ["passwords", "secrets"]) {
      const dir = join(modules, module, kind);
      for (const name of await readdir(dir).catch((): string[] => [])) files.push(join(dir, name));
    }
  }
  const legacy = await readdir(join(stateDir, "secrets"), { recursive: true, withFileTypes: true }).catch(
    () => [],
  );
  for (const entry of legacy) if (entry.isFile()) files.push(join(entry.parentPath, entry.name));
  for (const file of files) {
    // Dot files are the atomic writer's temp files.
    if (basename(file).startsWith(".")) continue;
    const text = await readFile(file, "utf8").catch(() => "");
    const password = text.replace(/\r?\n$/, "");
    if (password !== "") found.add(password);
  }
  return [...found];
}
